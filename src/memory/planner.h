// Memory planner: gives every (block, state kind) a home tier, fastest first, and checks the
// budgets of [memory] (DESIGN.md §1-§2). Pure byte arithmetic on the model shape: no torch.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memory/tier.h"
#include "base/config.h"
#include "base/model_shape.h"

namespace bcd {

// ---- Shapes: the model's blocks and units (base/model_shape.h), and what the planner adds ----

// LlamaModel's rotary cos and sin tables: 2 x max_seq_len x head_dim in the working dtype.
uint64_t rope_table_bytes(const ModelConfig& model, Dtype dtype);

// The slice of a unit's S state elements that rank `rank` of `ranks` owns when the block state
// is sharded (dist.shard_state): ceil(S / ranks) elements from rank * ceil(S / ranks), the last
// ranks' slices shorter. The planner plans rank 0's, the largest.
struct ShardRange {
  int64_t begin = 0, len = 0, chunk = 0;  // chunk: ceil(S / ranks), what every rank sends
};
ShardRange shard_range(int64_t elems, int rank, int ranks);

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

// ---- The plan ----

struct StatePlacement {
  uint64_t bytes = 0;
  bool has_home = false;   // false: the state does not exist outside an active visit (or at all)
  Tier home = Tier::kCompute;
};

struct BlockPlan {
  std::string name;
  int64_t params = 0, numel = 0;
  std::array<StatePlacement, kNumStateKinds> state;  // indexed by StateKind
  const StatePlacement& at(StateKind k) const { return state[static_cast<int>(k)]; }
};

// Bytes one tier holds, by what they are. budget 0 with unlimited = not checked (NVMe).
struct TierUsage {
  std::array<uint64_t, kNumStateKinds> by_kind{};
  uint64_t activations = 0;
  uint64_t staging = 0;
  uint64_t budget = 0;
  bool unlimited = false;
  uint64_t total() const;
  int64_t headroom() const { return static_cast<int64_t>(budget) - static_cast<int64_t>(total()); }
};

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

struct MemoryPlan {
  std::vector<BlockPlan> blocks;
  std::vector<UnitShape> units;
  std::vector<Tier> unit_home;  // per unit: home of its master/moments between visits (host or NVMe)
  int largest_unit = 0;       // most optimizer-state bytes: the compute tier reserves its size
  int deepest_unit = 0;       // most activation bytes (the lowest unit: most layers with autograd)
  bool activations_estimated = true;  // false: [memory] activation_bytes was given
  int64_t params = 0;         // real parameters of the model
  int shards = 1;             // ranks the block state is sharded over
  StreamPlan stream;          // streamed layers' weights; stream.on() false: all resident

  TierUsage compute;          // working weights (resident, stream window and active buffer) +
                              // the active unit's state + activations
  TierUsage pinned;           // staging pool: (prefetch_depth + 1) units of master + moments
  TierUsage host;             // streamed weights' share, then resident host copies of inactive
                              // state (budget host - pinned)
  TierUsage nvme;             // the rest; needs [memory] nvme_paths

  bool fits = true;
  std::string why_not;        // when !fits: which tier, what it needs, what it has (GiB)

  // Bytes whose home is `tier` for kind `k`, summed over blocks (kCompute: resident only).
  uint64_t home_bytes(Tier tier, StateKind k) const;
};

// Plans a run (of one rank). model.vocab_size must be resolved (> 0); model.hf_config is not
// read. `shards` > 1: the block state is sharded over that many ranks and this rank holds the
// largest slice of each unit, ceil(S / shards) elements (dist.shard_state).
// `fused_attention`: attention runs in a fused kernel that keeps no T x T score matrix
// (model/llama.h: attention_keeps_scores); false counts the scores (conservative).
// `local_ranks`: ranks on this machine sharing the streamed weights' host copy. `rates`: the
// stream model's (resolve_stream_rates); memory.stream_gbps / stream_tflops, where > 0, win.
MemoryPlan plan_memory(const ModelConfig& model, const BcdConfig& bcd, const TrainConfig& train,
                       const MemoryConfig& memory, int shards = 1, bool fused_attention = false,
                       int local_ranks = 1, StreamRates rates = {});

// Activation bytes on the compute tier while unit `u` is active (formula in planner.cpp).
uint64_t estimate_activation_bytes(const ModelConfig& model, const TrainConfig& train, const UnitShape& u,
                                   bool fused_attention = false);

// The `bcdtrain plan` report: tier table, per-block placements, "fits" / "does not fit: ...".
std::string format_plan(const MemoryPlan& plan);

// "MemTotal" / "MemAvailable" of /proc/meminfo in bytes; UserError when unreadable.
uint64_t meminfo_bytes(const std::string& key);

}  // namespace bcd
