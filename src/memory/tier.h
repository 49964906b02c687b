// The memory tiers a block's state can live in (DESIGN.md §2), and what the bytes in them are.
#pragma once

namespace bcd {

// Home of a state between visits.
// kCompute: GPU memory (host memory under a byte budget on CPU-only builds).
// kPinned:  host memory: the resident host copies of state (named "host" in reports).
// kNvme:    files on the NVMe paths, read and written with O_DIRECT.
enum class Tier { kCompute, kPinned, kNvme };

inline const char* tier_name(Tier t) {
  switch (t) {
    case Tier::kCompute: return "compute";
    case Tier::kPinned: return "host";
    case Tier::kNvme: return "nvme";
  }
  return "?";
}

// The four rows of a plan and of the runtime accounting: the compute tier, the pinned staging
// pool, resident host copies, and the NVMe tier.
enum class Pool { kCompute, kPinned, kHost, kNvme };
constexpr int kNumPools = 4;

inline const char* pool_name(Pool p) {
  switch (p) {
    case Pool::kCompute: return "compute";
    case Pool::kPinned: return "pinned";
    case Pool::kHost: return "host";
    case Pool::kNvme: return "nvme";
  }
  return "?";
}

enum class StateKind { kWorking, kMaster, kAdamM, kAdamV, kGrad };
constexpr int kNumStateKinds = 5;
const char* state_kind_name(StateKind k);  // "working", "master", "m", "v", "grad"

}  // namespace bcd
