// Baseline AdamW over per-block flat buffers, LR schedule and gradient clipping.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace bcd {

double lr_at(const TrainConfig& t, int64_t step) {
  if (t.warmup_steps > 0 && step < t.warmup_steps)
    return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps);
  const int64_t decay_steps = std::max<int64_t>(1, t.steps - t.warmup_steps);
  double progress = static_cast<double>(step - t.warmup_steps) / static_cast<double>(decay_steps);
  progress = std::min(1.0, std::max(0.0, progress));
  const double min_lr = t.lr * t.min_lr_ratio;
  return min_lr + 0.5 * (t.lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

double visit_lr_factor(const BcdConfig& b, uint64_t step_in_visit) {
  if (!b.enabled || step_in_visit >= static_cast<uint64_t>(b.visit_warmup)) return 1.0;
  return static_cast<double>(step_in_visit + 1) / static_cast<double>(b.visit_warmup + 1);
}

namespace {

// sum(g^2) in fp64, a chunk at a time (no fp64 copy of a whole gradient). fp32 accumulation over
// millions of elements is good to about 1e-5 only, and then depends on how the gradient is cut
// into pieces (whole blocks on one rank, owned slices on several); fp64 makes the global norm the
// same figure however it is cut.
torch::Tensor range_sq(const torch::Tensor& g) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  torch::Tensor sq;
  for (int64_t at = 0; at < g.numel(); at += kChunk) {
    const torch::Tensor c = g.narrow(0, at, std::min(kChunk, g.numel() - at)).to(torch::kFloat64);
    sq = sq.defined() ? sq + at::dot(c, c) : at::dot(c, c);
  }
  return sq.defined() ? sq : torch::zeros({}, g.options().dtype(torch::kFloat64));
}

// max_norm / (norm + 1e-6) where the norm exceeds max_norm, else exactly 1 (x * 1 is x).
torch::Tensor clip_scale(const torch::Tensor& norm, double max_norm) {
  return torch::where(norm > max_norm, max_norm / (norm + 1e-6), torch::ones_like(norm));
}

}  // namespace

torch::Tensor clip_grad_norm(LlamaModel& model, double max_norm) {
  torch::NoGradGuard ng;
  torch::Tensor sq;
  for (Block& b : model.blocks())
    if (b.grad().defined()) sq = sq.defined() ? sq + range_sq(b.grad()) : range_sq(b.grad());
  if (!sq.defined()) return torch::zeros({}, torch::kFloat64);
  const torch::Tensor norm = sq.sqrt();
  if (max_norm > 0) {
    const torch::Tensor scale = clip_scale(norm, max_norm);
    for (Block& b : model.blocks())
      if (b.grad().defined()) b.grad().mul_(scale);
  }
  return norm;
}

torch::Tensor clip_grad_norm(LlamaModel& model, double max_norm, const std::vector<GradRange>& owned,
                             const std::function<void(const torch::Tensor&)>& sum_over_ranks) {
  torch::NoGradGuard ng;
  torch::Tensor sq = torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(model.block(0).data().device()));
  for (const GradRange& r : owned) sq = sq + range_sq(model.block(r.block).grad_range(r.begin, r.len));
  sum_over_ranks(sq);  // on the device: the host reads nothing
  const torch::Tensor norm = sq.sqrt();
  if (max_norm > 0) {
    const torch::Tensor scale = clip_scale(norm, max_norm);
    for (const GradRange& r : owned) model.block(r.block).grad_range(r.begin, r.len).mul_(scale);
  }
  return norm;
}

const std::vector<GradRange>& Optimizer::grad_ranges() const {
  static const std::vector<GradRange> kNone;
  return kNone;
}

torch::Tensor Optimizer::owned_weights() const {
  BCD_CHECK(false, "owned_weights: the optimizer's state is not sharded");
  return {};
}

void Optimizer::set_gathered_weights(const torch::Tensor&) { BCD_CHECK(false, "set_gathered_weights: the optimizer's state is not sharded"); }

FullAdamW::FullAdamW(LlamaModel& model, const OptimConfig& cfg) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto add_group = [&](Block& b, int64_t start, int64_t len, double wd) {
    if (len == 0) return;
    BCD_CHECK(b.grad().defined(), "block {} must be trainable before building the optimizer", b.name());
    torch::Tensor v = b.data().narrow(0, start, len);
    v.mutable_grad() = b.grad().narrow(0, start, len);
    views_.push_back(v);
    auto opts = std::make_unique<torch::optim::AdamWOptions>(1e-3);
    opts->betas({cfg.beta1, cfg.beta2}).eps(cfg.eps).weight_decay(wd);
    groups.emplace_back(std::vector<torch::Tensor>{v}, std::move(opts));
  };
  for (Block& b : model.blocks())
    for (const Segment& s : b.segments()) add_group(b, s.begin, s.numel(), s.decay ? cfg.weight_decay : 0.0);
  opt_ = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(1e-3));
}

void FullAdamW::step(double lr) {
  for (auto& g : opt_->param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  opt_->step();
}

int64_t FullAdamW::state_bytes() const {
  int64_t n = 0;
  for (const auto& kv : opt_->state()) {
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*kv.second);
    n += s.exp_avg().nbytes() + s.exp_avg_sq().nbytes();
  }
  return n;
}

}  // namespace bcd
