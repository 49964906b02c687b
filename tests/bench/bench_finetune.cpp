// Benchmark finetune: BCD's accuracy claim where it is made, instruction fine-tuning of a
// pretrained model. A base model (the tiny demo's shape) is pretrained on the demo corpus with
// full AdamW, once (cached under the build directory); then, from that base and for the same
// wall-clock budget, it is fine-tuned on LIMA instruction records (plain chat template, loss on
// response tokens only) by full AdamW, BCD keeping Adam moments, and BCD resetting them (BAdam).
// Reported per method, over several rounds (seeds): the held-out loss on records fine-tuning
// never saw (response tokens only), and forgetting: the change of the base domain's validation
// loss. ratio = the better BCD method's median held-out loss / AdamW's. Last line: one JSON object.
//
// Equal wall-clock: each method's seconds per step are measured over a short calibration run
// covering every block, in rounds that alternate which method goes first (the median counts), and
// its step count is set so the run fills the budget with a full cosine schedule. Rounds alternate
// the method order too.
//
// Usage: bench_finetune [LIMA_JSONL]  (default ../shared/data/lima-900.jsonl beside the source)
// Environment: BENCH_BUDGET_S (seconds per fine-tuning run, default 120), BENCH_ROUNDS (3),
// BENCH_BASE_STEPS (pretraining steps of the base, default 500 = the demo), BENCH_LR (fine-tuning
// peak LR, default 3e-4), BENCH_K (BCD steps per visit; default: four passes over the blocks).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/config.h"
#include "base/files.h"
#include "bench_util.h"
#include "io/dataset.h"
#include "model/weights.h"
#include "runtime/trainer.h"

using namespace bcd;
using bench::env_double;
using bench::env_int;
using bench::median;
namespace fs = std::filesystem;

namespace {

struct Method {
  const char* name;
  std::vector<std::string> overrides;
};

// Validation loss of a weights file's model on `ds` (the whole validation split).
double val_loss_of(const std::string& weights, const TokenDataset& ds, const Config& shape) {
  const Config cfg = load_config_text(read_weights_config(weights), weights, {});
  LlamaModel model(cfg.model, torch::kFloat32, std::nullopt);
  load_weights(model, weights);
  return evaluate_val_loss(model, ds, shape.train.batch_size, shape.train.seq_len, 1 << 30, nullptr);
}

std::string spread(const std::vector<double>& v) {
  return fmt::format("{:.4f} [{:.4f}, {:.4f}]", median(v), *std::min_element(v.begin(), v.end()),
                     *std::max_element(v.begin(), v.end()));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string src = BCD_SOURCE_DIR;
  const std::string lima = argc > 1 ? argv[1] : src + "/../shared/data/lima-900.jsonl";
  const std::string fortunes = src + "/data/fortunes";
  const double budget_s = env_double("BENCH_BUDGET_S", 120);
  const int rounds = env_int("BENCH_ROUNDS", 3);
  const int base_steps = env_int("BENCH_BASE_STEPS", 500);
  const double lr = env_double("BENCH_LR", 3e-4);
  const std::string cache = std::string(BCD_BUILD_DIR) + "/bench-finetune";
  const std::string tmp = fs::temp_directory_path().string() + "/bcd-bench-finetune";
  if (!fs::exists(lima)) {
    fmt::print(stderr, "bench finetune: {} not found (LIMA instruction records, one JSON object a line)\n", lima);
    return 2;
  }
  fs::create_directories(cache);
  fs::create_directories(tmp);
  if (!fs::exists(fortunes + "/tokens.h5")) {
    PrepareOptions p;
    p.inputs = {"/usr/share/games/fortunes"};
    p.out_dir = fortunes;
    p.vocab_size = 2048;
    prepare_dataset(p);
  }

  // ---- The base: the demo model pretrained with full AdamW, made once per setting ----
  const std::vector<std::string> base_ov = {"--bcd.enabled=false", "--data.path=" + fortunes,
                                            "--train.steps=" + std::to_string(base_steps), "--train.val_every=0",
                                            "--train.val_batches=1000", "--sample.prompts=[]", "--train.checkpoint_every=0"};
  std::string key;
  for (const std::string& o : base_ov) key += o + "\n";
  key += read_file(src + "/configs/tiny.toml", "config");
  const std::string base_dir = fmt::format("{}/base-{:016x}", cache, std::hash<std::string>{}(key));
  const std::string base = base_dir + "/model.h5";
  if (!fs::exists(base)) {
    fmt::print("pretraining the base ({} AdamW steps on the demo corpus) into {}\n", base_steps, base_dir);
    std::fflush(stdout);
    std::vector<std::string> ov = base_ov;
    ov.push_back("--train.run_dir=" + base_dir);
    run_training(load_config(src + "/configs/tiny.toml", ov), /*quiet=*/true, "", /*overwrite=*/true);
  }

  // ---- The fine-tuning data, tokenized with the base's tokenizer ----
  const std::string ft_data = cache + "/lima-plain";
  if (!fs::exists(ft_data + "/tokens.h5")) {
    PrepareOptions p;
    p.inputs = {lima};
    p.out_dir = ft_data;
    p.tokenizer_model = base_dir + "/tokenizer.model";
    p.chat_template = "plain";
    p.val_fraction = 0.1;
    p.force = true;
    prepare_dataset(p);
  }
  const TokenDataset base_ds = TokenDataset::open(fortunes), ft_ds = TokenDataset::open(ft_data);
  const Config shape = load_config(src + "/configs/tiny.toml", {});
  const double base_domain_before = val_loss_of(base, base_ds, shape);
  const double heldout_before = val_loss_of(base, ft_ds, shape);
  fmt::print("base: demo-corpus val loss {:.4f}, held-out instruction loss {:.4f} (unigram {:.4f})\n",
             base_domain_before, heldout_before, ft_ds.unigram_val_loss());
  std::fflush(stdout);

  const std::vector<Method> methods = {
      {"adamw", {"--bcd.enabled=false"}},
      {"bcd_keep", {"--bcd.enabled=true", "--bcd.state_on_switch=keep"}},
      {"bcd_reset", {"--bcd.enabled=true", "--bcd.state_on_switch=reset"}},
  };
  const int64_t n_units = shape.model.n_layers / shape.bcd.layers_per_block + 2;
  auto run = [&](const Method& m, int64_t steps, int64_t k, int64_t seed, bool final_run) {
    std::vector<std::string> ov = m.overrides;
    ov.push_back("--data.path=" + ft_data);
    ov.push_back("--model.init_from=" + base);
    ov.push_back("--train.run_dir=" + tmp + "/" + m.name);
    ov.push_back("--train.steps=" + std::to_string(steps));
    ov.push_back("--train.seed=" + std::to_string(seed));
    ov.push_back(fmt::format("--train.lr={}", lr));
    ov.push_back("--train.warmup_steps=" + std::to_string(std::max<int64_t>(1, steps / 20)));
    ov.push_back("--train.val_every=0");
    ov.push_back("--train.val_batches=" + std::string(final_run ? "100000" : "1"));
    ov.push_back("--train.log_every=" + std::to_string(std::max<int64_t>(1, steps / 10)));
    ov.push_back("--train.checkpoint_every=0");
    ov.push_back("--sample.prompts=[]");
    ov.push_back("--bcd.switch_every=" + std::to_string(k));
    return run_training(load_config(src + "/configs/tiny.toml", ov), /*quiet=*/true, "", /*overwrite=*/true);
  };

  // Calibration: seconds per step over two visits of every block (K = 2), rounds alternating.
  std::map<std::string, std::vector<double>> cal;
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < methods.size(); ++i) {
      const Method& m = methods[r % 2 ? methods.size() - 1 - i : i];
      const TrainSummary s = run(m, 2 * n_units, 2, 1, false);
      cal[m.name].push_back(static_cast<double>(shape.train.batch_size * shape.train.seq_len) / s.tokens_per_s);
    }
  }
  std::map<std::string, int64_t> steps;
  for (const Method& m : methods) {
    steps[m.name] = std::max<int64_t>(20, static_cast<int64_t>(budget_s / median(cal[m.name])));
    fmt::print("calibration {}: {:.3f} s/step -> {} steps\n", m.name, median(cal[m.name]), steps[m.name]);
  }
  std::fflush(stdout);

  // Rounds: every method from the same base, seeds 1..rounds, order alternating.
  nlohmann::json out = {{"name", "finetune"},       {"budget_s", budget_s},
                        {"rounds", rounds},          {"lr", lr},
                        {"base_steps", base_steps},  {"base_domain_val_loss", base_domain_before},
                        {"heldout_loss_base", heldout_before}, {"unigram_heldout_loss", ft_ds.unigram_val_loss()}};
  std::map<std::string, std::vector<double>> heldout, forgetting, wall;
  std::map<std::string, int64_t> ks;
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < methods.size(); ++i) {
      const Method& m = methods[r % 2 ? methods.size() - 1 - i : i];
      // K: four passes over the blocks in the budget (BAdam's K = 50-100 is for runs of thousands of steps).
      const int64_t k = env_int("BENCH_K", 0) > 0 ? env_int("BENCH_K", 0) : std::max<int64_t>(5, steps[m.name] / (4 * n_units));
      ks[m.name] = k;
      const TrainSummary s = run(m, steps[m.name], k, r + 1, true);
      const double h = s.final_val_loss.value_or(NAN);
      const double f = val_loss_of(tmp + "/" + m.name + "/model.h5", base_ds, shape) - base_domain_before;
      heldout[m.name].push_back(h);
      forgetting[m.name].push_back(f);
      wall[m.name].push_back(s.wall_s);
      fmt::print("round {} {}: {} steps (K {}), held-out {:.4f}, forgetting {:+.4f}, {:.0f} s\n", r + 1, m.name,
                 steps[m.name], k, h, f, s.wall_s);
      std::fflush(stdout);
    }
  }
  fmt::print("\n| method | steps | K | held-out loss, median [min, max] | forgetting (demo-corpus val loss change) | wall s |\n"
             "|---|---|---|---|---|---|\n");
  for (const Method& m : methods) {
    const std::string name = m.name;
    out["methods"][name] = {{"steps", steps[name]},
                            {"switch_every", name == "adamw" ? 0 : ks[name]},
                            {"s_per_step", median(cal[name])},
                            {"heldout_loss", heldout[name]},
                            {"heldout_loss_median", median(heldout[name])},
                            {"forgetting", forgetting[name]},
                            {"forgetting_median", median(forgetting[name])},
                            {"wall_s_median", median(wall[name])}};
    fmt::print("| {} | {} | {} | {} | {} | {:.0f} |\n", name, steps[name], name == "adamw" ? std::string("-") : std::to_string(ks[name]),
               spread(heldout[name]), spread(forgetting[name]), median(wall[name]));
  }
  const double adamw = median(heldout["adamw"]);
  const double best = std::min(median(heldout["bcd_keep"]), median(heldout["bcd_reset"]));
  out["best_bcd"] = median(heldout["bcd_keep"]) <= median(heldout["bcd_reset"]) ? "bcd_keep" : "bcd_reset";
  out["ratio"] = best / adamw;
  fmt::print("{}\n", out.dump());
  return 0;
}
