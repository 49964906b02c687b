// The failure policies of a run: signals, I/O errors, divergence, checkpoints and stopping.
#include "runtime/run_guard.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <optional>
#include <vector>

#include "base/error.h"
#include "base/stop.h"
#include "io/checkpoint.h"
#include "model/weights.h"
#include "dist/host_read.h"
#include "runtime/train_state.h"

namespace bcd {

namespace fs = std::filesystem;

namespace {

// "the newest checkpoint is ...: once <fixed>, `bcdtrain train --resume DIR`", or that there is none.
std::string newest_checkpoint(const std::string& run_dir, const char* once) {
  const std::string dir = run_dir + "/checkpoints";
  const auto kept = fs::is_directory(dir) ? list_checkpoints(dir) : std::vector<std::string>{};
  return kept.empty() ? std::string("no checkpoint of this run was written before")
                      : fmt::format("the newest checkpoint is {}: once {}, `bcdtrain train --resume {}`", kept.back(),
                                    once, run_dir);
}

}  // namespace

RunGuard::RunGuard(Parts parts, RunAhead& ahead, MetricsLog* log, Say say)
    : run_(std::move(parts)), ahead_(ahead), log_(log), say_(std::move(say)) {}

void RunGuard::start_step(int64_t step, bool switch_due, const std::function<void()>& switch_and_prefetch) {
  try {
    switch_and_prefetch();
    return;
  } catch (const IoError& e) {
    // Nothing the run holds is corrupt (a failed read or checksum throws before the compute tier
    // is touched), so it keeps what it can.
    const int64_t done = step - 1;
    const std::string& dir = run_.cfg.train.run_dir;
    // The weights alone, the same on every rank: "" when written, else why not.
    const std::string weights = fmt::format("{}/weights-step-{:08d}.h5", dir, done);
    auto save_weights_file = [&]() -> std::string {
      try {
        save_weights(run_.model, weights, config_to_toml(run_.cfg));
        return "";
      } catch (const UserError& err) {
        return err.what();
      }
    };
    std::string kept;
    if (done < run_.first_step) {
      kept = "no step of this run had finished, so nothing was saved";
    } else if (run_.pg.world_size() == 1) {
      std::string lost = "this run writes no checkpoints";
      try {
        if (can_checkpoint()) {
          ahead_.give_back(run_.loader);
          if (switch_due) run_.ops.switch_unit();  // as every checkpoint is written: the next unit active
          const std::string ck = save_checkpoint(run_.train_state(), done);
          kept = fmt::format("every unit's state could still be read: saved the checkpoint {}; once the drive is fixed, "
                             "continue with `bcdtrain train --resume {}` (nothing is lost)",
                             ck, dir);
        }
      } catch (const UserError& again) {
        lost = again.what();
      }
      if (kept.empty()) {
        const std::string failed = save_weights_file();
        kept = failed.empty()
                   ? fmt::format("the optimizer state could not be saved ({}), so it is lost; the weights of step {} "
                                 "are in {} (a start for model.init_from or export, not a resume)",
                                 lost, done, weights)
                   : fmt::format("nothing could be saved: the optimizer state ({}) nor the weights ({})", lost, failed);
      }
    } else if (run_.pg.is_root()) {
      // The other ranks wait in a collective: only what this rank holds alone can be written.
      const std::string failed = save_weights_file();
      kept = failed.empty()
                 ? fmt::format("the weights of step {} are in {}; the sharded optimizer state is lost", done, weights)
                 : fmt::format("nothing could be saved ({})", failed);
    } else {
      kept = "rank 0 keeps what can be kept";
    }
    user_error("{}; training stopped by an I/O error before step {}: {}", e.what(), step, kept);
  }
}

void RunGuard::compute_step(int64_t step, const std::function<void()>& micro_batches) {
  try {
    micro_batches();
  } catch (const IoError& e) {
    user_error("{}; training stopped by an I/O error in step {}, before its update: nothing was trained on the "
               "failed read; {}",
               e.what(), step, newest_checkpoint(run_.cfg.train.run_dir, "the drive is fixed"));
  }
}

double RunGuard::read_loss(int64_t step, const torch::Tensor& loss_sum, bool needed, const torch::Tensor& grad_norm,
                           double* grad_norm_value) {
  const TrainConfig& tc = run_.cfg.train;
  const double world = run_.pg.world_size();
  fired_ = stop_signal();  // this step's: a later signal stops the next step
  other_rank_stops_ = false;
  if (step == run_.first_step) first_loss_sum_ = loss_sum.detach();
  // Every rank reads when `needed` (the same on all); one rank alone also at its signal.
  const bool read = needed || (world == 1 && fired_);
  if (!read && world == 1) return NAN;
  // One read takes this step's loss, the gradient norm when asked and, the first time, the first
  // step's loss.
  const bool with_first = read && !first_loss_ && first_loss_sum_.defined();
  const bool with_norm = read && grad_norm.defined() && grad_norm_value;
  std::vector<double> values{0.0, 0.0};
  if (read) {
    std::vector<torch::Tensor> parts{loss_sum.detach().reshape({1}).to(torch::kFloat64)};
    if (with_norm) parts.push_back(grad_norm.detach().reshape({1}).to(torch::kFloat64));
    if (with_first) parts.push_back(first_loss_sum_.reshape({1}).to(torch::kFloat64));
    const std::vector<double> v = host_read(parts.size() == 1 ? parts[0] : torch::cat(parts));
    values[0] = v[0];
    if (with_norm) *grad_norm_value = v[1];
    if (with_first) values[1] = v.back();
  }
  if (world > 1) {
    // The stop flags every step, one step late: the step before's, summed while this step ran,
    // so that no step waits on the device's queue for them. Every rank reads the same sums: all
    // stop after the same step.
    if (const std::optional<std::vector<double>> before = run_.pg.collect_lagged_sum())
      other_rank_stops_ = (*before)[0] > 0;
    run_.pg.start_lagged_sum({fired_ ? 1.0 : 0.0});
  }
  if (!read) return NAN;
  // The losses when read.
  std::vector<double> sums = {values[0]};
  if (with_first) sums.push_back(values[1]);
  if (world > 1) sums = run_.pg.sum_over_ranks(sums);
  if (with_first) first_loss_ = sums[1] / world, first_loss_sum_ = torch::Tensor();
  const double loss = sums[0] / world;  // each micro-batch's loss is already over grad_accum
  // The settings a divergence usually comes from, with their values: one of them may be off.
  if (!std::isfinite(loss))
    user_error("training diverged at step {}: loss is {}{}; its settings: train.lr {:g}, train.grad_clip {:g}, "
               "optim.eps {:g}, optim.weight_decay {:g}, model.init_std {:g}",
               step, loss,
               tc.log_every > 1 && world == 1
                   ? fmt::format(" (read every {} steps: it diverged at or before this one)", tc.log_every)
                   : "",
               tc.lr, tc.grad_clip, run_.cfg.optim.eps, run_.cfg.optim.weight_decay, run_.cfg.model.init_std);
  return loss;
}

void RunGuard::write_checkpoint(int64_t step, std::chrono::steady_clock::time_point t0) {
  std::string path;
  try {
    path = save_checkpoint(run_.train_state(), step);  // every rank: sharded state is gathered
  } catch (const UserError& e) {
    // The run stops: going on without checkpoints would risk more work than it saves.
    user_error("{}; training stopped after step {}; {}", e.what(), step,
               newest_checkpoint(run_.cfg.train.run_dir, "the cause is fixed"));
  }
  if (!run_.pg.is_root()) return;
  const double ckpt_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (log_) log_->checkpoint_s += ckpt_s;
  say_(fmt::format("checkpoint: {} ({:.2f} s)", path, ckpt_s));
}

bool RunGuard::signal_mid_step() const { return run_.pg.world_size() == 1 && stop_signal() != 0; }

void RunGuard::stop_mid_step(int64_t step, const LoaderState& before, TrainSummary& sum) {
  const TrainConfig& tc = run_.cfg.train;
  const int sig = stop_signal();
  const int64_t done = step - 1;
  run_.loader.restore(before);  // the dropped step's batches come again on resume
  run_.model.zero_grad();
  // The active unit is the schedule's current one (the step's switch came first): the checkpoint
  // is the one the end of step `done` would write. A process that finished no step has nothing
  // new to keep (a resumed run's checkpoint of `done` is there already).
  const bool saved = can_checkpoint() && done >= run_.first_step;
  if (saved) write_checkpoint(done, std::chrono::steady_clock::now());
  sum.stopped_by_signal = sig;
  sum.steps = done;
  fmt::print(stderr, "bcdtrain: stopped by signal {} during step {} (its partial work dropped) after step {}{}\n", sig,
             step, done,
             can_checkpoint() && (saved || done > 0)
                 ? fmt::format("; continue with: bcdtrain train --resume {}", tc.run_dir)
                 : "");
}

bool RunGuard::checkpoint_or_stop(int64_t step, bool due, bool& switch_due, TrainSummary& sum) {
  const TrainConfig& tc = run_.cfg.train;
  // A signal stops the run after the step whose loss read saw it; one that came later stops the
  // next step. With ranks, one rank's signal stops all after the step that follows the one that
  // saw it (the flags are summed one step late), at the same step.
  int stop = fired_;
  if (run_.pg.world_size() > 1) stop = other_rank_stops_ ? (stop ? stop : SIGTERM) : 0;
  if (can_checkpoint() && (stop || due)) {
    const auto t0 = std::chrono::steady_clock::now();
    ahead_.give_back(run_.loader);  // the checkpoint records the loader before the next step's batch
    if (switch_due) run_.ops.switch_unit(), switch_due = false;  // the next step would start with it
    write_checkpoint(step, t0);
    run_.pg.barrier();  // the checkpoint is written before any rank goes on (or stops)
  }
  if (!stop) return false;
  sum.stopped_by_signal = stop;
  // on stderr even when quiet: whoever sent the signal needs to know how to go on
  const std::string launch =
      run_.pg.world_size() > 1 ? fmt::format("launch --nproc {} ", run_.env.local_world_size) : "";
  if (run_.pg.is_root())
    fmt::print(stderr, "bcdtrain: stopped by signal {} after step {}{}\n", stop, step,
               can_checkpoint() ? fmt::format("; continue with: bcdtrain {}train --resume {}", launch, tc.run_dir)
                                     : "");
  return true;
}

}  // namespace bcd
