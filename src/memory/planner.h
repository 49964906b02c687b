// Memory planner: gives every (block, state kind) a home tier, fastest first, and checks the
// budgets of [memory] (DESIGN.md §1-§2). Pure byte arithmetic on the model shape: no torch.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/model_shape.h"
#include "memory/stream_plan.h"
#include "memory/tier.h"

namespace bcd {

// ---- Shapes: the model's blocks and units (base/model_shape.h), and what the planner adds ----

// LlamaModel's rotary cos and sin tables for sequences of seq_len tokens: 2 x
// rope_table_positions x head_dim in the working dtype.
uint64_t rope_table_bytes(const ModelConfig& model, Dtype dtype, int64_t seq_len);

// The slice of a unit's S state elements that rank `rank` of `ranks` owns when the block state
// is sharded (dist.shard_state): ceil(S / ranks) elements from rank * ceil(S / ranks), the last
// ranks' slices shorter. The planner plans rank 0's, the largest.
struct ShardRange {
  int64_t begin = 0, len = 0, chunk = 0;  // chunk: ceil(S / ranks), what every rank sends
};
ShardRange shard_range(int64_t elems, int rank, int ranks);

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
  uint64_t reserved = 0;  // compute tier on a GPU: the CUDA runtime's own (cuda_runtime_reserve)
  uint64_t budget = 0;
  bool unlimited = false;
  uint64_t total() const;
  int64_t headroom() const { return static_cast<int64_t>(budget) - static_cast<int64_t>(total()); }
};

// Device memory a CUDA rank holds outside LibTorch's caching allocator, which a cap on the
// allocator does not limit: estimates per GPU, counted in the compute tier's plan (and taken off
// the allocator's cap) so that "fits 24 GiB" means the whole device, not the allocator alone.
// `cudaMemGetInfo` in the GPU check measures what they leave out.
constexpr uint64_t kCudaContextBytes = 640ull << 20;  // context, LibTorch's and NCCL's kernels loaded lazily
constexpr uint64_t kCublasWorkspaceBytes = 64ull << 20;  // cuBLAS + cuBLASLt workspaces (32 MiB each on Hopper)
constexpr uint64_t kNcclBytes = 512ull << 20;  // NCCL's channel buffers and proxy state, several ranks
struct CudaReserve {
  uint64_t context = 0, cublas = 0, nccl = 0;
  uint64_t total() const { return context + cublas + nccl; }
};
// The reserve of a CUDA rank in a run of `world_ranks` ranks (NCCL only with several).
CudaReserve cuda_runtime_reserve(int world_ranks);

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

  CudaReserve reserve;        // in compute.reserved
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
// read; memory.compute_bytes and host_bytes must be sizes, not "auto" (the caller resolves them:
// a run takes its share of the machine). `shards` > 1: the block state is sharded over that many ranks and this rank holds the
// largest slice of each unit, ceil(S / shards) elements (dist.shard_state).
// `fused_attention`: attention runs in a fused kernel that keeps no T x T score matrix
// (model/llama.h: attention_keeps_scores); false counts the scores (conservative).
// `local_ranks`: ranks on this machine sharing the streamed weights' host copy. `rates`: the
// stream model's (resolve_stream_rates); memory.stream_gbps / stream_tflops, where > 0, win.
// `reserve`: what the compute device holds besides the allocator (cuda_runtime_reserve on a GPU,
// none on the CPU).
MemoryPlan plan_memory(const ModelConfig& model, const BcdConfig& bcd, const TrainConfig& train,
                       const MemoryConfig& memory, int shards = 1, bool fused_attention = false,
                       int local_ranks = 1, StreamRates rates = {}, CudaReserve reserve = {});

// Activation bytes on the compute tier while unit `u` is active (formula in planner.cpp).
uint64_t estimate_activation_bytes(const ModelConfig& model, const TrainConfig& train, const UnitShape& u,
                                   bool fused_attention = false);

// The `bcdtrain plan` report: tier table, per-block placements, "fits" / "does not fit: ...".
std::string format_plan(const MemoryPlan& plan);


}  // namespace bcd
