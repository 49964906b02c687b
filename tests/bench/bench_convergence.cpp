// Benchmark convergence: the tiny demo model on the demo corpus trained three ways —
// BCD keeping Adam moments, BCD resetting them (BAdam), full-parameter AdamW — first for the
// same wall-clock budget, then for the same token budget. Reports validation losses and
// ratio = BCD-keep / AdamW validation loss at equal wall-clock. Last line: one JSON object.
//
// Equal wall-clock: each method's seconds per step are measured over a short calibration run
// covering every block, and its step count is set so the run fills the budget with a full
// cosine schedule (a cut-off run would be judged mid-schedule). Actual wall times are reported.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>

#include "bench_util.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "base/config.h"
#include "runtime/trainer.h"

using namespace bcd;
using bench::env_double;

namespace {

struct Method {
  const char* name;
  std::vector<std::string> overrides;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string src = BCD_SOURCE_DIR;
  const std::string data = argc > 1 ? argv[1] : src + "/data/fortunes";
  const double budget_s = env_double("BENCH_BUDGET_S", 180);
  const std::string tmp = std::filesystem::temp_directory_path().string() + "/bcd-bench-convergence";
  std::filesystem::create_directories(tmp);
  if (!std::filesystem::exists(data + "/tokens.h5")) {
    PrepareOptions p;
    p.inputs = {"/usr/share/games/fortunes"};
    p.out_dir = data;
    p.vocab_size = 2048;
    prepare_dataset(p);
  }
  const std::vector<Method> methods = {
      {"adamw", {"--bcd.enabled=false"}},
      {"bcd_keep", {"--bcd.enabled=true", "--bcd.state_on_switch=keep"}},
      {"bcd_reset", {"--bcd.enabled=true", "--bcd.state_on_switch=reset"}},
  };
  auto run = [&](const Method& m, int64_t steps, int64_t switch_every, bool final_run) {
    std::vector<std::string> ov = m.overrides;
    ov.push_back("--data.path=" + data);
    ov.push_back("--train.run_dir=" + tmp + "/" + m.name);
    ov.push_back("--train.steps=" + std::to_string(steps));
    ov.push_back("--train.val_every=0");
    ov.push_back("--train.val_batches=" + std::string(final_run ? "1000" : "1"));
    ov.push_back("--train.log_every=" + std::to_string(std::max<int64_t>(1, steps / 10)));
    ov.push_back("--sample.prompts=[]");
    if (switch_every > 0) ov.push_back("--bcd.switch_every=" + std::to_string(switch_every));
    Config cfg = load_config(src + "/configs/tiny.toml", ov);
    if (final_run) cfg.train.warmup_steps = std::min(cfg.train.warmup_steps, steps / 10);
    return run_training(cfg, /*quiet=*/true);
  };

  // Calibration: seconds per step over two visits of every block (K = 2).
  Config base = load_config(src + "/configs/tiny.toml", {});
  const int64_t n_blocks = base.model.n_layers + 2;
  std::map<std::string, double> sec_per_step;
  for (const Method& m : methods) {
    TrainSummary s = run(m, 2 * n_blocks, 2, false);
    sec_per_step[m.name] = (2.0 * n_blocks * base.train.batch_size * base.train.seq_len) / s.tokens_per_s / (2.0 * n_blocks);
    fmt::print("calibration {}: {:.3f} s/step\n", m.name, sec_per_step[m.name]);
    std::fflush(stdout);
  }

  nlohmann::json out = {{"name", "convergence"}, {"budget_s", budget_s}, {"unigram_val_loss", 0.0}};
  // Equal wall-clock
  for (const Method& m : methods) {
    const int64_t steps = std::max<int64_t>(10, static_cast<int64_t>(budget_s / sec_per_step[m.name]));
    TrainSummary s = run(m, steps, 0, true);
    out["wallclock"][m.name] = {{"steps", steps}, {"val_loss", s.final_val_loss.value_or(NAN)},
                                {"train_loss", s.final_loss}, {"wall_s", s.wall_s}, {"tokens_per_s", s.tokens_per_s}};
    out["unigram_val_loss"] = s.unigram_val_loss;
    fmt::print("wall-clock {}: {} steps, val {:.4f}, {:.0f} s\n", m.name, steps, s.final_val_loss.value_or(NAN), s.wall_s);
    std::fflush(stdout);
  }
  // Equal tokens: every method gets the step count AdamW reached in the budget.
  const int64_t token_steps = out["wallclock"]["adamw"]["steps"].get<int64_t>();
  for (const Method& m : methods) {
    TrainSummary s = m.name == std::string("adamw") ? TrainSummary{} : run(m, token_steps, 0, true);
    if (m.name == std::string("adamw")) {
      out["tokens"][m.name] = out["wallclock"]["adamw"];
      continue;
    }
    out["tokens"][m.name] = {{"steps", token_steps}, {"val_loss", s.final_val_loss.value_or(NAN)},
                             {"train_loss", s.final_loss}, {"wall_s", s.wall_s}, {"tokens_per_s", s.tokens_per_s}};
    fmt::print("tokens {}: {} steps, val {:.4f}, {:.0f} s\n", m.name, token_steps, s.final_val_loss.value_or(NAN), s.wall_s);
    std::fflush(stdout);
  }
  const double keep = out["wallclock"]["bcd_keep"]["val_loss"], adamw = out["wallclock"]["adamw"]["val_loss"];
  out["ratio"] = keep / adamw;
  out["ratio_tokens"] = out["tokens"]["bcd_keep"]["val_loss"].get<double>() / adamw;
  fmt::print("{}\n", out.dump());
  return 0;
}
