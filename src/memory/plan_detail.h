// The planner's internals shared by planner.cpp and stream_plan.cpp; not part of its API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memory/planner.h"

namespace bcd::plan_detail {

std::string gib(uint64_t b);  // GiB as the plan prints them (MiB or bytes when small)

// Decoder layers 0..n-1 streamed, the rest resident: window (depth buffers of the largest streamed
// layer), active buffer (the largest unit's streamed layers) and the streamed bytes, all homed in
// host memory (plan_memory then homes what does not fit there on NVMe).
StreamPlan stream_layout(const std::vector<BlockShape>& shapes, const std::vector<UnitShape>& units, int n,
                         uint64_t w, int depth, int sharers);

// The stream's figures (StreamPlan's second half) at s.gbps, s.nvme_gbps and s.tflops.
void model_stream(StreamPlan& s, const std::vector<BlockShape>& shapes, const std::vector<UnitShape>& units,
                  const ModelConfig& m, const TrainConfig& t, uint64_t w);

// The report's "weight stream:" paragraph.
std::string format_stream(const MemoryPlan& p);

}  // namespace bcd::plan_detail
