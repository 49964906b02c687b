// Per-unit AdamW: state bookkeeping around the fused kernel (kernels/adamw.h).
#include "runtime/block_optimizer.h"

#include "kernels/adamw.h"
#include "runtime/error.h"

namespace bcd {

BlockAdamW::BlockAdamW(LlamaModel& model, std::vector<TrainUnit> units, const OptimConfig& cfg,
                       bool keep_state)
    : model_(model), units_(std::move(units)), cfg_(cfg), keep_state_(keep_state) {
  const auto dtype = model.block(0).data().scalar_type();
  BCD_CHECK(dtype == torch::kFloat32 || dtype == torch::kBFloat16, "working dtype must be fp32 or bf16");
  separate_master_ = dtype != torch::kFloat32;
  model_.set_trainable(false);
  for (int b = 0; b < model_.n_blocks(); ++b) {
    const Block& blk = model_.block(b);
    for (int s = 0; s < static_cast<int>(blk.segments().size()); ++s) {
      SegmentState& st = state_[{b, s}];
      if (separate_master_) {
        const Segment& seg = blk.segments()[s];
        st.master = blk.data().narrow(0, seg.begin, seg.numel()).to(torch::kFloat32).contiguous();
      }
    }
  }
}

std::vector<std::pair<int, int>> BlockAdamW::unit_segments(int unit) const {
  std::vector<std::pair<int, int>> out;
  for (const UnitPiece& p : units_.at(unit).pieces) {
    const Block& blk = model_.block(p.block);
    for (int s = 0; s < static_cast<int>(blk.segments().size()); ++s)
      if (p.part.empty() || blk.segments()[s].part == p.part) out.emplace_back(p.block, s);
  }
  return out;
}

void BlockAdamW::activate(int unit) {
  BCD_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "unit {}", unit);
  if (active_ >= 0) {
    for (const UnitPiece& p : units_[active_].pieces) model_.block(p.block).set_trainable(false);
    if (!keep_state_)
      for (auto bs : unit_segments(active_)) {
        SegmentState& st = state_.at(bs);
        st.m = torch::Tensor(), st.v = torch::Tensor(), st.step = 0;
      }
  }
  active_ = unit;
  for (const UnitPiece& p : units_[unit].pieces) model_.block(p.block).set_trainable(true, p.part);
  for (auto bs : unit_segments(unit)) {
    SegmentState& st = state_.at(bs);
    if (!st.m.defined()) {
      const int64_t n = model_.block(bs.first).segments()[bs.second].numel();
      st.m = torch::zeros({n}, torch::kFloat32);
      st.v = torch::zeros({n}, torch::kFloat32);
      st.step = 0;
    }
  }
}

void BlockAdamW::step(double lr) {
  BCD_CHECK(active_ >= 0, "BlockAdamW::step before activate");
  torch::NoGradGuard ng;
  for (auto bs : unit_segments(active_)) {
    Block& blk = model_.block(bs.first);
    const Segment& seg = blk.segments()[bs.second];
    SegmentState& st = state_.at(bs);
    BCD_CHECK(blk.grad().defined(), "block {} has no gradient", blk.name());
    st.step += 1;
    AdamWHyper h;
    h.lr = static_cast<float>(lr);
    h.beta1 = static_cast<float>(cfg_.beta1);
    h.beta2 = static_cast<float>(cfg_.beta2);
    h.eps = static_cast<float>(cfg_.eps);
    h.weight_decay = seg.decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
    h.step = st.step;
    const int64_t n = seg.numel();
    float* m = st.m.data_ptr<float>();
    float* v = st.v.data_ptr<float>();
    if (!separate_master_) {
      float* master = blk.data().data_ptr<float>() + seg.begin;
      const float* grad = blk.grad().data_ptr<float>() + seg.begin;
      adamw_step_cpu(master, grad, m, v, n, h, nullptr);
    } else {
      auto* work = reinterpret_cast<uint16_t*>(blk.data().data_ptr<at::BFloat16>()) + seg.begin;
      const auto* grad = reinterpret_cast<const uint16_t*>(blk.grad().data_ptr<at::BFloat16>()) + seg.begin;
      adamw_step_cpu_bf16grad(st.master.data_ptr<float>(), grad, m, v, n, h, work);
    }
  }
}

int64_t BlockAdamW::moment_bytes() const {
  int64_t n = 0;
  for (const auto& kv : state_)
    if (kv.second.m.defined()) n += kv.second.m.nbytes() + kv.second.v.nbytes();
  return n;
}

int64_t BlockAdamW::state_bytes() const {
  int64_t n = moment_bytes();
  for (const auto& kv : state_)
    if (kv.second.master.defined()) n += kv.second.master.nbytes();
  return n;
}

int64_t BlockAdamW::unit_moment_bytes(int unit) const {
  int64_t n = 0;
  for (auto bs : unit_segments(unit)) {
    const SegmentState& st = state_.at(bs);
    if (st.m.defined()) n += st.m.nbytes() + st.v.nbytes();
  }
  return n;
}

const SegmentState& BlockAdamW::segment_state(int block, int segment) const {
  return state_.at({block, segment});
}

}  // namespace bcd
