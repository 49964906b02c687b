// Benchmark finetune: BCD's accuracy claim where it is made, instruction fine-tuning of a
// pretrained model. A base model (the tiny demo's shape) is pretrained on the demo corpus with
// full AdamW, once (cached under the build directory); then, from that base and for the same
// wall-clock budget, it is fine-tuned on LIMA instruction records (plain chat template, loss on
// response tokens only) by full AdamW, BCD keeping Adam moments, BCD resetting them (BAdam), and
// the variants below (LR, frozen embedding, per-visit warmup).
// Reported per method, over several rounds (seeds): the held-out loss on records fine-tuning
// never saw (response tokens only), and forgetting: the change of the base domain's validation
// loss, also per nat of held-out loss gained. ratio = the best BCD method's (by median) held-out
// loss / the best full-parameter method's in the same round, median over rounds. Last line: one
// JSON object.
//
// Equal wall-clock: each method's seconds per step are measured over a short calibration run
// covering every block, relative to the reference method's in the same round (rounds alternate
// which method goes first; the median ratio counts), and its step count is set so the run fills
// the budget with a full cosine schedule. Rounds alternate the method order too.
//
// Usage: bench_finetune [LIMA_JSONL]  (default ../shared/data/lima-900.jsonl beside the source)
// Environment: BENCH_BUDGET_S (seconds per fine-tuning run, default 60), BENCH_ROUNDS (3),
// BENCH_BASE_STEPS (pretraining steps of the base, default 500 = the demo), BENCH_LR (fine-tuning
// peak LR, default 1e-3: AdamW's best of 3e-4, 1e-3, 2e-3), BENCH_K (BCD steps per visit; default: four passes over the blocks),
// BENCH_METHODS (which methods; see below: built-ins and variants with their own overrides),
// BENCH_CAL_ROUNDS (calibration rounds, default 3).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/config.h"
#include "base/files.h"
#include "bench_util.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "model/weights.h"
#include "optim/bcd_scheduler.h"
#include "runtime/trainer.h"

using namespace bcd;
using bench::env_double;
using bench::env_int;
using bench::median;
namespace fs = std::filesystem;

namespace {

struct Method {
  std::string name;
  std::vector<std::string> overrides;
};

// Validation loss of a weights file's model on `ds` (the whole validation split).
double val_loss_of(const std::string& weights, const TokenDataset& ds, const Config& shape) {
  const Config cfg = load_config_text(read_weights_config(weights), weights, {});
  LlamaModel model(cfg.model, torch::kFloat32, std::nullopt);
  load_weights(model, weights);
  return evaluate_val_loss(model, ds, shape.train.batch_size, shape.train.seq_len, 1 << 30, nullptr);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t next; (next = s.find(sep, at)) != std::string::npos; at = next + 1) out.push_back(s.substr(at, next - at));
  out.push_back(s.substr(at));
  return out;
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
  const double budget_s = env_double("BENCH_BUDGET_S", 60);
  const int rounds = env_int("BENCH_ROUNDS", 3);
  const int base_steps = env_int("BENCH_BASE_STEPS", 500);
  const double lr = env_double("BENCH_LR", 1e-3);
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

  // The methods. Built in: AdamW and BCD (moments kept, or reset as BAdam) at the fine-tuning LR,
  // each side also at twice that LR (so each is compared at its better LR), and the BCD variants
  // measured for what makes BCD reach AdamW: the embedding frozen (the layers get its visits), a
  // per-visit LR warmup at 2x LR, and the best of them, the embedding frozen at 2x LR.
  // BENCH_METHODS picks them: `;`-separated entries, each a built-in name or
  // NAME:OVERRIDE[,OVERRIDE...] (a variant with its own --section.key=value overrides, applied
  // after the bench's own, so they win: --train.lr=1e-3, --bcd.switch_every=5). A variant is BCD
  // unless its overrides turn BCD off.
  const std::string lr2 = fmt::format("--train.lr={}", 2 * lr);
  const std::vector<Method> builtin = {
      {"adamw", {"--bcd.enabled=false"}},
      {"adamw_2lr", {"--bcd.enabled=false", lr2}},
      {"bcd_keep", {"--bcd.enabled=true", "--bcd.state_on_switch=keep"}},
      {"bcd_reset", {"--bcd.enabled=true", "--bcd.state_on_switch=reset"}},
      {"bcd_keep_2lr", {"--bcd.enabled=true", "--bcd.state_on_switch=keep", lr2}},
      {"bcd_keep_noembed", {"--bcd.enabled=true", "--bcd.state_on_switch=keep", "--bcd.include_embed=false"}},
      {"bcd_keep_2lr_vw4", {"--bcd.enabled=true", "--bcd.state_on_switch=keep", lr2, "--bcd.visit_warmup=4"}},
      {"bcd_keep_noembed_2lr", {"--bcd.enabled=true", "--bcd.state_on_switch=keep", "--bcd.include_embed=false", lr2}},
  };
  std::vector<Method> methods;
  const char* spec_env = std::getenv("BENCH_METHODS");
  std::string spec = spec_env && *spec_env ? spec_env : "";
  if (spec.empty())
    for (const Method& m : builtin) spec += m.name + ";";
  for (const std::string& entry : split(spec, ';')) {
    if (entry.empty()) continue;
    const auto colon = entry.find(':');
    Method m{entry.substr(0, colon), {}};
    if (colon == std::string::npos) {
      auto it = std::find_if(builtin.begin(), builtin.end(), [&](const Method& b) { return b.name == m.name; });
      if (it == builtin.end()) {
        fmt::print(stderr, "bench finetune: BENCH_METHODS: unknown method '{}' (see the built-ins in {}; or NAME:--section.key=value,...)\n", m.name, __FILE__);
        return 2;
      }
      m = *it;
    } else {
      for (const std::string& o : split(entry.substr(colon + 1), ',')) m.overrides.push_back(o);
      if (std::none_of(m.overrides.begin(), m.overrides.end(), [](const std::string& o) { return o.rfind("--bcd.enabled=", 0) == 0; }))
        m.overrides.insert(m.overrides.begin(), "--bcd.enabled=true");
    }
    methods.push_back(m);
  }
  auto config_of = [&](const Method& m, const std::vector<std::string>& bench_ov) {
    std::vector<std::string> ov = bench_ov;
    ov.insert(ov.end(), m.overrides.begin(), m.overrides.end());
    return load_config(src + "/configs/tiny.toml", ov);
  };
  // Units (blocks a BCD pass visits) of a method's configuration: the trainer's own partition.
  auto n_units_of = [&](Config c) -> int64_t {
    c.model.vocab_size = ft_ds.vocab_size();
    return static_cast<int64_t>(make_units(LlamaModel(c.model), c.bcd).size());
  };
  // A calibration run forces K (after the method's overrides): a step's cost does not depend on
  // K, but a method's own long K would keep a short calibration run on one block.
  auto run = [&](const Method& m, int64_t steps, int64_t k, int64_t seed, bool final_run) {
    std::vector<std::string> ov;
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
    Method forced = m;
    if (!final_run) forced.overrides.push_back("--bcd.switch_every=" + std::to_string(k));
    const Config c = config_of(forced, ov);
    return std::make_pair(run_training(c, /*quiet=*/true, "", /*overwrite=*/true), c);
  };

  // Calibration: seconds per step over two passes of short visits (K = 2) of every block, in
  // BENCH_CAL_ROUNDS rounds that alternate which method goes first. The machine's speed drifts
  // (2x between minutes), so each method's cost is taken relative to the reference (the first
  // full-parameter method) in the same round, the median of those ratios: a drift changes
  // every method's budget alike, not one method's against another's.
  std::map<std::string, std::vector<double>> cal;
  std::map<std::string, int64_t> units, cal_k;
  std::string ref;
  for (const Method& m : methods) {
    const Config c = config_of(m, {});
    units[m.name] = n_units_of(c);
    cal_k[m.name] = std::max<int64_t>(2, c.bcd.visit_warmup + 1);  // a visit holds its warmup
    if (ref.empty() && !c.bcd.enabled) ref = m.name;
  }
  if (ref.empty()) ref = methods.front().name;
  const int cal_rounds = env_int("BENCH_CAL_ROUNDS", 3);
  for (int r = 0; r < cal_rounds; ++r) {
    for (size_t i = 0; i < methods.size(); ++i) {
      const Method& m = methods[r % 2 ? methods.size() - 1 - i : i];
      const TrainSummary s = run(m, 2 * cal_k[m.name] * units[m.name], cal_k[m.name], 1, false).first;
      cal[m.name].push_back(static_cast<double>(shape.train.batch_size * shape.train.seq_len) / s.tokens_per_s);
    }
  }
  std::map<std::string, int64_t> steps;
  std::map<std::string, double> cost;  // s/step relative to the reference, median of the rounds
  for (const Method& m : methods) {
    std::vector<double> rel;
    for (int r = 0; r < cal_rounds; ++r) rel.push_back(cal[m.name][r] / cal[ref][r]);
    cost[m.name] = median(rel);
    steps[m.name] = std::max<int64_t>(20, static_cast<int64_t>(budget_s / (median(cal[ref]) * cost[m.name])));
    fmt::print("calibration {}: {:.3f} s/step, {:.3f} x {}'s -> {} steps\n", m.name, median(cal[m.name]), cost[m.name],
               ref, steps[m.name]);
  }
  std::fflush(stdout);

  // Rounds: every method from the same base, seeds 1..rounds, order alternating.
  nlohmann::json out = {{"name", "finetune"},       {"budget_s", budget_s},
                        {"rounds", rounds},          {"lr", lr},
                        {"base_steps", base_steps},  {"base_domain_val_loss", base_domain_before},
                        {"heldout_loss_base", heldout_before}, {"unigram_heldout_loss", ft_ds.unigram_val_loss()}};
  std::map<std::string, std::vector<double>> heldout, forgetting, wall;
  std::map<std::string, int64_t> ks;
  std::map<std::string, double> lrs;
  std::map<std::string, bool> is_bcd;
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < methods.size(); ++i) {
      const Method& m = methods[r % 2 ? methods.size() - 1 - i : i];
      // K: four passes over the blocks in the budget (BAdam's K = 50-100 is for runs of thousands
      // of steps), unless BENCH_K or the method sets it.
      const int64_t k = env_int("BENCH_K", 0) > 0 ? env_int("BENCH_K", 0) : std::max<int64_t>(5, steps[m.name] / (4 * units[m.name]));
      const auto [s, c] = run(m, steps[m.name], k, r + 1, true);
      is_bcd[m.name] = c.bcd.enabled;
      ks[m.name] = c.bcd.enabled ? c.bcd.switch_every : 0;
      lrs[m.name] = c.train.lr;
      const double h = s.final_val_loss.value_or(NAN);
      const double f = val_loss_of(tmp + "/" + m.name + "/model.h5", base_ds, shape) - base_domain_before;
      heldout[m.name].push_back(h);
      forgetting[m.name].push_back(f);
      wall[m.name].push_back(s.wall_s);
      fmt::print("round {} {}: {} steps{}, lr {:g}, held-out {:.4f}, forgetting {:+.4f}, {:.0f} s\n", r + 1, m.name,
                 steps[m.name], c.bcd.enabled ? fmt::format(" (K {})", ks[m.name]) : "", c.train.lr, h, f, s.wall_s);
      std::fflush(stdout);
    }
  }
  // Forgetting per nat gained: forgetting / (the base's held-out loss - the method's), so methods
  // that reach different held-out losses compare on what they pay for what they learn.
  auto per_gain = [&](const std::string& name) {
    std::vector<double> v;
    for (size_t r = 0; r < heldout[name].size(); ++r) v.push_back(forgetting[name][r] / (heldout_before - heldout[name][r]));
    return v;
  };
  fmt::print("\n| method | steps | K | lr | held-out loss, median [min, max] | forgetting (demo-corpus val loss change) | forgetting per nat gained | wall s |\n"
             "|---|---|---|---|---|---|---|---|\n");
  std::string best_bcd, best_full;
  for (const Method& m : methods) {
    const std::string name = m.name;
    out["methods"][name] = {{"steps", steps[name]},
                            {"bcd", is_bcd[name]},
                            {"switch_every", ks[name]},
                            {"lr", lrs[name]},
                            {"overrides", m.overrides},
                            {"s_per_step", median(cal[name])},
                            {"cost_vs_reference", cost[name]},
                            {"heldout_loss", heldout[name]},
                            {"heldout_loss_median", median(heldout[name])},
                            {"forgetting", forgetting[name]},
                            {"forgetting_median", median(forgetting[name])},
                            {"forgetting_per_gain_median", median(per_gain(name))},
                            {"wall_s_median", median(wall[name])}};
    fmt::print("| {} | {} | {} | {:g} | {} | {} | {:.3f} | {:.0f} |\n", name, steps[name],
               is_bcd[name] ? std::to_string(ks[name]) : std::string("-"), lrs[name], spread(heldout[name]),
               spread(forgetting[name]), median(per_gain(name)), median(wall[name]));
    std::string& b = is_bcd[name] ? best_bcd : best_full;
    if (b.empty() || median(heldout[name]) < median(heldout[b])) b = name;
  }
  // ratio: the best BCD method over the best full-parameter one (each by its median, so an LR
  // grid compares each side at its best LR), paired by round (same seed), median over rounds.
  if (!best_bcd.empty() && !best_full.empty()) {
    std::vector<double> per_round;
    for (int r = 0; r < rounds; ++r) per_round.push_back(heldout[best_bcd][r] / heldout[best_full][r]);
    out["best_bcd"] = best_bcd;
    out["best_full"] = best_full;
    out["ratio_per_round"] = per_round;
    out["ratio"] = median(per_round);
  }
  fmt::print("{}\n", out.dump());
  return 0;
}
