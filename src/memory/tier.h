// The three memory tiers a block's state can live in (DESIGN.md §2).
#pragma once

namespace bcd {

// kCompute: GPU memory (host memory under a byte budget on CPU-only builds).
// kPinned:  host memory: the page-locked staging pool and the resident host copies of state.
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

}  // namespace bcd
