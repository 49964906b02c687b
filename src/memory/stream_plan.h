// The weight stream's part of the memory plan (DESIGN.md §2): its rates, the layout of streamed
// layers (window, active buffer, homes) and the stream model (bytes, copies against compute,
// exposed time). Pure arithmetic on the model's shape; planner.h decides how many layers stream.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/model_shape.h"
#include "memory/tier.h"

namespace bcd {

// ---- The weight stream's rates ----

// What the stream model assumes: host -> compute copy bandwidth and sustained compute. The
// defaults are the CPU's; a GPU run resolves them with resolve_stream_rates.
struct StreamRates {
  double gbps = 10;      // GB/s (1e9 bytes/s)
  double tflops = 0.1;   // TFLOP/s (1e12 FLOP/s)
  double nvme_gbps = 2;  // NVMe reads of layers homed there, GB/s
};

// [memory] stream_gbps / stream_tflops where given (> 0), else by device: on CUDA 25 GB/s (PCIe
// 4.0 x16 from pinned memory) and half the peak (train.peak_tflops if > 0, else
// `device_peak_tflops`, a known GPU's data sheet), 80 TFLOP/s without either; on the CPU 10 GB/s
// and 0.1 TFLOP/s.
StreamRates resolve_stream_rates(const MemoryConfig& memory, const TrainConfig& train, bool on_cuda,
                                 std::optional<double> device_peak_tflops = std::nullopt);

// One use of a streamed layer's weights in a micro-batch, or a resident layer's compute between
// them (copy_s = 0). Seconds at the plan's rates.
struct StreamUse {
  double compute_s = 0, copy_s = 0;
};

// Seconds by which compute waits for the stream over `passes` back-to-back runs of `uses` with
// `depth` window buffers: copies run one at a time in use order, a copy starts once the buffer
// of the copied use `depth` copies earlier is free (its compute done), and a use computes once
// the use before it is done and its copy has landed. The window starts empty, so the first copy
// is exposed whole; with depth 2 and no backlog each later copy hides behind the compute before
// it: exposed = max(0, copy - compute before). Copies run ahead into the next pass as
// WeightStream prefetches (cyclically, in the announced order).
double stream_exposed_seconds(const std::vector<StreamUse>& uses, int depth, int passes = 1);

// Frozen decoder layers' working weights with a home in host memory, copied to the compute tier
// when used (memory.stream_weights; DESIGN.md §2). Only decoder layers' blocks stream; embed and head
// stay on compute. A streamed block's weights (numel * w bytes) are one copy per machine, shared
// by the local ranks; the compute tier holds `depth` window buffers of `slot_bytes` and an active
// buffer of `active_bytes` for the active unit's streamed blocks (resident for its visit).
struct StreamPlan {
  std::vector<bool> streamed;  // per block
  std::vector<Tier> home;      // per block: a streamed block's weights' home (kPinned: host memory,
                               // the only one planned), kCompute for resident blocks
  int depth = 0;               // window buffers (memory.stream_depth); 0 when nothing streams
  uint64_t slot_bytes = 0;     // the largest streamed block's working bytes
  uint64_t active_bytes = 0;   // max over units of its streamed blocks' working bytes (each block once)
  uint64_t home_bytes = 0;     // all streamed blocks' working bytes
  uint64_t nvme_bytes = 0;     // of which homed on the NVMe tier (home kNvme; each rank its own copy);
                               // the rest is the machine's host copy
  uint64_t staging_bytes = 0;  // NVMe homes: depth + 1 pinned read buffers of slot_bytes (4 KiB rounded)
  double nvme_gbps = 0;        // NVMe reads at this rate (the copy of such a layer runs at the slower one)
  uint64_t host_bytes() const { return home_bytes - nvme_bytes; }
  int sharers = 1;             // local ranks sharing that copy: each is charged ceil(home / sharers)
  double gbps = 0, tflops = 0; // the rates the figures below assume
  // Per unit (as MemoryPlan::units), when on(): what one step with it active streams.
  struct UnitFigures {
    uint64_t bytes = 0;        // copied per step
    double copy_s = 0;         // bytes at gbps
    double compute_s = 0;      // decoder layers' compute per step at tflops
    double exposed_s = 0;      // compute waiting for copies per step, the window warm from the
                               // pass before (stream_exposed_seconds in its steady state)
  };
  std::vector<UnitFigures> per_unit;
  // The unit that copies the most bytes per step (grad_accum micro-batches): a streamed layer
  // below its first layer is copied once (forward), one at or above it twice (checkpointed
  // forward, then recompute and input gradient in backward); its own blocks are not copied.
  int worst_unit = 0;
  uint64_t bytes_per_step = 0;
  double copy_s_per_step = 0;  // bytes_per_step at gbps
  // The unit whose copies are the most exposed (exposed / compute): its decoder layers' compute
  // per step at tflops and the time compute waits for copies (UnitFigures::exposed_s).
  int slowest_unit = 0;
  double compute_s_per_step = 0, exposed_s_per_step = 0;
  bool keeps_up = true;        // exposed <= 10% of compute for every unit

  bool on() const;             // any block streamed
  int streamed_count() const;
  uint64_t window_bytes() const { return static_cast<uint64_t>(depth) * slot_bytes; }
};

// The planner's own pieces, shared by its files (plan_memory's, not part of its API).
namespace plan_detail {

// Decoder layers 0..n-1 streamed, the rest resident: window (depth buffers of the largest streamed
// layer), active buffer (the largest unit's streamed layers) and the streamed bytes, all homed in
// host memory (plan_memory then homes what does not fit there on NVMe).
StreamPlan stream_layout(const std::vector<BlockShape>& shapes, const std::vector<UnitShape>& units, int n,
                         uint64_t w, int depth, int sharers);

// The stream's figures (StreamPlan's second half) at s.gbps, s.nvme_gbps and s.tflops.
void model_stream(StreamPlan& s, const std::vector<BlockShape>& shapes, const std::vector<UnitShape>& units,
                  const ModelConfig& m, const TrainConfig& t, uint64_t w);

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// A size as the plan's table and messages print it: GiB, or MiB or bytes when too small to show.
std::string gib(uint64_t b);

}  // namespace plan_detail

}  // namespace bcd
