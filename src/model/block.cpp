// Flat-buffer layout of a block and the parameter/gradient views over it.
#include "model/block.h"

#include <algorithm>

#include "runtime/error.h"

namespace bcd {

namespace {
int64_t round_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }
}  // namespace

Block::Block(std::string name, std::vector<ParamSlot> slots, torch::TensorOptions opts)
    : name_(std::move(name)) {
  // Decayed slots first, stable within each group so the layout is a pure function of the shape.
  std::stable_partition(slots.begin(), slots.end(), [](const ParamSlot& s) { return s.decay; });
  int64_t off = 0;
  bool in_decay = true;
  for (auto& s : slots) {
    if (in_decay && !s.decay) {
      off = round_up(off, kAlign);
      decay_numel_ = off;
      in_decay = false;
    }
    s.numel = 1;
    for (int64_t d : s.shape) s.numel *= d;
    s.offset = off;
    off += s.numel;
  }
  if (in_decay) decay_numel_ = round_up(off, kAlign);
  numel_ = round_up(off, kAlign);
  slots_ = std::move(slots);
  data_ = torch::zeros({numel_}, opts.requires_grad(false));
  make_views();
}

void Block::make_views() {
  params_.clear();
  for (const auto& s : slots_) params_.push_back(data_.narrow(0, s.offset, s.numel).view(s.shape));
  if (trainable_) {
    trainable_ = false;
    set_trainable(true);
  }
}

const torch::Tensor& Block::param(const std::string& name) const {
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].name == name) return params_[i];
  BCD_CHECK(false, "block {} has no parameter {}", name_, name);
}

bool Block::has_param(const std::string& name) const {
  for (const auto& s : slots_)
    if (s.name == name) return true;
  return false;
}

void Block::set_trainable(bool trainable) {
  if (trainable == trainable_) return;
  trainable_ = trainable;
  if (trainable) {
    grad_ = torch::zeros_like(data_);
    for (size_t i = 0; i < slots_.size(); ++i) {
      torch::Tensor& p = params_[i];
      p.requires_grad_(true);
      p.mutable_grad() = grad_.narrow(0, slots_[i].offset, slots_[i].numel).view(slots_[i].shape);
    }
  } else {
    for (auto& p : params_) {
      p.mutable_grad() = torch::Tensor();
      p.requires_grad_(false);
    }
    grad_ = torch::Tensor();
  }
}

void Block::zero_grad() {
  if (grad_.defined()) grad_.zero_();
}

void Block::rebind(torch::Tensor flat) {
  BCD_CHECK(flat.dim() == 1 && flat.numel() == numel_ && flat.scalar_type() == data_.scalar_type(),
            "rebind of block {}: expected a flat buffer of {} elements", name_, numel_);
  data_ = std::move(flat);
  make_views();
}

}  // namespace bcd
