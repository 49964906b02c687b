// The active unit's gradient, summed over ranks in buckets while backward still runs
// (DESIGN.md §6). Each bucket is a contiguous range of one block's flat gradient covering whole
// parameters, at most dist.bucket_bytes; a hook on each parameter's gradient accumulator counts
// the parameters still to come, and a bucket goes on the wire as soon as its count reaches zero
// in the step's final micro-batch. Buckets start in one order on every rank, so collectives
// match across ranks: the reverse of the layout at first, then the order the first backward
// completed them in (checked to be the same on every rank).
// The trainable set changes at every BCD switch, so the buckets are rebuilt whenever the set of
// trainable parameter views (or a block's gradient window) differs from the one they were built for.
// A vocabulary slice's rows are added into its gradient by the model's own code, not through a
// parameter's accumulator (model/block.h: row_grad): their buckets go last, started after backward.
// Sharded optimizer state: a bucket is not all-reduced but each of its pieces is reduced into the
// rank that owns that piece of the unit (one collective per owner the bucket spans: the bucket
// layout does not depend on the shards); only the owners' pieces hold the mean afterwards. A
// reduce sends half the bytes of an all-reduce, and the all-gather of the updated weights that
// follows the update is the other half: a sharded step moves what a replicated one does.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "model/llama.h"
#include "dist/process_group.h"

namespace bcd {

class GradReducer {
 public:
  GradReducer(ProcessGroup& pg, uint64_t bucket_bytes) : pg_(pg), bucket_bytes_(bucket_bytes) {}
  ~GradReducer();

  // Before the step's final backward: rebuild the buckets if the trainable views (or the owners)
  // changed, and arm them, so backward starts each bucket as it completes. `owners`: the
  // ranges of the active unit's gradient by owning rank (BlockAdamW::grad_ranges()) when the
  // state is sharded; empty: every rank gets the whole sum.
  void arm(LlamaModel& model, const std::vector<GradRange>& owners = {});
  // After that backward: starts what backward did not (parameters it never reached), waits for
  // all, and leaves the mean over ranks in the gradient buffers (sharded: in this rank's ranges).
  void finish();

  struct Stats {
    int64_t rebuilds = 0;               // bucket layouts built so far
    int64_t buckets = 0;                // in the current layout
    int64_t started_in_backward = 0;    // last step: buckets that went out while backward ran
    double exposed_s = 0;               // last step: waiting for collectives after backward
    double exposed_s_total = 0;         // every step so far
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Bucket;
  struct State;
  class ReadyHook;
  void rebuild(LlamaModel& model, std::vector<const void*> views, std::vector<int64_t> windows,
               const std::vector<GradRange>& owners);
  void ready(size_t bucket);
  void start(size_t bucket);
  void learn_order();

  ProcessGroup& pg_;
  uint64_t bucket_bytes_;
  std::shared_ptr<State> state_;  // hooks hold it weakly: a rebuild retires the old hooks
  Stats stats_;
};

}  // namespace bcd
