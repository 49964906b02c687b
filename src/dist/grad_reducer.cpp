// Bucketed all-reduce of the active unit's gradient, started from gradient-accumulator hooks.
#include "dist/grad_reducer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "base/error.h"

namespace bcd {

struct GradReducer::Bucket {
  Block* block = nullptr;
  int64_t begin = 0, end = 0;      // elements of the block's flat gradient
  int params = 0;                  // parameters whose gradient lands in it
  int pending = 0;                 // of those, still to come in this backward
  std::vector<GradRange> pieces;   // sharded: the parts of [begin, end) and their owners
  bool late = false;               // rows of a vocabulary slice (Block::row_grad): no hook says when
                                   // they are complete, so they start after backward, in finish()
};

struct GradReducer::State {
  std::vector<const void*> views;  // the trainable parameter views the layout was built for
  std::vector<int64_t> windows;    // and the trainable blocks' gradient windows (block, begin, end)
  std::vector<GradRange> owners;   // and the owners of their ranges (empty: not sharded)
  std::vector<Bucket> buckets;     // by id (what the hooks name)
  std::vector<size_t> order;       // start order: ids; first the reverse layout, then as observed
  std::vector<size_t> observed;    // ids in the order the first backward completed them
  bool learned = false;            // the order has been taken from a backward
  // Keeps each trainable view's gradient accumulator (and so its hook) alive between steps.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  size_t next = 0;                 // position in `order` of the first bucket not yet started
  uint64_t last_ticket = 0;        // of the last collective started
  bool armed = false;               // from arm() until finish(): the final backward runs
};

// Runs after a parameter's gradient accumulator has added this backward's gradient.
class GradReducer::ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(GradReducer* owner, std::weak_ptr<State> state, size_t bucket)
      : owner_(owner), state_(std::move(state)), bucket_(bucket) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    const auto s = state_.lock();
    if (s && s->armed) owner_->ready(bucket_);
    return outputs;
  }

 private:
  GradReducer* owner_;
  std::weak_ptr<State> state_;
  size_t bucket_;
};

GradReducer::~GradReducer() = default;

void GradReducer::arm(LlamaModel& model, const std::vector<GradRange>& owners) {
  std::vector<const void*> views;
  std::vector<int64_t> windows;
  for (int bi = 0; bi < model.n_blocks(); ++bi) {
    const Block& b = model.block(bi);
    for (const torch::Tensor& p : b.params())
      if (p.requires_grad()) views.push_back(p.unsafeGetTensorImpl());
    if (b.trainable()) windows.insert(windows.end(), {bi, b.grad_begin(), b.grad_end()});
  }
  if (!state_ || state_->views != views || state_->windows != windows || state_->owners != owners)
    rebuild(model, std::move(views), std::move(windows), owners);
  for (Bucket& k : state_->buckets) k.pending = k.params;
  state_->next = 0;
  state_->armed = true;
  stats_.started_in_backward = 0;
}

void GradReducer::rebuild(LlamaModel& model, std::vector<const void*> views, std::vector<int64_t> windows,
                          const std::vector<GradRange>& owners) {
  state_.reset();  // drops the old accumulators (and hooks) before new ones are made
  auto s = std::make_shared<State>();
  s->views = std::move(views);
  s->windows = std::move(windows);
  s->owners = owners;
  // Parameters in reverse layout order: backward reaches the last blocks' and the last
  // parameters' gradients first.
  struct Item {
    Block* block;
    size_t slot;
  };
  std::vector<Item> items;
  for (int bi = model.n_blocks() - 1; bi >= 0; --bi) {
    Block& b = model.block(bi);
    std::vector<size_t> slots;
    for (size_t i = 0; i < b.slots().size(); ++i)
      if (b.params()[i].requires_grad()) slots.push_back(i);
    std::sort(slots.begin(), slots.end(),
              [&](size_t x, size_t y) { return b.slots()[x].offset > b.slots()[y].offset; });
    for (size_t i : slots) items.push_back({&b, i});
  }
  for (const Item& it : items) {
    const ParamSlot& slot = it.block->slots()[it.slot];
    const torch::Tensor& g = it.block->grad();
    const int64_t elem = static_cast<int64_t>(torch::elementSize(torch::kFloat32));
    Bucket* last = s->buckets.empty() ? nullptr : &s->buckets.back();
    const bool fits = last && last->block == it.block &&
                      (last->end - slot.offset) * elem <= static_cast<int64_t>(bucket_bytes_);
    if (fits) {
      last->begin = slot.offset;
      ++last->params;
    } else {
      Bucket k;
      k.block = it.block;
      k.begin = slot.offset, k.end = slot.offset + slot.numel();
      k.params = 1;
      s->buckets.push_back(k);
    }
    BCD_CHECK(g.defined(), "block {} is trainable without a gradient buffer", it.block->name());
    auto acc = torch::autograd::impl::grad_accumulator(it.block->params()[it.slot]);
    BCD_CHECK(acc, "no gradient accumulator for {}.{}", it.block->name(), slot.name);
    acc->add_post_hook(std::make_unique<ReadyHook>(this, s, s->buckets.size() - 1));
    s->accumulators.push_back(std::move(acc));
  }
  // Vocabulary slices: the rows of a matrix the window cuts, in buckets of at most bucket_bytes
  // (at least one row), after every hooked bucket.
  for (int bi = model.n_blocks() - 1; bi >= 0; --bi) {
    Block& b = model.block(bi);
    if (!b.trainable()) continue;
    for (const ParamSlot& slot : b.slots()) {
      const Block::RowGrad rows = b.row_grad(slot.name);
      if (!rows.sum.defined()) continue;
      const int64_t row = rows.sum.numel() / rows.sum.size(0);
      const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(bucket_bytes_) / 4 / row) * row;
      const int64_t lo = slot.offset + rows.first_row * row, hi = lo + rows.sum.numel();
      for (int64_t at = lo; at < hi; at += per) {
        Bucket k;
        k.block = &b;
        k.begin = at, k.end = std::min(hi, at + per);
        k.late = true;
        s->buckets.push_back(k);
      }
    }
  }
  // Sharded: cut each bucket at its owners' ranges (parts no owner covers are not state).
  for (Bucket& k : s->buckets)
    for (const GradRange& o : owners) {
      if (&model.block(o.block) != k.block) continue;
      const int64_t lo = std::max(k.begin, o.begin), hi = std::min(k.end, o.begin + o.len);
      if (hi > lo) k.pieces.push_back({o.block, lo, hi - lo, o.rank});
    }
  s->order.resize(s->buckets.size());
  for (size_t i = 0; i < s->order.size(); ++i) s->order[i] = i;
  state_ = std::move(s);
  ++stats_.rebuilds;
  stats_.buckets = static_cast<int64_t>(state_->buckets.size());
}

void GradReducer::ready(size_t bucket) {
  Bucket& k = state_->buckets[bucket];
  BCD_CHECK(k.pending > 0, "bucket {} of {} completed twice in one backward", bucket, k.block->name());
  if (--k.pending > 0) return;
  if (!state_->learned) state_->observed.push_back(bucket);
  // Start in order: a bucket that completes early waits for the ones before it.
  State& s = *state_;
  while (s.next < s.order.size() && s.buckets[s.order[s.next]].pending == 0 && !s.buckets[s.order[s.next]].late)
    start(s.order[s.next++]);
}

void GradReducer::start(size_t bucket) {
  Bucket& k = state_->buckets[bucket];
  torch::NoGradGuard ng;
  k.block->accumulate_grad(k.begin, k.end - k.begin);  // a bf16 block: the final micro-batch into the fp32 sum
  // What goes on the wire is grad(): fp32 (a bf16 block's fp32 sum).
  if (state_->owners.empty()) {
    state_->last_ticket = pg_.start_all_reduce_sum(k.block->grad_range(k.begin, k.end - k.begin));
  } else {
    for (const GradRange& p : k.pieces)
      state_->last_ticket = pg_.start_reduce_sum(k.block->grad_range(p.begin, p.len), p.rank);
  }
  if (state_->armed) ++stats_.started_in_backward;
}

void GradReducer::finish() {
  BCD_CHECK(state_ && state_->armed, "GradReducer::finish without arm");
  State& s = *state_;
  s.armed = false;  // backward is over: what starts now did not overlap it
  for (; s.next < s.order.size(); ++s.next) start(s.order[s.next]);
  stats_.exposed_s = s.buckets.empty() ? 0.0 : pg_.wait_for(s.last_ticket);
  stats_.exposed_s_total += stats_.exposed_s;
  torch::NoGradGuard ng;
  const double inv = 1.0 / static_cast<double>(pg_.world_size());
  for (Bucket& k : state_->buckets) {
    if (s.owners.empty()) {
      k.block->grad_range(k.begin, k.end - k.begin).mul_(inv);
    } else {
      for (const GradRange& p : k.pieces)
        if (p.rank == pg_.rank()) k.block->grad_range(p.begin, p.len).mul_(inv);
    }
  }
  if (!s.learned) learn_order();
}

// After the first backward of a layout: start buckets in the order that backward completed them
// from now on, when every rank saw the same order (they run the same graph, so they do; should
// they not, all keep the layout order rather than pair mismatched collectives).
void GradReducer::learn_order() {
  State& s = *state_;
  s.learned = true;
  std::vector<size_t> order = s.observed;  // the hooked buckets as completed, then the late ones
  for (size_t id : s.order)
    if (s.buckets[id].late) order.push_back(id);
  s.observed.clear();
  if (order.size() != s.buckets.size() || order == s.order) return;
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the order, cut to 40 bits: exact as a double
  for (size_t id : order) h = (h ^ id) * 1099511628211ull;
  const double mine = static_cast<double>(h & ((1ull << 40) - 1));
  const std::vector<double> sum = pg_.sum_over_ranks({mine});
  if (sum[0] == mine * pg_.world_size()) s.order = std::move(order);
}

}  // namespace bcd
