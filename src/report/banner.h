// The lines a run prints before its first step (model, data, training, utilisation, BCD, memory,
// streamed weights, ranks, resume), from a RunDescription: plain figures that the run's set-up
// fills in (runtime/run_description.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/config.h"
#include "memory/stream_plan.h"

namespace bcd {

struct RunDescription {
  ModelConfig model;             // as built
  TrainConfig train;
  BcdConfig bcd;
  OptimImpl optim = OptimImpl::kFused;
  uint64_t bucket_bytes = 0;     // dist.bucket_bytes
  int64_t num_params = 0;
  int n_blocks = 0;
  struct Source {
    std::string dir;
    int64_t train_tokens = 0, val_tokens = 0;
    double weight = 1, unigram_val_loss = 0;
  };
  std::vector<Source> sources;
  int64_t tokens_per_step = 0;   // over all ranks
  bool on_cuda = false;
  int threads = 0;               // the CPU's intra-op threads
  std::string cpu_matmul;        // the CPU's fp32 GEMMs (model/matmul.h)
  std::string gpu;               // the GPU's name ("" on the CPU, or when unknown)
  std::optional<double> peak_tflops;  // the MFU's reference
  std::vector<std::string> units;     // BCD's blocks, in order
  // Staged optimizer state (the block optimizer with more than one unit).
  struct Staging {
    uint64_t compute_bytes = 0, planned_compute_bytes = 0;
    int slabs = 0;
    uint64_t slab_bytes = 0;
    int units_on_host = 0, units_on_nvme = 0;
  };
  std::optional<Staging> staging;
  // Frozen layers' weights streamed from host memory.
  struct Stream {
    int streamed = 0, on_nvme = 0;
    uint64_t host_bytes = 0;
    int shared_by = 0;           // ranks sharing one host copy (0: not shared)
    int depth = 0;
    StreamPlan plan;
  };
  std::optional<Stream> stream;
  int world_size = 1;
  std::string backend;
  int shards = 1;
  std::string resume_from;       // "" for a fresh run
  int64_t resumed_step = 0;
  double resume_s = 0;
};

std::vector<std::string> run_banner(const RunDescription& run);

}  // namespace bcd
