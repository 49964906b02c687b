// Training loop: forward, backward, clip, AdamW, log — top to bottom like the algorithm.
#include "runtime/trainer.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "io/checkpoint.h"
#ifdef BCD_HAVE_CUDA_KERNELS
#include "kernels/adamw_cuda.h"
#include "kernels/host_memory.h"
#endif

#include "io/dataset.h"
#include "io/loader.h"
#include "io/tokenizer.h"
#include "model/weights.h"
#include "memory/accounting.h"
#include "memory/planner.h"
#include "model/hf_config.h"
#include "model/hf_import.h"
#include "model/llama.h"
#include "base/error.h"
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

// SIGINT / SIGTERM: finish the step, checkpoint, stop. The handler puts the default action
// back, so a second signal ends the process at once.
std::atomic<int> g_stop_signal{0};

extern "C" void on_stop_signal(int sig) {
  g_stop_signal.store(sig);
  std::signal(sig, SIG_DFL);
}

class StopSignals {
 public:
  StopSignals() {
    g_stop_signal.store(0);
    old_int_ = std::signal(SIGINT, on_stop_signal);
    old_term_ = std::signal(SIGTERM, on_stop_signal);
  }
  ~StopSignals() {
    std::signal(SIGINT, old_int_);
    std::signal(SIGTERM, old_term_);
  }
  int fired() const { return g_stop_signal.load(); }

 private:
  void (*old_int_)(int);
  void (*old_term_)(int);
};

// Keeps the records of metrics.jsonl before `first_step` (a resumed run rewrites what follows).
void truncate_metrics(const std::string& path, int64_t first_step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      if (nlohmann::json::parse(line).at("step").get<int64_t>() >= first_step) break;
    } catch (const std::exception&) {
      break;  // a torn last line of a killed run
    }
    kept += line + "\n";
  }
  in.close();
  write_file(path + ".tmp", kept);
  fs::rename(path + ".tmp", path);
}

std::string unit_group(const TrainUnit& u) { return "/rank0/optimizer/" + u.name; }

}  // namespace

torch::Device resolve_device(const std::string& device) {
#ifdef BCD_HAVE_CUDA_KERNELS
  const bool built = true;
#else
  const bool built = false;
#endif
  const bool usable = built && torch::cuda::is_available();
  if (device == "cpu" || (device == "auto" && !usable)) return torch::kCPU;
  if (!usable)
    user_error("config: [train] device = \"cuda\" but {}", built ? "LibTorch finds no usable CUDA device (is this LibTorch built with CUDA, is a GPU visible?)"
                                                                 : "this build has no CUDA kernels (configure with -DBCD_CUDA=ON and a CUDA toolkit)");
#ifdef BCD_HAVE_CUDA_KERNELS
  const std::string why = adamw_cuda_unsupported_reason(0);
  if (!why.empty()) {
    if (device == "auto") return torch::kCPU;
    user_error("config: [train] device = \"cuda\" but {}", why);
  }
#endif
  return torch::Device(torch::kCUDA, 0);
}

void apply_device_budget(MemoryConfig& mem, const torch::Device& device) {
  if (!device.is_cuda() || !mem.compute_bytes.is_auto) return;
#ifdef BCD_HAVE_CUDA_KERNELS
  const size_t total = cuda_device_total_bytes(device.index() < 0 ? 0 : device.index());
  if (total > 0) mem.compute_bytes = Bytes{total, false};
#endif
}

uint64_t process_memory_bytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(in, line))
    if (line.rfind(k, 0) == 0) return std::stoull(line.substr(k.size())) * 1024;  // "VmHWM:  1234 kB"
  return 0;
}

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

TrainSummary run_training(Config cfg, bool quiet, const std::string& resume_from) {
  const TrainConfig& tc = cfg.train;
  configure_threads(tc.threads);
  const torch::Device device = resolve_device(tc.device);  // before anything is read
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
  const BcdConfig& bc = cfg.bcd;

  // ---- Memory plan: refused before anything is allocated when it does not fit ----
  apply_device_budget(cfg.memory, device);  // compute_bytes = auto: the GPU's memory on CUDA
  const MemoryPlan plan = plan_memory(mc, bc, tc, cfg.memory);
  if (!plan.fits) user_error("memory plan does not fit: {} (`bcdtrain plan` prints the table)", plan.why_not);
  MemoryAccounting acct;
  acct.set_budget(Pool::kCompute, plan.compute.budget);
  acct.set_budget(Pool::kPinned, plan.pinned.budget);
  acct.set_budget(Pool::kHost, plan.host.budget);
  Charge activations(&acct, Pool::kCompute, kUseActivations, plan.compute.activations);

  LlamaModel model(mc, torch::TensorOptions(tc.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32).device(device));
  uint64_t working_bytes = 0;
  for (const Block& b : model.blocks()) working_bytes += static_cast<uint64_t>(b.data().nbytes());
  Charge working(&acct, Pool::kCompute, static_cast<int>(StateKind::kWorking), working_bytes);
  model.init_weights(static_cast<uint64_t>(tc.seed));
  if (resume_from.empty()) load_initial_weights(model, mc.init_from);  // [model] init_from (HF or .h5)

  // ---- BCD schedule and optimizer ----
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
  std::vector<Charge> torch_state;  // torch's AdamW: gradients and moments of every block
  const int prefetch_depth = static_cast<int>(cfg.memory.prefetch_depth);
  if (cfg.optim.impl == "torch") {
    for (StateKind k : {StateKind::kGrad, StateKind::kAdamM, StateKind::kAdamV})
      torch_state.emplace_back(&acct, Pool::kCompute, static_cast<int>(k), working_bytes);
    model.set_trainable(true);
    torch_opt = std::make_unique<FullAdamW>(model, cfg.optim);
  } else {
    StateStorage storage;
    storage.accounting = &acct;
    storage.unit_home = plan.unit_home;
    storage.stager.prefetch_depth = prefetch_depth;
    storage.stager.nvme_paths = cfg.memory.nvme_paths;
    block_opt = std::make_unique<BlockAdamW>(model, units, cfg.optim, bc.state_on_switch == "keep", storage);
  }
  if (torch_opt && (tc.checkpoint_every > 0 || !resume_from.empty()))
    user_error("config: checkpoints and --resume need [optim] impl = \"fused\" (got \"torch\")");

  // ---- Resume: weights, schedule, data position, optimizer state per unit ----
  int64_t first_step = 1;
  double resume_s = 0;
  if (!resume_from.empty()) {
    const auto t_resume = Clock::now();
    CheckpointReader ck(resume_from);
    first_step = ck.attr_int("/", "step") + 1;
    for (Block& b : model.blocks()) {
      torch::Tensor t = torch::empty({b.numel()}, torch::kFloat32);
      ck.floats("/blocks/" + b.name(), t.data_ptr<float>(), static_cast<uint64_t>(b.numel()));
      torch::NoGradGuard ng;
      b.data().copy_(t);
    }
    SchedulerState ss;
    ss.epoch = static_cast<uint64_t>(ck.attr_int("/scheduler", "epoch"));
    ss.position = static_cast<uint64_t>(ck.attr_int("/scheduler", "position"));
    ss.step_in_visit = static_cast<uint64_t>(ck.attr_int("/scheduler", "step_in_visit"));
    sched.restore(ss);
    const int64_t active = ck.attr_int("/scheduler", "active");
    if (active != sched.current())
      user_error("{}: /scheduler: active unit {} does not match the schedule's ({}); was the [bcd] config changed?",
                 resume_from, active, sched.current());
    LoaderState ls;
    ls.epoch = static_cast<uint64_t>(ck.attr_int("/rank0/loader", "epoch"));
    ls.cursor = static_cast<uint64_t>(ck.attr_int("/rank0/loader", "cursor"));
    train_loader.restore(ls);
    auto read_unit = [&](int u) {
      const std::string g = unit_group(units[u]);
      if (!ck.has(g)) return;
      std::vector<float> img(ck.length(g + "/image"));
      ck.floats(g + "/image", img.data(), img.size());
      block_opt->restore_unit_state(u, img, ck.attr_int(g, "steps"), resume_from);
    };
    for (int u = 0; u < static_cast<int>(units.size()); ++u)
      if (u != active) read_unit(u);
    block_opt->activate(static_cast<int>(active));
    read_unit(static_cast<int>(active));
    resume_s = seconds_since(t_resume);
    if (first_step > tc.steps)
      user_error("{}: checkpoint is at step {} but train.steps is {}; give --train.steps=N to go further",
                 resume_from, first_step - 1, tc.steps);
  } else if (block_opt) {
    block_opt->activate(sched.current());
  }
  if (block_opt) block_opt->prefetch(sched.lookahead(prefetch_depth));

  // ---- Run directory ----
  std::error_code ec;
  fs::create_directories(tc.run_dir, ec);
  if (ec) user_error("config: [train] run_dir {}: cannot create ({})", tc.run_dir, ec.message());
  write_file(tc.run_dir + "/config.toml", config_to_toml(cfg));
  fs::copy_file(ds.tokenizer_path(), tc.run_dir + "/tokenizer.model", fs::copy_options::overwrite_existing, ec);
  if (ec) user_error("{}: cannot copy tokenizer into {} ({})", ds.tokenizer_path(), tc.run_dir, ec.message());
  if (!resume_from.empty()) truncate_metrics(tc.run_dir + "/metrics.jsonl", first_step);
  MetricsWriter metrics(tc.run_dir + "/metrics.jsonl", /*append=*/!resume_from.empty());
  const std::string ckpt_dir = tc.run_dir + "/checkpoints";

  TrainSummary sum;
  sum.num_params = model.num_params();
  sum.unigram_val_loss = ds.unigram_val_loss();
  say(fmt::format("model: {} layers, d_model {}, {} heads ({} kv), vocab {}, {:.2f}M parameters in {} blocks",
                  mc.n_layers, mc.d_model, mc.n_heads, mc.kv_heads(), mc.vocab_size,
                  static_cast<double>(sum.num_params) / 1e6, model.n_blocks()));
  say(fmt::format("data: {} train / {} val tokens ({}), unigram val loss {:.4f}",
                  ds.tokens(Split::kTrain).size(), ds.tokens(Split::kVal).size(), cfg.data.path,
                  ds.unigram_val_loss()));
  say(fmt::format("train: {} steps x {} tokens/step, {} AdamW ({}) lr {:g}, {} working weights, on {}{}",
                  tc.steps, tc.batch_size * tc.seq_len * tc.grad_accum, cfg.optim.impl,
                  bc.enabled ? "block coordinate descent" : "full-parameter", tc.lr, tc.dtype,
                  device.is_cuda() ? "cuda" : "cpu",
                  device.is_cuda() ? "" : fmt::format(" with {} threads", torch::get_num_threads())));
  if (bc.enabled) {
    std::string names;
    for (const auto& u : units) names += (names.empty() ? "" : " ") + u.name;
    say(fmt::format("bcd: {} blocks [{}], {} steps per visit, order {}, moments {} on switch", units.size(), names,
                    bc.switch_every, bc.order, bc.state_on_switch));
  }
  if (block_opt && units.size() > 1) {
    int on_nvme = 0;
    for (Tier t : plan.unit_home) on_nvme += t == Tier::kNvme ? 1 : 0;
    auto gib = [](uint64_t b) { return static_cast<double>(b) / (1 << 30); };
    say(fmt::format("memory: compute {:.3f} GiB (plan {:.3f}), pinned pool {} x {:.1f} MiB, state homes: {} units in "
                    "host memory, {} on NVMe",
                    gib(acct.usage(Pool::kCompute).total), gib(plan.compute.total()),
                    block_opt->stager().slab_count(), static_cast<double>(block_opt->stager().slab_bytes()) / (1 << 20),
                    static_cast<int>(units.size()) - on_nvme, on_nvme));
  }

  if (!resume_from.empty())
    say(fmt::format("resumed from {} at step {} (read in {:.2f} s)", resume_from, first_step - 1, resume_s));

  // ---- Loop ----
  const int64_t tokens_per_step = tc.batch_size * tc.seq_len * tc.grad_accum;
  const auto t_start = Clock::now();
  double train_s = 0;           // wall time in training steps (validation excluded)
  double interval_s = 0;        // since the last log line
  int64_t interval_steps = 0;
  bool switch_due = false;          // the scheduler moved to a new visit after the last step
  StagerStats logged_staging;       // as of the last metrics record

  // A checkpoint after `step`: everything the next step needs. A switch that is due happens
  // first (the next step would start with it), so the active unit is the schedule's current one.
  auto save_checkpoint = [&](int64_t step) {
    const auto t0 = Clock::now();
    if (switch_due) block_opt->activate(sched.current()), switch_due = false;
    fs::create_directories(ckpt_dir, ec);
    if (ec) user_error("{}: cannot create ({})", ckpt_dir, ec.message());
    const std::string path = fmt::format("{}/step-{:08d}.h5", ckpt_dir, step);
    CheckpointWriter w(path);
    w.attr("/", "config", config_to_toml(cfg));
    w.attr("/", "step", step);
    w.attr("/", "tokens", step * tokens_per_step);
    w.attr("/", "world_size", int64_t{1});
    for (const Block& b : model.blocks()) {
      torch::Tensor t = b.data().detach().to(torch::kCPU, torch::kFloat32).contiguous();
      w.floats("/blocks/" + b.name(), t.data_ptr<float>(), static_cast<uint64_t>(t.numel()));
    }
    const SchedulerState ss = sched.state();
    w.attr("/scheduler", "epoch", static_cast<int64_t>(ss.epoch));
    w.attr("/scheduler", "position", static_cast<int64_t>(ss.position));
    w.attr("/scheduler", "step_in_visit", static_cast<int64_t>(ss.step_in_visit));
    w.attr("/scheduler", "active", static_cast<int64_t>(block_opt->active()));
    const LoaderState ls = train_loader.state();
    w.attr("/rank0/loader", "epoch", static_cast<int64_t>(ls.epoch));
    w.attr("/rank0/loader", "cursor", static_cast<int64_t>(ls.cursor));
    for (int u = 0; u < static_cast<int>(units.size()); ++u) {
      int64_t steps = 0;
      const std::vector<float> img = block_opt->unit_state(u, &steps);
      if (img.empty() && u != block_opt->active()) continue;  // nothing to keep yet
      w.floats(unit_group(units[u]) + "/image", img.data(), img.size());
      w.attr(unit_group(units[u]), "steps", steps);
    }
    w.commit();
    prune_checkpoints(ckpt_dir, tc.keep_checkpoints);
    const double dt = seconds_since(t0);
    say(fmt::format("checkpoint: {} ({:.2f} s)", path, dt));
    return dt;
  };

  double metrics_checkpoint_s = 0;  // time spent writing checkpoints
  auto signals = std::make_unique<StopSignals>();  // only while steps run: ^C in sampling just stops
  for (int64_t step = first_step; step <= tc.steps; ++step) {
    const auto t0 = Clock::now();
    if (switch_due && block_opt) block_opt->activate(sched.current());  // switch blocks
    if (block_opt) block_opt->prefetch(sched.lookahead(prefetch_depth));  // look-ahead
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
    if (step == first_step) sum.first_loss = loss;
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
      if (block_opt) {  // staging since the previous record, and totals
        const StagerStats& st = block_opt->staging();
        rec["switches"] = st.switches - logged_staging.switches;
        rec["stall_ms"] = 1e3 * (st.stall_s - logged_staging.stall_s);
        rec["stall_ms_total"] = 1e3 * st.stall_s;
        rec["switch_copy_ms_total"] = 1e3 * st.copy_s;
        rec["staged_bytes"] = {{"nvme_read", st.nvme_read_bytes},   {"nvme_write", st.nvme_write_bytes},
                               {"host_read", st.host_read_bytes},   {"host_write", st.host_write_bytes},
                               {"compute_in", st.compute_in_bytes}, {"compute_out", st.compute_out_bytes}};
        logged_staging = st;
      }
      rec["memory_peak_bytes"] = {{"compute", acct.usage(Pool::kCompute).total_peak},
                                  {"pinned", acct.usage(Pool::kPinned).total_peak},
                                  {"host", acct.usage(Pool::kHost).total_peak},
                                  {"nvme", acct.usage(Pool::kNvme).total_peak}};
      rec["rss_peak_bytes"] = process_memory_bytes("VmHWM");
      if (metrics_checkpoint_s > 0) rec["checkpoint_s_total"] = metrics_checkpoint_s;
      if (step == tc.steps) rec["memory"] = acct.to_json();
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
    switch_due = sched.step();

    const bool last = step == tc.steps;
    if (block_opt && (signals->fired() || (tc.checkpoint_every > 0 && (step % tc.checkpoint_every == 0 || last))))
      metrics_checkpoint_s += save_checkpoint(step);
    if (signals->fired()) {
      sum.stopped_by_signal = signals->fired();
      sum.steps = step;
      // on stderr even when quiet: whoever sent the signal needs to know how to go on
      fmt::print(stderr, "bcdtrain: stopped by signal {} after step {}{}\n", sum.stopped_by_signal, step,
                 block_opt ? fmt::format("; continue with: bcdtrain train --resume {}", tc.run_dir) : "");
      return sum;
    }
  }
  signals.reset();
  if (block_opt) {
    block_opt->flush();  // write-backs in flight: their errors surface here
    sum.staging = block_opt->staging();
  }
  sum.memory = acct.to_json();
  sum.steps = tc.steps;
  sum.tokens_per_s = static_cast<double>(tokens_per_step * (tc.steps - first_step + 1)) / std::max(train_s, 1e-9);

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
  sum.rss_peak_bytes = process_memory_bytes("VmHWM");
  say(fmt::format("done: {} steps in {}, {:.0f} tok/s, loss {:.4f} -> {:.4f}, val {:.4f} (unigram {:.4f})",
                  sum.steps, format_duration(sum.wall_s), sum.tokens_per_s, sum.first_loss, sum.final_loss,
                  sum.final_val_loss.value_or(NAN), sum.unigram_val_loss));
  if (block_opt && sum.staging.switches > 1)
    say(fmt::format("staging: {} switches, stall {:.1f} ms in total, NVMe read {:.2f} GB / written {:.2f} GB",
                    sum.staging.switches, 1e3 * sum.staging.stall_s, static_cast<double>(sum.staging.nvme_read_bytes) / 1e9,
                    static_cast<double>(sum.staging.nvme_write_bytes) / 1e9));
  if (!samples_txt.empty()) say("samples:\n" + samples_txt);
  say(fmt::format("wrote {}/{{config.toml, metrics.jsonl, model.h5, samples.txt}}", tc.run_dir));
  return sum;
}

}  // namespace bcd
