// The optimizer glue the step loop calls (DESIGN §4): switch the active unit, look ahead, arm and
// finish the gradient's reduction over ranks, clip, update. It works on the parts of a set-up run
// (runtime/run_setup.h) it is handed, and owns none of them.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "base/config.h"
#include "model/llama.h"
#include "optim/bcd_scheduler.h"
#include "dist/grad_reducer.h"
#include "optim/optimizer.h"
#include "dist/process_group.h"

namespace bcd {

class StepOps {
 public:
  struct Parts {
    const Config& cfg;
    ProcessGroup& pg;
    LlamaModel& model;
    const std::vector<UnitShape>& units;
    const BcdScheduler& sched;
    GradReducer* reducer;   // more than one rank only
    Optimizer& opt;
    int shards;             // ranks the block state is sharded over
  };
  explicit StepOps(Parts parts) : p_(parts) {}

  // Starts the visit of the schedule's current unit (its state comes in, the last one's goes home).
  void switch_unit();
  // Starts moving the state of the next units toward the compute tier (the stager's look-ahead).
  void prefetch();
  // Backward stops here: the lowest block of the active unit (0 for full-parameter training).
  int grad_from() const;
  // Data parallel: before the step's final backward, arm the gradient buckets (rebuilt when the
  // trainable set changed), so backward starts summing them over ranks as each completes; after
  // it, reduce_gradients() leaves the mean over ranks (sharded: in the ranges this rank's
  // optimizer slice owns, all that its update reads). No-ops on one rank.
  void arm_reduction();
  void reduce_gradients();
  // The global gradient norm, clipped to train.grad_clip (optimizer.h's clip_grad_norm); with
  // sharded state, of the ranges this rank owns, the norm summed over ranks.
  torch::Tensor clip_gradients();
  // After each micro-batch's backward: bf16 blocks add it to their fp32 gradient sum (the final
  // one's is added bucket by bucket as the reducer sends it, when there is a reducer).
  void accumulate_gradients(bool final_micro_batch);
  // Whether the next step's forward below the active unit may run while this step's gradient is
  // on the wire: more than one rank, dist.overlap_forward, a unit above the embedding, and the
  // next step trains the same unit.
  bool can_run_ahead(int64_t step) const;
  // AdamW on the active unit (or on everything); sharded, of this rank's slice, after which the
  // ranks all-gather the updated working weights.
  void update(double lr);
  // FLOPs this rank executes in a step with the active unit as it is now (runtime/flops.h).
  double step_flops() const;
  double gather_s() const { return gather_s_; }  // sharded: time in all-gathers of the updated weights

 private:
  Parts p_;
  double gather_s_ = 0;
};

}  // namespace bcd
