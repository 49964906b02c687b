// Training: the step loop reads top to bottom like the algorithm (DESIGN §4); what stops it
// (signals, I/O errors, divergence, checkpoints) is run_guard's; set-up, checkpoint
// state and metrics records live in run_setup, train_state and metrics.
#include "dist/host_read.h"
#include "runtime/trainer.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "base/error.h"
#include "base/files.h"
#include "base/printable.h"
#include "base/progress.h"
#include "base/stop.h"
#include "memory/nvme_dirs.h"
#include "io/checkpoint.h"
#include "io/dir_lock.h"
#include "model/weights.h"
#include "report/plots.h"
#include "dist/process_group.h"
#include "runtime/run_description.h"
#include "runtime/step_report.h"
#include "runtime/run_guard.h"
#include "runtime/sampler.h"
#include "runtime/train_state.h"

namespace bcd {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Say = std::function<void(const std::string&)>;

namespace {

// Progress on stdout (rank 0, unless quiet). On a terminal the step line is redrawn in place,
// cut to the terminal's width; a validation step's line and the last one stay, and any other
// line ends the live one first. In a file or a pipe every line is kept, as plain lines.
class Console {
 public:
  Console(bool quiet, bool root) : on_(!quiet && root), live_(on_ && ::isatty(STDOUT_FILENO)) {}
  ~Console() { end_live(); }
  void line(const std::string& s) {
    if (!on_) return;
    end_live();
    fmt::print("{}\n", s);
    std::fflush(stdout);
  }
  void progress(const std::string& s, bool keep) {
    if (!on_) return;
    if (!live_) return line(s);
    winsize ws{};
    const size_t width = ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 ? ws.ws_col - 1 : 0;
    fmt::print("\r\033[K{}{}", width > 0 && !keep ? s.substr(0, width) : s, keep ? "\n" : "");
    std::fflush(stdout);
    pending_ = !keep;
  }
  Say say() {
    return [this](const std::string& s) { line(s); };
  }

 private:
  void end_live() {
    if (pending_) fmt::print("\n"), pending_ = false;
  }
  bool on_, live_, pending_ = false;
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// <run_dir>: config.toml, the tokenizer (tokenizer.model or tokenizer.json, with the Hugging Face
// config files that came with it), and metrics.jsonl (kept up to the resumed step).
// Rank 0 writes the run directory; the other ranks get no log.
std::optional<MetricsLog> open_run_dir(const RunSetup& run) {
  if (!run.is_root()) return std::nullopt;
  const std::string& dir = run.cfg.train.run_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) user_error("config: [train] run_dir {}: cannot create ({})", dir, ec.message());
  // The records first: an unreadable one stops a resume before anything in the directory changes.
  const bool resumed = !run.resume_from.empty();
  if (resumed) truncate_metrics(dir + "/metrics.jsonl", run.first_step);
  Config cfg = run.cfg;
  write_file_atomic(dir + "/config.toml", config_to_toml(cfg), "run config");
  copy_tokenizer_files(run.ds().tokenizer_path(), dir);
  return std::make_optional<MetricsLog>(dir + "/metrics.jsonl", /*append=*/resumed, run.cfg.train.tensorboard);
}

// Tokens/s, TFLOP/s and the time to go, over the steps since the last record.
struct Throughput {
  Clock::time_point start = Clock::now();
  double train_s = 0;     // wall time in training steps (validation excluded)
  double interval_s = 0;  // since the last record
  int64_t interval_steps = 0;
  double interval_flops = 0;

  void add(double step_s, double flops) { train_s += step_s, interval_s += step_s, ++interval_steps, interval_flops += flops; }
  void record(StepReport& s, int64_t tokens_per_step, int64_t steps) {
    s.tokens_per_s = static_cast<double>(tokens_per_step * interval_steps) / std::max(interval_s, 1e-9);
    s.tflops = interval_flops / std::max(interval_s, 1e-9) / 1e12;
    s.elapsed_s = seconds_since(start);
    s.eta_s = train_s / static_cast<double>(s.step) * static_cast<double>(steps - s.step);
    interval_s = 0, interval_steps = 0, interval_flops = 0;
  }
};

// The frozen layers' weights the step streamed, and its waits for them.
void take_stream_stats(RunSetup& run, StepReport& s) {
  if (!run.streamed) return;
  const StreamStepStats st = run.streamed->take();
  s.stream_bytes = st.bytes, s.stream_uses = st.uses, s.stream_stall_s = st.stall_s;
  s.stream_layer_stall_s = st.max_layer_stall_s;
  if (st.max_stall_block >= 0) s.stream_stall_block = run.model().block(st.max_stall_block).name();
}

// One optimizer step per iteration (DESIGN §4): switch if due, prefetch, forward, truncated
// backward, clip, update, validate, log, checkpoint. Stops after train.steps, or after the step
// in which a SIGINT/SIGTERM came (sum.stopped_by_signal); what else stops it is RunGuard's.
// Returns the time spent in training steps. Data parallel: the gradient and the logged loss are
// means over ranks, the ranks agree on stopping, and `log` (rank 0's) is the only writer.
double train_loop(RunSetup& run, MetricsLog* log, TrainSummary& sum, Console& console) {
  const TrainConfig& tc = run.cfg.train;
  RunAhead ahead;
  RunGuard guard(run.guard_parts(), ahead, log, console.say());
  Throughput rate;
  bool switch_due = false;  // the schedule moved to a new visit after the last step
  for (int64_t step = run.first_step; step <= tc.steps; ++step) {
    const auto t0 = Clock::now();
    guard.start_step(step, switch_due, [&] {
      if (switch_due) run.ops().switch_unit();                                 // switch blocks
      run.ops().prefetch();                                                    // look-ahead
    });
    if (run.streamed) run.streamed->take();  // what validation or sampling streamed is not this step's
    StepReport s;
    s.step = step, s.unit = run.sched().current(), s.flops = run.ops().step_flops();
    s.lr = lr_at(tc, step - 1) * visit_lr_factor(run.cfg.bcd, run.sched().step_in_visit());
    run.model().zero_grad();
    torch::Tensor loss_sum;  // on the device; read on the steps that need the figure
    const LoaderState step_start = run.train_loader().state();
    bool dropped = false;  // a signal came during the micro-batches (one rank)
    guard.compute_step(step, [&] {
      // Streamed frozen layers below the active unit run every micro-batch while each is on the
      // compute tier: copied once a step, not once a micro-batch (the batches come first).
      std::vector<Batch> batches;
      std::vector<torch::Tensor> belows;
      if (run.streamed && tc.grad_accum > 1 && run.ops().grad_from() >= 2) {
        std::vector<torch::Tensor> tokens;
        for (int64_t micro = 0; micro < tc.grad_accum; ++micro) {
          belows.emplace_back();
          batches.push_back(micro == 0 && ahead.pending() ? ahead.take(belows.back()) : run.train_loader().next());
          tokens.push_back(batches.back().tokens);
        }
        run.model().frozen_prefixes(tokens, belows, run.ops().grad_from());
      }
      for (int64_t micro = 0; micro < tc.grad_accum; ++micro) {
        if ((dropped = guard.signal_mid_step())) break;
        const bool last = micro == tc.grad_accum - 1;
        torch::Tensor below;  // (B, T, C) when the frozen blocks already ran for this batch
        Batch batch;          // (B, T+1)
        if (!batches.empty()) batch = std::move(batches[micro]), below = std::move(belows[micro]);
        else batch = micro == 0 && ahead.pending() ? ahead.take(below) : run.train_loader().next();
        // forward (no autograd below the active unit), the loss over grad_accum; the head's
        // gradient is computed in it, straight into its block's fp32 sum (model/fused_loss.h)
        torch::Tensor loss = run.model().loss(batch, run.ops().grad_from(), below,
                                            {1.0 / static_cast<double>(tc.grad_accum), /*grad_into_blocks=*/true});
        if (last) run.ops().arm_reduction();        // buckets go out as backward fills them
        loss.backward();                      // backward stops at the active unit
        run.ops().accumulate_gradients(last);       // bf16: summed in fp32
        loss_sum = micro == 0 ? loss.detach() : loss_sum + loss.detach();
      }
    });
    if (dropped) {  // stop as after the last step
      guard.stop_mid_step(step, step_start, sum);
      break;
    }
    if (run.ops().can_run_ahead(step)) ahead.run(run.train_loader(), run.model(), run.ops().grad_from()), ++run.steps_run_ahead;  // next step's frozen forward, behind the wire
    run.ops().reduce_gradients();                                              // mean over ranks (the rest of the buckets)
    const bool validate = (tc.val_every > 0 && step % tc.val_every == 0) || step == tc.steps;
    const bool logs = step % tc.log_every == 0 || step == tc.steps || validate;
    const bool checkpoint = tc.checkpoint_every > 0 && (step % tc.checkpoint_every == 0 || step == tc.steps);
    const torch::Tensor grad_norm = run.ops().clip_gradients();               // clip
    // Reading the loss (and on a logged step the gradient norm, in the same read) waits for the
    // step's compute: on a GPU only the steps that need it do, once.
    s.loss = guard.read_loss(step, loss_sum, logs || checkpoint, logs ? grad_norm : torch::Tensor(), &s.grad_norm);
    run.ops().update(s.lr);                                                    // AdamW
    take_stream_stats(run, s);
    rate.add(seconds_since(t0), s.flops);
    if (const auto first = guard.first_loss()) sum.first_loss = *first;
    if (std::isfinite(s.loss)) sum.final_loss = s.loss;
    sum.steps = step;  // done (a failure's summary says how far the run got)
    if (validate)                                                        // validate
      s.val_loss = sum.final_val_loss =
          evaluate_val_loss(run.model(), run.sources, tc.batch_size, tc.seq_len, tc.val_batches, run.pg.get());
    if (logs) {                                                          // log
      rate.record(s, run.tokens_per_step(), tc.steps);
      add_run_figures(s, run);
      if (log) log->record(s);
      console.progress(MetricsLog::progress_line(s), validate || step == tc.steps);
    }
    switch_due = run.sched().step();
    if (guard.checkpoint_or_stop(step, checkpoint, switch_due, sum)) break;  // checkpoint
  }
  return rate.train_s;
}

// samples.txt: a sample per [sample] prompt from the trained model; returns its text.
std::string write_samples(RunSetup& run, TrainSummary& sum) {
  const TrainConfig& tc = run.cfg.train;
  SampleOptions so;
  so.max_new_tokens = run.cfg.sample.max_new_tokens;
  so.temperature = run.cfg.sample.temperature;
  so.top_k = run.cfg.sample.top_k;
  so.top_p = run.cfg.sample.top_p;
  std::string samples_txt;
  const std::optional<ChatTemplate> chat = sample_chat_template(run.cfg.sample.chat_template, run.cfg.data.first());
  for (size_t i = 0; i < run.cfg.sample.prompts.size(); ++i) {
    const std::string& prompt = run.cfg.sample.prompts[i];
    const auto seed = static_cast<uint64_t>(tc.seed) + i;
    sum.samples.push_back(chat ? generate_chat(run.model(), run.tok, *chat, prompt, so, seed)
                               : generate_text(run.model(), run.tok, prompt, so, seed));
    samples_txt += "--- sample " + std::to_string(i + 1) + " ---\n" + sum.samples.back() + "\n";
  }
  write_file_atomic(tc.run_dir + "/samples.txt", samples_txt, "samples");
  return samples_txt;
}

// model.h5 and samples.txt (unless train.save_model = false); the summary's closing figures (wall
// time since `t_start`).
void write_outputs(RunSetup& run, TrainSummary& sum, Clock::time_point t_start, const Say& say) {
  const TrainConfig& tc = run.cfg.train;
  std::string samples_txt;
  if (tc.save_model) {  // else a measuring run: the figures are in metrics.jsonl
    save_weights(run.model(), tc.run_dir + "/model.h5", config_to_toml(run.cfg));
    samples_txt = write_samples(run, sum);
  }
  sum.wall_s = seconds_since(t_start);
  say(fmt::format("done: {} steps in {}, {:.0f} tok/s, loss {:.4f} -> {:.4f}, val {:.4f} (unigram {:.4f})",
                  sum.steps, format_duration(sum.wall_s), sum.tokens_per_s, sum.first_loss, sum.final_loss,
                  sum.final_val_loss.value_or(NAN), sum.unigram_val_loss));
  if (run.optimizer().staged() && sum.staging.switches > 1)
    say(fmt::format("staging: {} switches, stall {:.1f} ms in total, NVMe read {:.2f} GB / written {:.2f} GB",
                    sum.staging.switches, 1e3 * sum.staging.stall_s, static_cast<double>(sum.staging.nvme_read_bytes) / 1e9,
                    static_cast<double>(sum.staging.nvme_write_bytes) / 1e9));
  if (!samples_txt.empty()) say("samples:\n" + printable(samples_txt));  // a model may write escape sequences
  say(fmt::format("wrote {}/{{config.toml, metrics.jsonl{}}}", tc.run_dir, tc.save_model ? ", model.h5, samples.txt" : ""));
}

}  // namespace

double evaluate_val_loss(const LlamaModel& model, const TokenDataset& ds, int64_t batch_size,
                         int64_t seq_len, int64_t batches, ProcessGroup* pg) {
  return evaluate_val_loss(model, std::vector<DataSource>{DataSource{ds, 1.0}}, batch_size, seq_len, batches, pg);
}

double evaluate_val_loss(const LlamaModel& model, const std::vector<DataSource>& sources, int64_t batch_size,
                         int64_t seq_len, int64_t batches, ProcessGroup* pg) {
  torch::NoGradGuard ng;
  // Data parallel: a batch is the ranks' rows of a global batch of R * batch_size windows (as in
  // training), so R ranks see the windows one rank with R times the batch would.
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->world_size() : 1;
  // A mixture's validation draws from its datasets' validation splits with the training weights.
  DataLoader val(sources, Split::kVal, batch_size, seq_len, /*seed=*/0, /*shuffle=*/false, /*prefetch=*/false, rank, world);
  const bool masked = std::any_of(sources.begin(), sources.end(), [](const DataSource& s) { return s.ds.masked(); });
  // Never count a window twice: at most one pass over the validation split.
  const int64_t max_batches = std::max<int64_t>(1, val.windows_per_epoch() / (batch_size * world));
  const int64_t n = std::min(batches, max_batches);
  // Plain text: the mean of the batches' means (all of the same size). Instruction data: the
  // cross entropy summed over every counted target, over their count.
  torch::Tensor total;  // summed on the device, read once
  double counted = 0;   // instruction data: counted targets of all batches, all ranks
  for (int64_t i = 0; i < n; ++i) {
    check_stop();  // eval (a run's own validation: its signal handler takes the signal instead)
    const Batch b = val.next();
    torch::Tensor l = model.loss(b);
    if (b.mask.defined()) l = l * b.divisor, counted += b.divisor * world;
    total = i == 0 ? l : total + l;
  }
  double sum = host_read_scalar(total);
  if (pg) sum = pg->sum_over_ranks({sum})[0];
  if (masked) return counted > 0 ? sum / counted : NAN;  // NaN: no response token in the batches read
  return sum / world / static_cast<double>(n);
}

// Rank 0 owns the run directory: it locks it for the run, and a fresh run does not start in a
// directory holding another run's checkpoints (their higher step numbers would outlive its own,
// and --resume would continue the old run) unless told to delete them.
std::unique_ptr<DirLock> claim_run_dir(const Config& cfg, bool resuming, bool overwrite) {
  const DistEnv env = DistEnv::from_environment();
  if (env.rank != 0) return nullptr;
  const std::string& dir = cfg.train.run_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) user_error("config: [train] run_dir {}: cannot create ({})", dir, ec.message());
  auto lock = std::make_unique<DirLock>(dir, "run directory");
  const std::string ckpts = dir + "/checkpoints";
  const std::vector<std::string> old = fs::is_directory(ckpts) ? list_checkpoints(ckpts) : std::vector<std::string>{};
  // torchrun restarted every rank after one failed: a fresh start would throw the earlier
  // attempt's steps away (with --overwrite) or stop on its checkpoints; only a resume continues.
  if (!resuming && env.restart_count > 0 && (!old.empty() || fs::exists(dir + "/metrics.jsonl")))
    user_error("TORCHELASTIC_RESTART_COUNT={}: torchrun restarted this run after a rank failed, and {} holds what the "
               "earlier attempt wrote{}; add --resume=auto (with --config) so that a restart continues from the "
               "newest checkpoint instead of starting again from step 0",
               env.restart_count, dir,
               old.empty() ? "" : fmt::format(" (newest checkpoint {})", fs::path(old.back()).filename().string()));
  if (resuming || old.empty()) return lock;
  if (!overwrite)
    user_error("{}: holds {} checkpoint(s) of an earlier run (newest {}); continue it with `bcdtrain train --resume "
               "{}`, choose another train.run_dir, or give --overwrite to delete them and start afresh",
               dir, old.size(), fs::path(old.back()).filename().string(), dir);
  remove_checkpoints(ckpts, old);
  return lock;
}

namespace {

// The run itself (run_training's work); `sum` is filled as it goes, so a failure still tells how
// far it got.
// The directories a run's NVMe stores make below memory.nvme_paths (rank<R>/ with several ranks,
// weights/ for streamed weights) go when the run ends, however it ends, once their stores have
// removed their files: a run leaves no empty directories behind. The paths themselves stay.
class NvmeDirsCleanup {
 public:
  explicit NvmeDirsCleanup(const MemoryConfig& mem) {
    const DistEnv env = DistEnv::from_environment();
    dirs_ = nvme_run_dirs(mem.nvme_paths, env.rank, env.world_size);
  }
  ~NvmeDirsCleanup() {
    for (const std::string& d : dirs_) ::rmdir(d.c_str());  // fails, harmlessly, on one still holding files
  }
  NvmeDirsCleanup(const NvmeDirsCleanup&) = delete;
  NvmeDirsCleanup& operator=(const NvmeDirsCleanup&) = delete;

 private:
  std::vector<std::string> dirs_;
};

void train_run(Config cfg, bool quiet, const std::string& resume_from, TrainSummary& sum, Clock::time_point t_start) {
  Progress setting_up("setting up the run");  // data, memory plan, model, optimizer state (a resume's from its checkpoint)
  const NvmeDirsCleanup nvme_dirs(cfg.memory);  // after the stores below have closed
  RunSetup run(std::move(cfg), resume_from);
  // Nothing reads the NVMe tier's files after the run, however it ends (a resume reads its
  // checkpoint): they go when it does, GBs for a 7B model, unless memory.keep_nvme_state.
  if (!run.cfg.memory.keep_nvme_state) run.optimizer().discard_nvme_at_close();
  setting_up.finish();
  sum.steps = run.first_step - 1;
  Console console(quiet, run.is_root());
  const Say say = console.say();
  std::optional<MetricsLog> log = open_run_dir(run);
  sum.opened_run_dir = true;
  for (const std::string& line : run_banner(run_description(run))) say(line);

  sum.num_params = run.model().num_params();
  sum.unigram_val_loss = 0;  // a mixture: its datasets' baselines by weight
  for (const DataSource& s : run.sources) sum.unigram_val_loss += s.weight * s.ds.unigram_val_loss();
  const double train_s = train_loop(run, log ? &*log : nullptr, sum, console);
  if (const Stager* st = run.optimizer().staged()) {
    if (!sum.stopped_by_signal) run.optimizer().flush();  // write-backs in flight: their errors surface here
    sum.staging = st->stats();
  }
  if (run.streamed) sum.stream = run.streamed->totals();
  sum.memory = run.acct.to_json();
  sum.tokens_per_s = static_cast<double>(run.tokens_per_step() * (sum.steps - run.first_step + 1)) / std::max(train_s, 1e-9);
  if (!sum.stopped_by_signal && run.is_root()) write_outputs(run, sum, t_start, say);
  sum.rss_peak_bytes = process_memory_bytes("VmHWM");  // after the outputs: the whole run's
  if (run.cfg.train.plot && run.is_root()) draw_run_plots(run.cfg.train.run_dir, say);  // finished or stopped
}

}  // namespace

TrainSummary run_training(Config cfg, bool quiet, const std::string& resume_from, bool overwrite) {
  const ProgressScope progress(quiet || DistEnv::from_environment().rank != 0);  // set-up phases: rank 0's
  const std::unique_ptr<DirLock> lock = claim_run_dir(cfg, !resume_from.empty(), overwrite);  // rank 0's
  const std::string run_dir = cfg.train.run_dir;
  const int64_t total_steps = cfg.train.steps;
  const auto t_start = Clock::now();
  TrainSummary sum;
  try {
    train_run(std::move(cfg), quiet, resume_from, sum, t_start);
  } catch (const UserError& e) {
    // A fresh run's summary says why it failed; a resume refused before it wrote anything leaves
    // the run's own summary (finished, stopped) as it was.
    if (lock && (resume_from.empty() || sum.opened_run_dir)) {
      nlohmann::json j = summary_json("failed", sum, total_steps, seconds_since(t_start));
      j["error"] = e.what();
      try {
        write_summary(run_dir, j);
      } catch (const UserError&) {  // the run's own error is the one to report
      }
    }
    throw;
  }
  if (lock) write_summary(run_dir, summary_json(sum.stopped_by_signal ? "stopped" : "finished", sum, total_steps,
                                              seconds_since(t_start)));
  return sum;
}

}  // namespace bcd
