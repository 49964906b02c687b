// The weight stream's part of the plan (DESIGN.md §2): the rates, where streamed layers live, what
// the window and active buffer cost, the stream model (bytes, copies against compute, exposed
// time). plan_memory (planner.cpp) decides how many layers stream and writes its report paragraph.
#include "memory/stream_plan.h"

#include <algorithm>

namespace bcd {

// ---- The weight stream ----

StreamRates resolve_stream_rates(const MemoryConfig& mem, const TrainConfig& train, bool on_cuda,
                                 std::optional<double> device_peak_tflops) {
  StreamRates r;  // the CPU's
  if (on_cuda) {
    r.gbps = 25;  // PCIe 4.0 x16 from pinned memory, what a 4090 sustains
    const std::optional<double> peak = train.peak_tflops > 0 ? std::optional<double>(train.peak_tflops) : device_peak_tflops;
    r.tflops = peak && *peak > 0 ? 0.5 * *peak : 80;
  }
  if (on_cuda) r.nvme_gbps = 6;  // one PCIe 4.0 NVMe drive's sequential reads
  if (mem.stream_gbps > 0) r.gbps = mem.stream_gbps;
  if (mem.stream_tflops > 0) r.tflops = mem.stream_tflops;
  if (mem.stream_nvme_gbps > 0) r.nvme_gbps = mem.stream_nvme_gbps;
  return r;
}

bool StreamPlan::on() const { return std::find(streamed.begin(), streamed.end(), true) != streamed.end(); }
int StreamPlan::streamed_count() const { return static_cast<int>(std::count(streamed.begin(), streamed.end(), true)); }

double stream_exposed_seconds(const std::vector<StreamUse>& uses, int depth, int passes) {
  const size_t window = static_cast<size_t>(std::max(depth, 1));
  std::vector<double> freed;  // per copied use: when its compute ends and its buffer is free
  double copy_end = 0, compute_end = 0, busy = 0;
  for (int pass = 0; pass < passes; ++pass) {
    for (const StreamUse& u : uses) {
      double ready = 0;
      if (u.copy_s > 0) {
        const size_t k = freed.size();
        copy_end = std::max(copy_end, k >= window ? freed[k - window] : 0.0) + u.copy_s;
        ready = copy_end;
      }
      compute_end = std::max(compute_end, ready) + u.compute_s;
      busy += u.compute_s;
      if (u.copy_s > 0) freed.push_back(compute_end);
    }
  }
  return std::max(0.0, compute_end - busy);
}

namespace plan_detail {

// Layers 0..n-1 streamed, the rest resident: window, active buffer and host copy.
StreamPlan stream_layout(const std::vector<BlockShape>& shapes, const std::vector<UnitShape>& units, int n,
                         uint64_t w, int depth, int sharers) {
  StreamPlan s;
  s.streamed.assign(shapes.size(), false);
  s.home.assign(shapes.size(), Tier::kCompute);
  s.sharers = std::max(sharers, 1);
  for (int l = 0; l < n; ++l) {
    const uint64_t b = static_cast<uint64_t>(shapes[l + 1].numel) * w;  // block l + 1 is layer.l
    s.streamed[l + 1] = true;
    s.home[l + 1] = Tier::kPinned;
    s.home_bytes += b;
    s.slot_bytes = std::max(s.slot_bytes, b);
  }
  if (n == 0) return s;
  s.depth = depth;
  for (const UnitShape& u : units) {
    std::vector<int> blocks;  // a block split into attn/mlp pieces is one buffer
    for (const auto& piece : u.pieces)
      if (s.streamed[piece.block] && std::find(blocks.begin(), blocks.end(), piece.block) == blocks.end())
        blocks.push_back(piece.block);
    uint64_t a = 0;
    for (int b : blocks) a += static_cast<uint64_t>(shapes[b].numel) * w;
    s.active_bytes = std::max(s.active_bytes, a);
  }
  return s;
}

// The stream's figures (StreamPlan's second half) at s.gbps and s.tflops. Per micro-batch of
// B x T tokens, unit u active with first layer f: the forward runs layers 0..L-1 in order, the
// backward L-1 down to f; a streamed layer outside u is copied for each of its uses, except the
// layers below f, which run a step's micro-batches in one use (runtime/trainer.cpp).
// One layer's forward, as runtime/flops.cpp counts it: 2 FLOPs per matrix weight per token plus
// causal attention's scores and weighted sum, 2 * 2 * H * D * (T + 1) / 2 per token; a backward
// use recomputes the forward and takes the input gradient (the matmuls again, attention's four
// products for two). The active unit's weight gradients are left out: less compute to hide
// copies behind, so the estimate errs towards "cannot keep up".
void model_stream(StreamPlan& s, const std::vector<BlockShape>& shapes, const std::vector<UnitShape>& units,
                  const ModelConfig& m, const TrainConfig& t, uint64_t w) {
  const int n_layers = static_cast<int>(m.n_layers);
  const double c = static_cast<double>(m.d_model), d = static_cast<double>(m.head_dim());
  const double h = static_cast<double>(m.n_heads), kv = static_cast<double>(m.kv_heads());
  const double tokens = static_cast<double>(t.batch_size) * static_cast<double>(t.seq_len);
  const double matrices = (h + 2 * kv) * d * c + c * h * d + 3 * static_cast<double>(m.ff_dim()) * c;
  const double attn = 2.0 * 2.0 * h * d * (static_cast<double>(t.seq_len) + 1) / 2;
  const double fwd_s = tokens * (2 * matrices + attn) / (s.tflops * 1e12);
  const double bwd_s = 2 * fwd_s + tokens * attn / (s.tflops * 1e12);
  const double accum = static_cast<double>(t.grad_accum);
  double worst_ratio = 0;  // the slowest unit is the one with the most bytes until one shows copies
  for (size_t i = 0; i < units.size(); ++i) {
    const UnitShape& u = units[i];
    std::vector<bool> own(shapes.size(), false);
    for (const auto& piece : u.pieces) own[piece.block] = true;
    // A step: the layers below the unit (its frozen prefix) run every micro-batch while each is
    // on the compute tier (one copy a step, accum forwards of compute), then each micro-batch
    // runs the layers from the unit up, forward, and back down to it.
    std::vector<StreamUse> prefix, pass;
    uint64_t prefix_bytes = 0, pass_bytes = 0;
    auto use = [&](std::vector<StreamUse>& to, uint64_t& bytes, int layer, double compute_s) {
      const int b = layer + 1;
      StreamUse x{compute_s, 0};
      if (s.streamed[b] && !own[b]) {
        const uint64_t n = static_cast<uint64_t>(shapes[b].numel) * w;
        bytes += n;
        // NVMe homes: read, then copied; the two overlap across layers, the slower one sets the pace
        const double gbps = s.home[b] == Tier::kNvme ? std::min(s.gbps, s.nvme_gbps) : s.gbps;
        x.copy_s = static_cast<double>(n) / (gbps * 1e9);
      }
      to.push_back(x);
    };
    const int below = std::clamp(u.first_layer, 0, n_layers);
    for (int l = 0; l < below; ++l) use(prefix, prefix_bytes, l, accum * fwd_s);
    for (int l = below; l < n_layers; ++l) use(pass, pass_bytes, l, fwd_s);
    for (int l = n_layers - 1; l >= below; --l) use(pass, pass_bytes, l, bwd_s);
    double compute = 0, copy = 0;
    for (const StreamUse& x : prefix) compute += x.compute_s, copy += x.copy_s;
    for (const StreamUse& x : pass) compute += accum * x.compute_s, copy += accum * x.copy_s;
    // The window prefetches across steps: in the steady state a step's exposed time is the third
    // step's less the first's over two. The step's uses are modelled for up to kExactPasses
    // micro-batches (a size that grad_accum does not bound); each one past them adds a pass's
    // steady-state exposure.
    constexpr int64_t kExactPasses = 64;
    const int64_t exact = std::min<int64_t>(t.grad_accum, kExactPasses);
    std::vector<StreamUse> step = prefix;
    for (int64_t k = 0; k < exact; ++k) step.insert(step.end(), pass.begin(), pass.end());
    auto steady = [&](const std::vector<StreamUse>& uses) {
      return (stream_exposed_seconds(uses, s.depth, 3) - stream_exposed_seconds(uses, s.depth, 1)) / 2;
    };
    double per_step = steady(step);
    if (t.grad_accum > exact) per_step += static_cast<double>(t.grad_accum - exact) * steady(pass);
    // (rounding of the two sums aside: below a nanosecond per second of compute is none)
    const double exposed = per_step > 1e-9 * compute ? per_step : 0.0;
    const uint64_t step_bytes = prefix_bytes + static_cast<uint64_t>(t.grad_accum) * pass_bytes;
    s.per_unit.push_back({step_bytes, copy, compute, exposed});
    if (i == 0 || step_bytes > s.bytes_per_step) s.bytes_per_step = step_bytes, s.worst_unit = static_cast<int>(i);
    const double ratio = compute > 0 ? exposed / compute : 0;
    if (ratio > worst_ratio) worst_ratio = ratio, s.slowest_unit = static_cast<int>(i);
  }
  if (worst_ratio == 0) s.slowest_unit = s.worst_unit;
  s.compute_s_per_step = s.per_unit[s.slowest_unit].compute_s;
  s.exposed_s_per_step = s.per_unit[s.slowest_unit].exposed_s;
  s.copy_s_per_step = s.per_unit[s.worst_unit].copy_s;
  s.keeps_up = worst_ratio <= 0.10;
}

}  // namespace plan_detail

}  // namespace bcd
