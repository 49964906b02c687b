// What the planner adds to the model's shape (base/model_shape.h): rotary tables and shard
// ranges (memory/planner.h).
#include <algorithm>

#include "base/error.h"
#include "memory/planner.h"

namespace bcd {

uint64_t rope_table_bytes(const ModelConfig& m, Dtype dtype, int64_t seq_len) {
  const uint64_t w = dtype == Dtype::kBf16 ? 2 : 4;
  return 2 * static_cast<uint64_t>(rope_table_positions(m, seq_len)) * static_cast<uint64_t>(m.head_dim()) * w;
}

ShardRange shard_range(int64_t elems, int rank, int ranks) {
  BCD_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "shard_range: rank {} of {}", rank, ranks);
  ShardRange r;
  r.chunk = (elems + ranks - 1) / ranks;
  r.begin = std::min<int64_t>(static_cast<int64_t>(rank) * r.chunk, elems);
  r.len = std::min<int64_t>(r.chunk, elems - r.begin);
  return r;
}

}  // namespace bcd
