// Flat-buffer layout of a block and the parameter/gradient views over it.
#include "model/block.h"

#include <algorithm>

#include "base/error.h"
#include "base/model_shape.h"

namespace bcd {

namespace {
bool reduced_precision(torch::ScalarType t) { return t == torch::kBFloat16 || t == torch::kHalf; }
}  // namespace

Block::Block(std::string name, const std::vector<SlotShape>& slots, torch::TensorOptions opts, torch::Tensor storage)
    : name_(std::move(name)) {
  // The layout is the model shape's (base/model_shape.h: layout_block), so the planner's blocks
  // are these.
  const BlockShape layout = layout_block(name_, slots);
  for (int64_t i : layout.order) slots_.push_back(ParamSlot{slots[i], layout.offsets[i]});
  segments_ = layout.segments;
  numel_ = layout.numel;
  direct_.assign(slots_.size(), false);
  if (storage.defined()) {
    BCD_CHECK(storage.dim() == 1 && storage.numel() == numel_ && storage.scalar_type() == opts.dtype(),
              "block {}: the storage given is not a flat buffer of {} elements of the working dtype", name_, numel_);
    data_ = std::move(storage);
    data_.zero_();
  } else {
    data_ = torch::zeros({numel_}, opts.requires_grad(false));
  }
  make_views();
}

std::vector<Part> Block::parts() const {
  std::vector<Part> out;
  for (const auto& s : segments_)
    if (std::find(out.begin(), out.end(), s.part) == out.end()) out.push_back(s.part);
  return out;
}

void Block::make_views() {
  params_.clear();
  for (const auto& s : slots_) params_.push_back(data_.narrow(0, s.offset, s.numel()).view(s.shape));
  if (trainable_) {
    trainable_ = false;
    set_trainable(true, trainable_part_, window_begin_, window_end_);
  }
}

const torch::Tensor& Block::param(const std::string& name) const {
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].name == name) return params_[i];
  BCD_CHECK(false, "block {} has no parameter {}", name_, name);
}

torch::Tensor Block::grad_of(const std::string& name) const {
  const torch::Tensor& g = grad();
  for (const auto& s : slots_)
    if (s.name == name) {
      if (!g.defined() || s.offset < window_begin_ || s.offset + s.numel() > window_end_) return {};
      return g.narrow(0, s.offset - window_begin_, s.numel()).view(s.shape);
    }
  BCD_CHECK(false, "block {} has no parameter {}", name_, name);
}

Block::RowGrad Block::row_grad(const std::string& name) const {
  const torch::Tensor& g = grad();
  for (const auto& s : slots_)
    if (s.name == name) {
      const int64_t lo = std::max(s.offset, window_begin_), hi = std::min(s.offset + s.numel(), window_end_);
      if (!g.defined() || hi <= lo || (lo == s.offset && hi == s.offset + s.numel())) return {};
      const int64_t row = s.numel() / s.shape.front();
      std::vector<int64_t> shape = s.shape;
      shape.front() = (hi - lo) / row;
      return {g.narrow(0, lo - window_begin_, hi - lo).view(shape), (lo - s.offset) / row};
    }
  BCD_CHECK(false, "block {} has no parameter {}", name_, name);
}

torch::Tensor Block::grad_range(int64_t begin, int64_t len) const {
  BCD_CHECK(grad().defined() && begin >= window_begin_ && len >= 0 && begin + len <= window_end_,
            "block {}: gradient elements [{}, +{}) outside its window [{}, {})", name_, begin, len, window_begin_,
            window_end_);
  return grad().narrow(0, begin - window_begin_, len);
}

bool Block::has_param(const std::string& name) const {
  for (const auto& s : slots_)
    if (s.name == name) return true;
  return false;
}

void Block::set_trainable(bool trainable, Part part, int64_t begin, int64_t end) {
  if (end < 0) end = numel_;
  BCD_CHECK(0 <= begin && begin < end && end <= numel_, "block {}: trainable window [{}, {}) of {} elements", name_,
            begin, end, numel_);
  if (trainable == trainable_ &&
      (!trainable || (part == trainable_part_ && begin == window_begin_ && end == window_end_)))
    return;
  if (trainable && trainable_ && (begin != window_begin_ || end != window_end_)) set_trainable(false);
  trainable_ = trainable;
  trainable_part_ = trainable ? part : Part::kNone;
  if (trainable) {
    window_begin_ = begin, window_end_ = end;
    const bool fp32_sum = reduced_precision(data_.scalar_type());
    if (!acc_.defined() && fp32_sum) acc_ = torch::zeros({end - begin}, data_.options().dtype(torch::kFloat32));
    // Which slots train (whole in the window, of the part), and autograd's buffer for them: the
    // window's layout, or with direct sums only the slots autograd fills, back to back.
    const bool compact = fp32_sum && direct_mode_;
    std::vector<int64_t> at(slots_.size(), -1);  // where each slot's .grad sits in grad_ (-1: none)
    pieces_.clear();
    int64_t autograd_elems = compact ? 0 : end - begin;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const ParamSlot& s = slots_[i];
      const bool whole = s.offset >= begin && s.offset + s.numel() <= end;
      const bool cut = !whole && s.offset < end && s.offset + s.numel() > begin;
      if (cut) {
        const int64_t row = s.numel() / s.shape.front();
        const int64_t first = std::max(begin, s.offset) - s.offset, last = std::min(end, s.offset + s.numel()) - s.offset;
        BCD_CHECK(first % row == 0 && last % row == 0, "block {}: trainable window [{}, {}) cuts {} within a row",
                  name_, begin, end, s.name);
      }
      const bool on = whole && (part == Part::kNone || s.part == part);
      if (on && !compact) {
        at[i] = s.offset - begin;
      } else if (on && !direct_[i]) {  // a direct sum's .grad stays undefined
        at[i] = autograd_elems;
        pieces_.push_back({s.offset, s.numel(), autograd_elems});
        autograd_elems += s.numel();
      }
      params_[i].mutable_grad() = torch::Tensor();
      params_[i].requires_grad_(on);
    }
    if (!grad_.defined() || grad_.numel() != autograd_elems) grad_ = torch::zeros({autograd_elems}, data_.options());
    for (size_t i = 0; i < slots_.size(); ++i)
      if (at[i] >= 0) params_[i].mutable_grad() = grad_.narrow(0, at[i], slots_[i].numel()).view(slots_[i].shape);
  } else {
    for (auto& p : params_) {
      p.mutable_grad() = torch::Tensor();
      p.requires_grad_(false);
    }
    grad_ = torch::Tensor();
    acc_ = torch::Tensor();
    pieces_.clear();
    window_begin_ = window_end_ = 0;
  }
}

void Block::zero_grad() {
  if (grad_.defined()) grad_.zero_();
  if (acc_.defined()) acc_.zero_();
}

void Block::accumulate_grad(int64_t begin, int64_t len) {
  if (!acc_.defined()) return;
  BCD_CHECK(begin >= window_begin_ && len >= 0 && begin + len <= window_end_,
            "accumulate_grad of block {}: [{}, +{}) outside its window [{}, {})", name_, begin, len, window_begin_,
            window_end_);
  torch::NoGradGuard ng;
  // exact: every bf16 value is an fp32 value
  if (!direct_mode_) {  // (acc_ defined: a reduced-precision block, so with direct sums grad_ holds pieces_)
    torch::Tensor part = grad_.narrow(0, begin - window_begin_, len);
    acc_.narrow(0, begin - window_begin_, len).add_(part);
    part.zero_();
    return;
  }
  for (size_t i = 0; i < slots_.size(); ++i)
    BCD_CHECK(!(direct_[i] && params_[i].grad().defined()),
              "block {}: autograd gave {} a gradient of its own, which its fp32 sum never sees: with direct sums "
              "(set_direct_sums) every pass that computes gradients must be the trainer's (grad_into_blocks)",
              name_, slots_[i].name);
  for (const AutogradPiece& a : pieces_) {
    const int64_t lo = std::max(begin, a.flat), hi = std::min(begin + len, a.flat + a.numel);
    if (hi <= lo) continue;
    torch::Tensor part = grad_.narrow(0, a.at + (lo - a.flat), hi - lo);
    acc_.narrow(0, lo - window_begin_, hi - lo).add_(part);
    part.zero_();
  }
}

int64_t Block::grad_bytes() const {
  int64_t n = 0;
  for (const torch::Tensor* t : {&grad_, &acc_})
    if (t->defined()) n += t->numel() * static_cast<int64_t>(t->element_size());
  return n;
}

torch::Tensor Block::autograd_grad_of(const std::string& name) const {
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].name == name) {
      const torch::Tensor& g = params_[i].grad();
      return g.defined() ? g : torch::Tensor();
    }
  BCD_CHECK(false, "block {} has no parameter {}", name_, name);
}

void Block::set_direct_sums(std::vector<bool> direct) {
  BCD_CHECK(!trainable_, "block {}: direct sums are set while the block is frozen", name_);
  BCD_CHECK(direct.empty() || direct.size() == slots_.size(), "block {}: {} direct-sum flags for {} slots", name_,
            direct.size(), slots_.size());
  direct_mode_ = !direct.empty();
  direct_ = std::move(direct);
  direct_.resize(slots_.size(), false);
}

void Block::rebind(torch::Tensor flat) {
  BCD_CHECK(flat.dim() == 1 && flat.numel() == numel_ && flat.scalar_type() == data_.scalar_type(),
            "rebind of block {}: expected a flat buffer of {} elements", name_, numel_);
  data_ = std::move(flat);
  make_views();
}

}  // namespace bcd
