// Full-parameter AdamW over the model's blocks (the baseline BCD is measured against) and the
// learning-rate schedule. Each block segment (a flat run of decayed matrices or of non-decayed
// norms/biases; see Block's layout) is one parameter group.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "model/llama.h"
#include "base/config.h"

namespace bcd {

// Linear warmup over warmup_steps, then cosine from lr down to lr * min_lr_ratio at `steps`.
// `step` counts from 0 (the first update).
double lr_at(const TrainConfig& t, int64_t step);

// The factor on that LR at step `step_in_visit` (from 0) of a BCD visit: (i+1)/(W+1) for the
// first W = visit_warmup steps, then 1; always 1 without BCD.
double visit_lr_factor(const BcdConfig& b, uint64_t step_in_visit);

// Global L2 norm of every trainable block's gradient; scales the gradients down to `max_norm`
// when it is exceeded (max_norm <= 0: no clipping). Returns the norm before clipping as a 0-dim
// fp64 tensor on the gradients' device: nothing here waits for the device, so a GPU step is
// not drained to clip; whoever needs the figure reads it (the trainer, on logged steps).
torch::Tensor clip_grad_norm(LlamaModel& model, double max_norm);

// The same over a sharded gradient: the norm of the `owned` ranges (this rank's), squared and
// summed over ranks by `sum_over_ranks` (in place, on the device: the global norm's square),
// and only those ranges scaled. The host reads nothing.
torch::Tensor clip_grad_norm(LlamaModel& model, double max_norm, const std::vector<GradRange>& owned,
                             const std::function<void(const torch::Tensor&)>& sum_over_ranks);

class FullAdamW {
 public:
  FullAdamW(LlamaModel& model, const OptimConfig& cfg);
  void step(double lr);
  // Bytes of optimizer state (Adam m and v) currently held.
  int64_t state_bytes() const;

 private:
  std::unique_ptr<torch::optim::AdamW> opt_;
  std::vector<torch::Tensor> views_;  // keep the group tensors (and their .grad views) alive
};

}  // namespace bcd
