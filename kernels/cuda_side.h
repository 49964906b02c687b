// The CUDA side of the program: every call into the CUDA runtime, LibTorch's CUDA library and
// NCCL lives in one shared library, libbcdtrain_cuda.so, loaded when a run asks for a CUDA device
// (runtime/machine's resolve_device) and never otherwise. The program links LibTorch's CPU
// library alone, so `bcdtrain --help`, plan, prepare, tokenize and CPU runs map none of CUDA's
// libraries (LibTorch's CUDA library pulls in cuBLAS, cuDNN, NCCL and the rest: ~250 MB of
// memory at start-up, for every rank and every login-node command).
//
// The program's CUDA-facing functions (kernels/adamw_cuda.h, kernels/copy_streams.h,
// kernels/host_memory.h, runtime/cuda_torch.h, the NCCL process group) are the same
// declarations as before: in the program they call through the table below; in the CUDA side
// they are the real thing, and the side's one exported function hands the table over.
// Loading the side also loads LibTorch's CUDA library, which registers CUDA with LibTorch; it
// must happen before anything asks LibTorch about CUDA (LibTorch keeps its first answer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/adamw.h"

struct CUstream_st;  // cudaStream_t is `CUstream_st*` (driver_types.h)

namespace bcd {

// Bumped whenever CudaSide changes: a side built from other sources is refused when loaded.
inline constexpr uint32_t kCudaSideAbi = 3;

struct CudaSide {
  uint32_t abi = kCudaSideAbi;
  uint32_t size = sizeof(CudaSide);
  // kernels/adamw_cuda.h
  void (*adamw_step)(float* master, const void* grad, bool grad_is_bf16, float* m, float* v, int64_t n,
                     const AdamWHyper& h, uint16_t* bf16_out, CUstream_st* stream) = nullptr;
  std::string (*adamw_unsupported_reason)(int device) = nullptr;
  // kernels/host_memory.h
  bool (*device_usable)() = nullptr;
  std::string (*host_register)(void* p, size_t bytes) = nullptr;
  void (*host_unregister)(void* p) = nullptr;
  bool (*device_memory)(int device, size_t* free_bytes, size_t* total_bytes) = nullptr;
  // kernels/copy_streams.h: the side's CudaCopyStreams behind an opaque handle
  void* (*streams_new)(void* compute_stream) = nullptr;
  void (*streams_delete)(void* s) = nullptr;
  uint64_t (*streams_copy_out)(void* s, void* host, const void* device, size_t bytes) = nullptr;
  uint64_t (*streams_copy_in)(void* s, void* device, const void* host, size_t bytes) = nullptr;
  uint64_t (*streams_zero)(void* s, void* device, size_t bytes) = nullptr;
  bool (*streams_done)(void* s, uint64_t token) = nullptr;
  void (*streams_wait)(void* s, uint64_t token) = nullptr;
  void (*streams_fence)(void* s) = nullptr;
  void (*streams_fence_token)(void* s, uint64_t token) = nullptr;
  double (*streams_copy_seconds)(void* s) = nullptr;
  double (*streams_wait_seconds)(void* s) = nullptr;
  size_t (*streams_live_copies)(const void* s) = nullptr;
  uint64_t (*streams_events_created)(const void* s) = nullptr;
  // runtime/cuda_torch.h
  void (*start_device)(int device) = nullptr;
  void* (*current_stream)(int device) = nullptr;
  void (*cap_allocator)(int device, uint64_t bytes) = nullptr;
  void (*allocator_peaks)(int device, uint64_t* allocated, uint64_t* reserved) = nullptr;
  std::string (*device_name)(int device) = nullptr;
  // dist/process_group: a ProcessGroupNCCL over `store` (a c10d::Store*), returned as an owned
  // c10d::Backend* (intrusive_ptr::release()); null when the side has no NCCL.
  void* (*nccl_backend)(void* store, int rank, int size, int64_t timeout_ms) = nullptr;
};

// The CUDA side, loaded on the first call (thread-safe). UserError naming the library when this
// build has none or it cannot be loaded.
const CudaSide& cuda_side();
// Whether the side has been loaded by this process (nothing is loaded by asking).
bool cuda_side_loaded();
// Whether this build has a CUDA side to load.
bool cuda_side_built();
// Whether this machine shows signs of an NVIDIA GPU (its driver's device files), read without
// loading anything: device = "auto" loads the side only then.
bool nvidia_driver_present();

// The CUDA side's own parts fill the table (defined in the side only).
namespace cuda_side_parts {
void fill_kernels(CudaSide& t);  // kernels/*.cu
void fill_torch(CudaSide& t);    // runtime/cuda_torch_side.cpp
void fill_nccl(CudaSide& t);     // dist/nccl_side.cpp
}  // namespace cuda_side_parts

}  // namespace bcd

// The side's one exported function: its table, filled once.
extern "C" const bcd::CudaSide* bcd_cuda_side_table();
