// The metrics.jsonl keys that are read back (the plots, a resume's truncation, TensorBoard's
// replay), written once: the writer (report/metrics.cpp) and every reader use these names. The
// whole schema, every key with its meaning, is README's "metrics.jsonl" section.
#pragma once

namespace bcd::metric_key {

inline constexpr const char* kStep = "step";
inline constexpr const char* kLoss = "loss";
inline constexpr const char* kValLoss = "val_loss";
inline constexpr const char* kTokensPerS = "tokens_per_s";
inline constexpr const char* kElapsedS = "elapsed_s";
inline constexpr const char* kBlock = "block";
inline constexpr const char* kBlockId = "block_id";
inline constexpr const char* kSwitches = "switches";
inline constexpr const char* kStallMs = "stall_ms";
inline constexpr const char* kMemoryPeakBytes = "memory_peak_bytes";  // an object: bytes by pool name

}  // namespace bcd::metric_key
