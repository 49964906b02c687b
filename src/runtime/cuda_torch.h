// LibTorch's CUDA side, as the runtime needs it: the stream training runs on, the caching
// allocator's cap and peaks, the GPU's name and peak throughput. The real functions are in the
// CUDA side (runtime/cuda_torch_side.cpp, loaded as kernels/cuda_side.h says); calling one of
// these loads it, and a build without one refuses (UserError). Only a run on a CUDA device calls
// them, after resolve_device loaded the side.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/config.h"

namespace bcd {

// Makes `device` this process's current CUDA device, for LibTorch and the CUDA runtime alike, and
// initialises LibTorch's CUDA state (its caching allocator among it, which cap_cuda_allocator
// sets; Python's torch.cuda runs the same lazy init first). Called once at start-up, before any
// CUDA memory, stream or event exists, so a rank's pinned pool, copy streams and kernels are on
// its own GPU and no other GPU gets a context.
void start_cuda_device(int device);

// The cudaStream_t LibTorch enqueues on for `device` (its current stream): the copy streams and
// the fused AdamW order themselves against it.
void* torch_current_cuda_stream(int device);

// Caps LibTorch's caching allocator on `device` at `bytes` (its memory fraction), so a smaller
// card (a 24 GiB RTX 4090) is emulated on a bigger one: an allocation past the cap fails as it
// would there. UserError when `bytes` exceeds the device's memory.
void cap_cuda_allocator(int device, uint64_t bytes);

// The caching allocator's peaks since the process started: bytes handed to tensors, and bytes
// reserved from the driver (what the GPU really had to hold).
struct CudaAllocatorPeaks {
  uint64_t allocated = 0;
  uint64_t reserved = 0;
};
CudaAllocatorPeaks cuda_allocator_peaks(int device);

// What the device holds now, by cudaMemGetInfo (total - free): the CUDA context, cuBLAS's
// workspaces, NCCL's buffers and the caching allocator's reserve (and any other process's use),
// what a memory cap on the allocator alone does not count. nullopt when the runtime cannot tell.
std::optional<uint64_t> cuda_device_used_bytes(int device);

// "NVIDIA H200", ...; "" when the runtime cannot tell.
std::string cuda_device_name(int device);

// Dense peak TFLOP/s of a known GPU for the working dtype ("bf16": tensor cores with fp32
// accumulation; "fp32": plain fp32, as LibTorch runs fp32 matmuls without TF32 by default), from
// the vendors' data sheets; nullopt for a GPU not in the table (set train.peak_tflops).
// Matches on the name as CUDA reports it: "NVIDIA GeForce RTX 4090", "NVIDIA A100-SXM4-80GB",
// "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H200", ...
std::optional<double> gpu_peak_tflops(const std::string& name, Dtype dtype);

}  // namespace bcd
