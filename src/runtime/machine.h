// The machine a rank runs on: its compute device, its threads, its share of the machine's memory.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "base/config.h"

namespace bcd {

// The CUDA device index of `device` ("cuda" without an index is device 0).
inline int cuda_index(const torch::Device& device) { return device.index() < 0 ? 0 : device.index(); }

// [train] device -> the compute device: "cpu", "cuda" (UserError naming why when it is not
// usable: no CUDA kernels in this build, LibTorch sees no device, or the GPU's architecture has
// no kernel image in this build), "auto" (cuda when usable). On CUDA the rank's GPU
// (cuda_device_for_rank) becomes the process's current device (start_cuda_device). The CUDA
// side (kernels/cuda_side.h) is loaded here and nowhere before: for "cuda", and for "auto" where
// a GPU driver's device files are seen; "cpu" and "auto" without one load nothing.
torch::Device resolve_device(DeviceChoice device, int local_rank = 0, int local_ranks = 1);

// The GPU of local rank `local_rank` of `local_ranks` on a machine where it sees `visible` GPUs:
// its LOCAL_RANK when every local rank has one of its own (torchrun, bcdtrain launch), 0 when it
// sees exactly one (Slurm's --gpus-per-task, CUDA_VISIBLE_DEVICES per rank); UserError when
// ranks would have to share a GPU.
int cuda_device_for_rank(int local_rank, int local_ranks, int visible);

// memory.compute_bytes = auto on a CUDA device: the device's total memory (on the CPU the planner
// takes the host's MemTotal).
void apply_device_budget(MemoryConfig& mem, const torch::Device& device);

// Sets torch's intra-op threads (0 = this process's share of the cores: all of them, divided
// among the ranks running on this machine).
void configure_threads(int64_t threads, int local_ranks = 1);

// How [train] computes: the CPU's threads (configure_threads), the GEMM its fp32 products use
// (train.cpu_matmul, model/matmul.h), and TF32 for CUDA's fp32 products (train.tf32).
void configure_compute(const TrainConfig& tc, int local_ranks = 1);

// "MemTotal" / "MemAvailable" of /proc/meminfo in bytes; UserError when unreadable.
uint64_t meminfo_bytes(const std::string& key);

// The machine's memory in the plan's budgets (the planner reads no machine): the "auto" host
// budget, and on the CPU the compute budget, become this rank's share of what /proc/meminfo
// reports (MemAvailable, MemTotal), 1/local_ranks of it when ranks share the machine. On a GPU
// apply_device_budget gives the compute budget first.
void share_machine_memory(MemoryConfig& mem, const torch::Device& device, int local_ranks);

}  // namespace bcd
