// Training loop: forward, backward, clip, AdamW, log — top to bottom like the algorithm.
#include "runtime/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "io/dataset.h"
#include "io/loader.h"
#include "io/tokenizer.h"
#include "io/weights.h"
#include "model/hf_config.h"
#include "model/llama.h"
#include "runtime/error.h"
#include "runtime/metrics.h"
#include "runtime/bcd_scheduler.h"
#include "runtime/block_optimizer.h"
#include "runtime/optimizer.h"
#include "runtime/sampler.h"

namespace bcd {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string format_duration(double s) {
  if (s < 0 || !std::isfinite(s)) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) user_error("{}: cannot write", path);
}

}  // namespace

void configure_threads(int64_t threads) {
  const int64_t n = threads > 0 ? threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
  torch::set_num_threads(static_cast<int>(n));
}

double evaluate_val_loss(const LlamaModel& model, const TokenDataset& ds, int64_t batch_size,
                         int64_t seq_len, int64_t batches) {
  torch::NoGradGuard ng;
  DataLoader val(ds, Split::kVal, batch_size, seq_len, /*seed=*/0, /*shuffle=*/false, /*prefetch=*/false);
  // Never count a window twice: at most one pass over the validation split.
  const int64_t max_batches = std::max<int64_t>(1, val.windows_per_epoch() / batch_size);
  const int64_t n = std::min(batches, max_batches);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += model.loss(val.next()).item<double>();
  return sum / static_cast<double>(n);
}

TrainSummary run_training(Config cfg, bool quiet) {
  const TrainConfig& tc = cfg.train;
  configure_threads(tc.threads);
  auto say = [&](const std::string& line) {
    if (!quiet) fmt::print("{}\n", line), std::fflush(stdout);
  };

  // ---- Data ----
  if (cfg.data.path.empty()) user_error("config: [data] path is required (a directory from `bcdtrain prepare`)");
  TokenDataset ds = TokenDataset::open(cfg.data.path);
  Tokenizer tok = Tokenizer::load(ds.tokenizer_path());
  DataLoader train_loader(ds, Split::kTrain, tc.batch_size, tc.seq_len, static_cast<uint64_t>(tc.seed));
  // Validation needs at least one window; checked up front so the run does not fail at the end.
  { DataLoader probe(ds, Split::kVal, 1, tc.seq_len, 0, false, false); }

  // ---- Model ----
  ModelConfig mc = resolve_model_config(cfg.model);
  if (mc.vocab_size == 0) mc.vocab_size = ds.vocab_size();
  if (mc.vocab_size < ds.vocab_size())
    user_error("config: [model] vocab_size {} is smaller than the dataset's tokenizer vocabulary {} ({})",
               mc.vocab_size, ds.vocab_size(), cfg.data.path);
  if (tc.seq_len > mc.max_seq_len)
    user_error("config: [train] seq_len ({}) exceeds the model's max_seq_len ({})", tc.seq_len, mc.max_seq_len);
  cfg.model = mc;
  LlamaModel model(mc, tc.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32);
  model.init_weights(static_cast<uint64_t>(tc.seed));

  // ---- BCD schedule and optimizer ----
  const BcdConfig& bc = cfg.bcd;
  std::vector<TrainUnit> units = make_units(model, bc);
  std::vector<int> fixed;
  if (bc.enabled && bc.order == "fixed")
    for (const std::string& name : bc.fixed_order) {
      auto it = std::find_if(units.begin(), units.end(), [&](const TrainUnit& u) { return u.name == name; });
      if (it == units.end()) {
        std::string valid;
        for (const auto& u : units) valid += (valid.empty() ? "" : ", ") + u.name;
        user_error("config: [bcd] fixed_order: unknown block \"{}\" (blocks: {})", name, valid);
      }
      fixed.push_back(static_cast<int>(it - units.begin()));
    }
  BcdScheduler sched(static_cast<int>(units.size()), bc, static_cast<uint64_t>(tc.seed), fixed);
  std::unique_ptr<FullAdamW> torch_opt;
  std::unique_ptr<BlockAdamW> block_opt;
  if (cfg.optim.impl == "torch") {
    model.set_trainable(true);
    torch_opt = std::make_unique<FullAdamW>(model, cfg.optim);
  } else {
    block_opt = std::make_unique<BlockAdamW>(model, units, cfg.optim, bc.state_on_switch == "keep");
    block_opt->activate(sched.current());
  }

  // ---- Run directory ----
  std::error_code ec;
  fs::create_directories(tc.run_dir, ec);
  if (ec) user_error("config: [train] run_dir {}: cannot create ({})", tc.run_dir, ec.message());
  write_file(tc.run_dir + "/config.toml", config_to_toml(cfg));
  fs::copy_file(ds.tokenizer_path(), tc.run_dir + "/tokenizer.model", fs::copy_options::overwrite_existing, ec);
  if (ec) user_error("{}: cannot copy tokenizer into {} ({})", ds.tokenizer_path(), tc.run_dir, ec.message());
  MetricsWriter metrics(tc.run_dir + "/metrics.jsonl");

  TrainSummary sum;
  sum.num_params = model.num_params();
  sum.unigram_val_loss = ds.unigram_val_loss();
  say(fmt::format("model: {} layers, d_model {}, {} heads ({} kv), vocab {}, {:.2f}M parameters in {} blocks",
                  mc.n_layers, mc.d_model, mc.n_heads, mc.kv_heads(), mc.vocab_size,
                  static_cast<double>(sum.num_params) / 1e6, model.n_blocks()));
  say(fmt::format("data: {} train / {} val tokens ({}), unigram val loss {:.4f}",
                  ds.tokens(Split::kTrain).size(), ds.tokens(Split::kVal).size(), cfg.data.path,
                  ds.unigram_val_loss()));
  say(fmt::format("train: {} steps x {} tokens/step, {} AdamW ({}) lr {:g}, {} working weights, {} threads",
                  tc.steps, tc.batch_size * tc.seq_len * tc.grad_accum, cfg.optim.impl,
                  bc.enabled ? "block coordinate descent" : "full-parameter", tc.lr, tc.dtype,
                  torch::get_num_threads()));
  if (bc.enabled) {
    std::string names;
    for (const auto& u : units) names += (names.empty() ? "" : " ") + u.name;
    say(fmt::format("bcd: {} blocks [{}], {} steps per visit, order {}, moments {} on switch", units.size(), names,
                    bc.switch_every, bc.order, bc.state_on_switch));
  }

  // ---- Loop ----
  const int64_t tokens_per_step = tc.batch_size * tc.seq_len * tc.grad_accum;
  const auto t_start = Clock::now();
  double train_s = 0;           // wall time in training steps (validation excluded)
  double interval_s = 0;        // since the last log line
  int64_t interval_steps = 0;
  for (int64_t step = 1; step <= tc.steps; ++step) {
    const auto t0 = Clock::now();
    const double lr = lr_at(tc, step - 1);
    const int unit = sched.current();
    // Backward stops at the active block: everything below runs without autograd.
    const int grad_from = bc.enabled ? units[unit].lowest_block() : 0;
    model.zero_grad();
    double loss_sum = 0;
    for (int64_t micro = 0; micro < tc.grad_accum; ++micro) {
      torch::Tensor batch = train_loader.next();                 // (B, T+1)
      torch::Tensor loss = model.loss(batch, grad_from);         // forward
      (loss / static_cast<double>(tc.grad_accum)).backward();    // backward
      loss_sum += loss.item<double>();
    }
    const double loss = loss_sum / static_cast<double>(tc.grad_accum);
    if (!std::isfinite(loss)) user_error("training diverged at step {}: loss is {}", step, loss);
    const double grad_norm = clip_grad_norm(model, tc.grad_clip);
    if (torch_opt) torch_opt->step(lr);                          // update
    else block_opt->step(lr);
    const double dt = seconds_since(t0);
    train_s += dt, interval_s += dt, ++interval_steps;
    if (step == 1) sum.first_loss = loss;
    sum.final_loss = loss;

    std::optional<double> val_loss;
    if ((tc.val_every > 0 && step % tc.val_every == 0) || step == tc.steps) {
      val_loss = evaluate_val_loss(model, ds, tc.batch_size, tc.seq_len, tc.val_batches);
      sum.final_val_loss = val_loss;
    }
    if (step % tc.log_every == 0 || step == tc.steps || val_loss) {
      const double tps = static_cast<double>(tokens_per_step * interval_steps) / std::max(interval_s, 1e-9);
      nlohmann::json rec = {{"step", step},
                            {"loss", loss},
                            {"lr", lr},
                            {"grad_norm", grad_norm},
                            {"tokens", tokens_per_step * step},
                            {"tokens_per_s", tps},
                            {"elapsed_s", seconds_since(t_start)}};
      if (val_loss) rec["val_loss"] = *val_loss;
      if (bc.enabled) {
        rec["block"] = units[unit].name;
        rec["block_id"] = unit;
        rec["block_epoch"] = sched.epoch();
        rec["step_in_visit"] = sched.step_in_visit();
      }
      rec["optim_state_bytes"] = torch_opt ? torch_opt->state_bytes() : block_opt->state_bytes();
      if (block_opt) rec["block_state_bytes"] = block_opt->unit_moment_bytes(unit);
      if (block_opt && bc.enabled && (sched.step_in_visit() == 0 || step == 1)) {
        nlohmann::json per_block;  // moments held per block at the start of each visit
        for (size_t u = 0; u < units.size(); ++u) per_block[units[u].name] = block_opt->unit_moment_bytes(static_cast<int>(u));
        rec["state_bytes_by_block"] = per_block;
      }
      metrics.write(rec);
      const double eta = train_s / static_cast<double>(step) * static_cast<double>(tc.steps - step);
      std::string line = fmt::format("step {:>{}}/{} | loss {:.4f} | lr {:.2e} | {:.0f} tok/s | ETA {}",
                                     step, std::to_string(tc.steps).size(), tc.steps, loss, lr, tps,
                                     format_duration(eta));
      if (val_loss) line += fmt::format(" | val {:.4f}", *val_loss);
      if (bc.enabled) line += fmt::format(" | {} (epoch {})", units[unit].name, sched.epoch());
      say(line);
      interval_s = 0, interval_steps = 0;
    }
    if (sched.step() && block_opt) block_opt->activate(sched.current());  // switch blocks
  }
  sum.steps = tc.steps;
  sum.tokens_per_s = static_cast<double>(tokens_per_step * tc.steps) / std::max(train_s, 1e-9);

  // ---- Outputs ----
  save_weights(model, tc.run_dir + "/model.h5", config_to_toml(cfg));
  SampleOptions so;
  so.max_new_tokens = cfg.sample.max_new_tokens;
  so.temperature = cfg.sample.temperature;
  so.top_k = cfg.sample.top_k;
  so.top_p = cfg.sample.top_p;
  std::string samples_txt;
  for (size_t i = 0; i < cfg.sample.prompts.size(); ++i) {
    sum.samples.push_back(generate_text(model, tok, cfg.sample.prompts[i], so, static_cast<uint64_t>(tc.seed) + i));
    samples_txt += "--- sample " + std::to_string(i + 1) + " ---\n" + sum.samples.back() + "\n";
  }
  write_file(tc.run_dir + "/samples.txt", samples_txt);
  sum.wall_s = seconds_since(t_start);
  say(fmt::format("done: {} steps in {}, {:.0f} tok/s, loss {:.4f} -> {:.4f}, val {:.4f} (unigram {:.4f})",
                  sum.steps, format_duration(sum.wall_s), sum.tokens_per_s, sum.first_loss, sum.final_loss,
                  sum.final_val_loss.value_or(NAN), sum.unigram_val_loss));
  if (!samples_txt.empty()) say("samples:\n" + samples_txt);
  say(fmt::format("wrote {}/{{config.toml, metrics.jsonl, model.h5, samples.txt}}", tc.run_dir));
  return sum;
}

}  // namespace bcd
