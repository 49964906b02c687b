// What a run does when a step cannot go on as planned, kept out of the step loop so that the loop
// reads as the algorithm (DESIGN §4): SIGINT/SIGTERM, NVMe I/O errors, a diverged loss, and the
// checkpoint-and-stop protocol the ranks agree on.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "base/config.h"
#include "base/stop.h"
#include "data/batch.h"
#include "data/loader.h"
#include "dist/process_group.h"
#include "model/llama.h"
#include "report/metrics.h"
#include "report/summary.h"
#include "runtime/step_ops.h"
#include "runtime/train_state.h"

namespace bcd {

// Data-parallel BCD (DESIGN.md §6): the next step's first micro-batch and its forward through
// the frozen blocks below the active unit, computed while this step's gradient is on the wire.
// This step's update cannot change those blocks, so the result is bitwise what the next step
// would compute; only while the next step trains the same unit.
struct RunAhead {
  Batch batch;
  torch::Tensor below;
  LoaderState loader_before;  // to hand the batch back before a checkpoint records the loader

  bool pending() const { return batch.tokens.defined(); }
  void run(DataLoader& loader, const LlamaModel& model, int grad_from) {
    loader_before = loader.state();
    batch = loader.next();
    below = model.frozen_prefix(batch.tokens, grad_from);
  }
  Batch take(torch::Tensor& below_out) {
    below_out = std::exchange(below, {});
    return std::exchange(batch, {});
  }
  void give_back(DataLoader& loader) {
    if (!pending()) return;
    loader.restore(loader_before);
    batch = Batch();
    below = torch::Tensor();
  }
};

class RunGuard {
 public:
  using Say = std::function<void(const std::string&)>;
  // The parts of a set-up run (runtime/run_setup.h) the guard works on; it owns none.
  struct Parts {
    const Config& cfg;
    const DistEnv& env;
    ProcessGroup& pg;
    LlamaModel& model;
    DataLoader& loader;
    StepOps& ops;
    int64_t first_step;                       // > 1 when resumed
    std::function<TrainState()> train_state;  // a checkpoint's view of the run; empty: no checkpoints
  };
  // Catches SIGINT/SIGTERM from here until it is destroyed (only while steps run: ^C while
  // sampling just stops); a second signal ends the process at once. `log`: rank 0's, else null.
  RunGuard(Parts parts, RunAhead& ahead, MetricsLog* log, Say say);
  RunGuard(const RunGuard&) = delete;
  RunGuard& operator=(const RunGuard&) = delete;

  // The block switch and look-ahead at the start of `step`. An NVMe error there stops the run
  // before the step's first batch, keeping what it can: a checkpoint of step - 1 when every
  // unit's state can still be read, else the weights alone; the message says which.
  void start_step(int64_t step, bool switch_due, const std::function<void()>& switch_and_prefetch);
  // The step's forward and backward. A streamed layer's failed read stops the run before the
  // update (nothing was trained on it), naming the newest checkpoint to resume from.
  void compute_step(int64_t step, const std::function<void()>& micro_batches);
  // The step's loss, the mean over ranks of `loss_sum` (its micro-batches' losses, each already
  // over grad_accum), when this step reads it (`needed`: a logged or checkpointed step, the
  // same on every rank; one rank also reads it at a signal), else NaN: on a GPU no other step
  // waits for its compute to read a value. With several ranks the stop flags travel every step
  // in one small all-reduce read a step late (ProcessGroup::start_lagged_sum), which waits for
  // the step before, never for this one's queue; the loss is summed when read. The first step's loss
  // stays on the device until the first read, which takes both (first_loss()). `grad_norm`, when
  // defined, is read in the same read into *grad_norm_value (a logged step's one host read). A
  // non-finite loss stops the run.
  double read_loss(int64_t step, const torch::Tensor& loss_sum, bool needed, const torch::Tensor& grad_norm = {},
                   double* grad_norm_value = nullptr);
  // The first step's loss, once a read has taken it.
  std::optional<double> first_loss() const { return first_loss_; }
  // One rank: a signal that came during the step's micro-batches (true from here) drops the
  // step's partial work, so that a step of many micro-batches does not hold a stop for minutes.
  // No update has happened: weights, optimizer state and schedule are those after the last step,
  // and stop_mid_step puts the loader back to where `step` began (`before`), writes the
  // checkpoint of step - 1 (when this process has finished a step) and says so. With several
  // ranks the step ends first: they agree on stopping between steps.
  bool signal_mid_step() const;
  void stop_mid_step(int64_t step, const LoaderState& before, TrainSummary& sum);
  // After the step: a checkpoint when one is due (`due`) or a signal stops the run (one rank's
  // signal stops all, at the same step). True when the run stops here (sum.stopped_by_signal).
  bool checkpoint_or_stop(int64_t step, bool due, bool& switch_due, TrainSummary& sum);

 private:
  // Writes the checkpoint of `step` and says where, with the time since `t0` (rank 0); a failed
  // write stops the run, naming the newest checkpoint.
  void write_checkpoint(int64_t step, std::chrono::steady_clock::time_point t0);

  bool can_checkpoint() const { return static_cast<bool>(run_.train_state); }

  Parts run_;
  RunAhead& ahead_;
  MetricsLog* log_;
  Say say_;
  // SIGINT / SIGTERM: finish the step, checkpoint, stop (a second signal ends the process at once).
  StopScope stops_{StopScope::Mode::kPoll};
  int fired_ = 0;           // the signal this step's loss read saw
  bool other_rank_stops_ = false;  // a rank's signal the step before, from the lagged all-reduce
  torch::Tensor first_loss_sum_;    // the first step's loss sum, until a read takes it
  std::optional<double> first_loss_;
};

}  // namespace bcd
