// The optimizer the training loop drives (one interface, two kinds), full-parameter AdamW over
// the model's blocks (the baseline BCD is measured against), gradient clipping and the
// learning-rate schedule.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "base/config.h"
#include "memory/stager.h"
#include "model/llama.h"

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

// What the training loop, the step's report and the banner ask of an optimizer. Two kinds:
// BlockAdamW (optim/block_optimizer.h: BCD's fused AdamW over state staged between tiers, sharded
// over ranks, the one checkpoints hold) and FullAdamW below (LibTorch's AdamW over every block).
// What only the block optimizer has answers "none" here, so no caller asks which kind it holds.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // A visit of `unit` starts: its state comes in, the previous unit's goes home.
  virtual void activate(int unit) {}
  // Look-ahead: start moving these units' state toward the compute tier.
  virtual void prefetch(const std::vector<int>& next_units) {}
  // One AdamW update of what trains, at learning rate `lr` (sharded: of this rank's slice).
  virtual void step(double lr) = 0;
  // Bytes of optimizer state held now, wherever it lives.
  virtual int64_t state_bytes() const = 0;
  // The Adam moments `unit` holds now; nullopt for an optimizer without units.
  virtual std::optional<int64_t> moments_of(int unit) const { return std::nullopt; }
  // The stager moving state between tiers, for its figures; null when nothing is staged.
  virtual const Stager* staged() const { return nullptr; }
  // Waits for write-backs in flight (their errors surface here).
  virtual void flush() {}
  // The NVMe tier's files go when the optimizer does (a finished run's state is in its checkpoints).
  virtual void discard_nvme_at_close() {}
  // Sharded state (data parallel): ranks owning a slice each (1: not sharded); the active
  // unit's gradient ranges by owner (the block optimizer's are every range rank 0's when not
  // sharded; none for one without units); after step(), this rank's slice of the updated working
  // weights and the all-gathered whole back into them.
  virtual int shard_count() const { return 1; }
  virtual const std::vector<GradRange>& grad_ranges() const;
  virtual torch::Tensor owned_weights() const;
  virtual void set_gathered_weights(const torch::Tensor& all);
  // Whether a checkpoint can hold this optimizer's state (runtime/train_state.h).
  virtual bool checkpointable() const { return false; }
};

class FullAdamW : public Optimizer {
 public:
  FullAdamW(LlamaModel& model, const OptimConfig& cfg);
  void step(double lr) override;
  // Bytes of optimizer state (Adam m and v) currently held.
  int64_t state_bytes() const override;

 private:
  std::unique_ptr<torch::optim::AdamW> opt_;
  std::vector<torch::Tensor> views_;  // keep the group tensors (and their .grad views) alive
};

}  // namespace bcd
