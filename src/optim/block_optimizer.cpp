// Per-unit AdamW: state bookkeeping around the fused kernel (kernels/adamw.h) and the stager.
#include "optim/block_optimizer.h"

#include <algorithm>
#include <cstring>

#include "kernels/adamw.h"
#include "base/error.h"
#ifdef BCD_HAVE_CUDA_KERNELS
#include "kernels/adamw_cuda.h"
#endif

namespace bcd {

BlockAdamW::BlockAdamW(LlamaModel& model, std::vector<UnitShape> units, const OptimConfig& cfg,
                       bool keep_state, StateStorage storage)
    : model_(model),
      units_(std::move(units)),
      cfg_(cfg),
      keep_state_(keep_state),
      shard_rank_(storage.shard_rank),
      shard_count_(storage.shard_count),
      acct_(storage.accounting) {
  const auto dtype = model.block(0).data().scalar_type();
  BCD_CHECK(dtype == torch::kFloat32 || dtype == torch::kBFloat16, "working dtype must be fp32 or bf16");
  BCD_CHECK(storage.unit_home.empty() || storage.unit_home.size() == units_.size(), "unit_home: {} homes for {} units",
            storage.unit_home.size(), units_.size());
  separate_master_ = dtype != torch::kFloat32;
  model_.set_trainable(false);

  // Each unit's segments, back to back.
  int64_t largest = 0;
  for (const UnitShape& tu : units_) {
    UnitLayout u;
    for (const UnitPieceShape& p : tu.pieces) {
      const Block& blk = model_.block(p.block);
      for (int s = 0; s < static_cast<int>(blk.segments().size()); ++s) {
        const Segment& seg = blk.segments()[s];
        if (p.part != Part::kNone && seg.part != p.part) continue;
        const int64_t lo = std::max(seg.begin, p.begin), hi = std::min(seg.end, p.end);  // a slice's rows
        if (hi <= lo) continue;
        u.segs.push_back({p.block, s, u.elems, hi - lo, lo - seg.begin});
        u.elems += hi - lo;
      }
    }
    if (u.elems < shard_count_)
      user_error("config: [dist] shard_state: unit {} has {} state elements, fewer than the {} ranks", tu.name,
                 u.elems, shard_count_);
    u.own = shard_range(u.elems, shard_rank_, shard_count_);
    for (const SegRef& r : u.segs) {  // the owned parts of the segments
      const int64_t lo = std::max(r.offset, u.own.begin), hi = std::min(r.offset + r.numel, u.own.begin + u.own.len);
      if (hi > lo) u.owned.push_back({r.block, r.segment, lo - u.own.begin, hi - lo, r.in_seg + (lo - r.offset)});
    }
    largest = std::max(largest, u.own.len);
    layout_.push_back(std::move(u));
  }
  steps_.assign(units_.size(), 0);
  has_moments_.assign(units_.size(), false);

  // The compute image: room for the largest unit.
  const uint64_t region = static_cast<uint64_t>(largest) * 4;
  if (separate_master_) image_charges_.emplace_back(acct_, Pool::kCompute, static_cast<int>(StateKind::kMaster), region);
  image_charges_.emplace_back(acct_, Pool::kCompute, static_cast<int>(StateKind::kAdamM), region);
  image_charges_.emplace_back(acct_, Pool::kCompute, static_cast<int>(StateKind::kAdamV), region);
  const torch::Device device = model.block(0).data().device();
  on_cuda_ = device.is_cuda();
  image_ = torch::zeros({largest * (separate_master_ ? 3 : 2)}, torch::TensorOptions(torch::kFloat32).device(device));

  // Homes of what outlives a visit. With a single unit nothing ever leaves the compute tier.
  std::vector<StagedUnit> staged(units_.size());
  for (size_t i = 0; i < units_.size(); ++i) {
    staged[i].name = units_[i].name;
    staged[i].home = storage.unit_home.empty() ? Tier::kPinned : storage.unit_home[i];
    if (units_.size() == 1) continue;
    const uint64_t b = static_cast<uint64_t>(layout_[i].own.len) * 4;
    if (separate_master_) staged[i].kind_bytes[static_cast<int>(StateKind::kMaster)] = b;
    if (keep_state_) {
      staged[i].kind_bytes[static_cast<int>(StateKind::kAdamM)] = b;
      staged[i].kind_bytes[static_cast<int>(StateKind::kAdamV)] = b;
    }
  }
  StagerOptions so = storage.stager;
  so.compute_on_cuda = on_cuda_;  // the switch's copies on CUDA copy streams, else a thread
  compute_stream_ = so.compute_stream;
  stager_ = std::make_unique<Stager>(std::move(staged), so, acct_);
}

BlockAdamW::~BlockAdamW() = default;

uint64_t BlockAdamW::moved_bytes(int64_t s) const {
  if (units_.size() == 1) return 0;
  return static_cast<uint64_t>(s) * 4 * ((separate_master_ ? 1 : 0) + (keep_state_ ? 2 : 0));
}

void BlockAdamW::fill_fresh(int unit) {
  const UnitLayout& u = layout_[unit];
  torch::NoGradGuard ng;
  if (separate_master_) {
    // A bf16 unit's first visit: its master comes from the working weights, a conversion the
    // copier cannot do, so this waits for the switch's copies (once per unit per run).
    stager_->fence();
    for (const SegRef& r : u.owned) {
      const Segment& seg = model_.block(r.block).segments()[r.segment];
      image_.narrow(0, master_at(u.own.len) + r.offset, r.numel)
          .copy_(model_.block(r.block).data().narrow(0, seg.begin + r.in_seg, r.numel));
    }
  }
  zero_moments(unit);
}

void BlockAdamW::zero_moments(int unit) {
  // Behind the previous unit's copy-out on the copier: this step's forward and backward need not
  // wait for it; the update's fence does.
  const int64_t len = layout_[unit].own.len;
  stager_->zero_compute(image_.data_ptr<float>() + m_at(len), static_cast<uint64_t>(2 * len) * 4);
}

void BlockAdamW::activate(int unit) {
  BCD_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "unit {}", unit);
  const int prev = active_;
  if (prev >= 0) {
    for (const UnitPieceShape& p : units_[prev].pieces) model_.block(p.block).set_trainable(false);
    grad_charge_.reset();
    if (!keep_state_) steps_[prev] = 0, has_moments_[prev] = false;
  }
  if (switch_hook_ && prev != unit) {
    std::vector<int> prev_blocks;
    if (prev >= 0)
      for (const UnitPieceShape& p : units_[prev].pieces) prev_blocks.push_back(p.block);
    std::vector<int> blocks;
    for (const UnitPieceShape& p : units_[unit].pieces) blocks.push_back(p.block);
    switch_hook_(prev_blocks, blocks);
  }
  bool fresh = false;  // moments already zeroed
  if (prev != unit) {
    // The previous unit's image goes home; this unit's comes in (or starts fresh).
    const bool loaded = stager_->swap(prev, unit, image_.data_ptr<float>());
    if (!loaded) fill_fresh(unit), fresh = true;
  }
  if (!keep_state_ || !has_moments_[unit]) {  // moments start at zero
    if (!fresh) zero_moments(unit);
    steps_[unit] = 0;
  }
  active_ = unit;
  has_moments_[unit] = true;
  for (const UnitPieceShape& p : units_[unit].pieces) model_.block(p.block).set_trainable(true, p.part, p.begin, p.end);
  uint64_t grad = 0;  // a unit's pieces are of distinct blocks
  for (const UnitPieceShape& p : units_[unit].pieces) grad += static_cast<uint64_t>(model_.block(p.block).grad_bytes());
  grad_charge_ = Charge(acct_, Pool::kCompute, static_cast<int>(StateKind::kGrad), grad);
  // Which rank owns which range of this unit's gradient: the same for the whole visit.
  const UnitLayout& u = layout_[unit];
  grad_ranges_.clear();
  for (int rank = 0; rank < shard_count_; ++rank) {
    const ShardRange sr = shard_range(u.elems, rank, shard_count_);
    for (const SegRef& r : u.segs) {
      const int64_t lo = std::max(r.offset, sr.begin), hi = std::min(r.offset + r.numel, sr.begin + sr.len);
      if (hi > lo)
        grad_ranges_.push_back(
            {r.block, model_.block(r.block).segments()[r.segment].begin + r.in_seg + (lo - r.offset), hi - lo, rank});
    }
  }
}

void BlockAdamW::prefetch(const std::vector<int>& next_units) {
  for (int u : next_units) stager_->prefetch(u);
}

void BlockAdamW::step(double lr) {
  BCD_CHECK(active_ >= 0, "BlockAdamW::step before activate");
  torch::NoGradGuard ng;
  const UnitLayout& u = layout_[active_];
  steps_[active_] += 1;
  stager_->fence();  // the switch's copies: a CPU run waits for them here, after forward/backward
  float* image = image_.data_ptr<float>();
  const int64_t len = u.own.len;
  for (const SegRef& r : u.owned) {
    Block& blk = model_.block(r.block);
    const Segment& seg = blk.segments()[r.segment];
    const int64_t at = seg.begin + r.in_seg;  // in the block's flat buffers
    BCD_CHECK(blk.grad().defined() && at >= blk.grad_begin() && at + r.numel <= blk.grad_end(),
              "block {} has no gradient for elements [{}, +{})", blk.name(), at, r.numel);
    AdamWHyper h;
    h.lr = static_cast<float>(lr);
    h.beta1 = static_cast<float>(cfg_.beta1);
    h.beta2 = static_cast<float>(cfg_.beta2);
    h.eps = static_cast<float>(cfg_.eps);
    h.weight_decay = seg.decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
    h.step = steps_[active_];
    float* m = image + m_at(len) + r.offset;
    float* v = image + v_at(len) + r.offset;
    // The gradient is fp32 either way (a bf16 block sums its micro-batches in fp32). bf16 runs:
    // the fp32 master is in the image and the update rounds it into the bf16 working copy.
    // fp32 runs: the working weights are the master.
    const float* grad = blk.grad().data_ptr<float>() + (at - blk.grad_begin());
    float* master;
    uint16_t* work = nullptr;
    if (separate_master_) {
      master = image + master_at(len) + r.offset;
      work = reinterpret_cast<uint16_t*>(blk.data().data_ptr<at::BFloat16>()) + at;
    } else {
      master = blk.data().data_ptr<float>() + at;
    }
    if (on_cuda_) {
#ifdef BCD_HAVE_CUDA_KERNELS
      // Enqueued on the compute stream, after the fence's waits on the copy streams.
      adamw_step_cuda(master, grad, /*grad_is_bf16=*/false, m, v, r.numel, h, work,
                      static_cast<CUstream_st*>(compute_stream_));
#else
      BCD_CHECK(false, "CUDA state in a build without CUDA kernels");
#endif
    } else {
      adamw_step_cpu(master, grad, m, v, r.numel, h, work);
    }
  }
}

torch::Tensor BlockAdamW::owned_weights() const {
  BCD_CHECK(active_ >= 0, "owned_weights before activate");
  const UnitLayout& u = layout_[active_];
  const torch::Tensor& any = model_.block(0).data();
  torch::Tensor out = torch::zeros({u.own.chunk}, any.options());
  torch::NoGradGuard ng;
  for (const SegRef& r : u.owned) {
    const Block& blk = model_.block(r.block);
    const int64_t at = blk.segments()[r.segment].begin + r.in_seg;
    out.narrow(0, r.offset, r.numel).copy_(blk.data().narrow(0, at, r.numel));
  }
  return out;
}

void BlockAdamW::set_gathered_weights(const torch::Tensor& all) {
  BCD_CHECK(active_ >= 0, "set_gathered_weights before activate");
  const UnitLayout& u = layout_[active_];
  BCD_CHECK(all.numel() == u.own.chunk * shard_count_, "set_gathered_weights: {} elements for {} x {}", all.numel(),
            shard_count_, u.own.chunk);
  torch::NoGradGuard ng;
  std::vector<int64_t> at(static_cast<size_t>(shard_count_), 0);  // per rank: elements of its slice placed
  for (const GradRange& g : grad_ranges_) {  // each rank's ranges in its slice's order
    if (g.rank != shard_rank_)  // ours is in place
      model_.block(g.block).data().narrow(0, g.begin, g.len).copy_(all.narrow(0, g.rank * u.own.chunk + at[g.rank], g.len));
    at[g.rank] += g.len;
  }
}

const std::vector<GradRange>& BlockAdamW::grad_ranges() const {
  BCD_CHECK(active_ >= 0, "grad_ranges before activate");
  return grad_ranges_;
}

int64_t BlockAdamW::unit_moment_bytes(int unit) const {
  return has_moments_.at(unit) ? layout_[unit].own.len * 8 : 0;
}

int64_t BlockAdamW::moment_bytes() const {
  int64_t n = 0;
  for (size_t u = 0; u < units_.size(); ++u) n += unit_moment_bytes(static_cast<int>(u));
  return n;
}

int64_t BlockAdamW::state_bytes() const {
  int64_t n = moment_bytes();
  if (separate_master_)
    for (const UnitLayout& u : layout_) n += u.own.len * 4;
  return n;
}

int BlockAdamW::unit_regions(int unit) const {
  if (unit == active_) return separate_master_ ? 3 : 2;
  const uint64_t moved = moved_bytes(1);
  return moved > 0 && stager_->has_data(unit) ? static_cast<int>(moved / 4) : 0;
}

std::vector<float> BlockAdamW::unit_state(int unit, int64_t* steps) {
  const UnitLayout& u = layout_.at(unit);
  *steps = steps_[unit];
  if (unit == active_) {
    const int64_t n = u.own.len * (separate_master_ ? 3 : 2);
    stager_->fence();
    const torch::Tensor host = image_.narrow(0, 0, n).to(torch::kCPU).contiguous();
    const float* p = host.data_ptr<float>();
    return std::vector<float>(p, p + n);
  }
  const uint64_t moved = moved_bytes(u.own.len);
  if (moved == 0 || !stager_->has_data(unit)) return {};
  std::vector<float> out(moved / 4);
  stager_->get(unit, out.data());
  return out;
}

void BlockAdamW::restore_unit_state(int unit, const std::vector<float>& image, int64_t steps,
                                    const std::string& where) {
  const UnitLayout& u = layout_.at(unit);
  if (unit == active_) {
    const int64_t n = u.own.len * (separate_master_ ? 3 : 2);
    if (static_cast<int64_t>(image.size()) != n)
      user_error("{}: active unit {} has {} state elements, the model needs {}", where, units_[unit].name,
                 image.size(), n);
    stager_->fence();
    torch::NoGradGuard ng;
    image_.narrow(0, 0, n).copy_(torch::from_blob(const_cast<float*>(image.data()), {n}, torch::kFloat32));
    steps_[unit] = steps;
    has_moments_[unit] = true;
    return;
  }
  BCD_CHECK(active_ < 0, "inactive units are restored before activate()");
  if (image.empty()) return;
  const uint64_t moved = moved_bytes(u.own.len);
  if (image.size() * 4 != moved)
    user_error("{}: unit {} has {} state elements, the model needs {}", where, units_[unit].name, image.size(),
               moved / 4);
  stager_->put(unit, image.data());
  steps_[unit] = steps;
  has_moments_[unit] = keep_state_;
}

SegmentState BlockAdamW::view_of(const UnitLayout& u, const SegRef& r, const torch::Tensor& image) {
  auto region = [&](int64_t at) { return image.narrow(0, at + r.offset, r.numel); };
  SegmentState st;
  if (separate_master_) st.master = region(master_at(u.elems));
  st.m = region(m_at(u.elems));
  st.v = region(v_at(u.elems));
  return st;
}

SegmentState BlockAdamW::segment_state(int block, int segment) {
  BCD_CHECK(shard_count_ == 1, "segment_state: a sharded optimizer holds slices, not segments");
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    const UnitLayout& u = layout_[ui];
    for (const SegRef& r : u.segs) {
      if (r.block != block || r.segment != segment) continue;
      const int unit = static_cast<int>(ui);
      if (unit == active_) {
        stager_->fence();
        SegmentState st = view_of(u, r, image_);
        st.step = steps_[unit];
        return st;
      }
      // Inactive: a copy of what its home holds (fresh state when it holds nothing yet).
      torch::Tensor img = torch::zeros({u.elems * (separate_master_ ? 3 : 2)}, torch::kFloat32);
      const bool loaded = moved_bytes(u.elems) > 0 && stager_->get(unit, img.data_ptr<float>());  // the prefix
      SegmentState st = view_of(u, r, img);
      if (separate_master_) {
        st.master = st.master.clone();
        if (!loaded) {
          const Segment& seg = model_.block(block).segments()[segment];
          st.master.copy_(model_.block(block).data().narrow(0, seg.begin + r.in_seg, r.numel));
        }
      }
      if (has_moments_[unit]) st.m = st.m.clone(), st.v = st.v.clone(), st.step = steps_[unit];
      else st.m = torch::Tensor(), st.v = torch::Tensor();
      return st;
    }
  }
  BCD_CHECK(false, "block {} segment {} belongs to no unit", block, segment);
}

}  // namespace bcd
