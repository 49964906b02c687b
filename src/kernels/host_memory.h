// CUDA runtime facts (is a device usable, how much memory) and page-locked host memory for the
// staging slab pool (DESIGN.md §2). Includable from plain C++; implemented in host_memory.cu on
// CUDA builds only.
#pragma once

#include <cstddef>
#include <string>

namespace bcd {

// A CUDA device is present and the runtime answers (cudaGetDeviceCount).
bool cuda_device_usable();

// cudaHostAlloc(portable) of `bytes`; nullptr when no CUDA device is usable or the call fails
// (the caller then falls back to ordinary aligned memory).
void* cuda_pinned_alloc(size_t bytes);
void cuda_pinned_free(void* p);

// cudaHostRegister(portable) of memory the caller mapped (a shared-memory segment), so copies
// from it run at pinned speed. "" when registered, else why not (no usable device, or CUDA's
// error: the locked-memory limit, a kernel without the support).
std::string cuda_host_register(void* p, size_t bytes);
void cuda_host_unregister(void* p);

// Total memory of CUDA device `device` (cudaMemGetInfo); 0 when no device is usable.
size_t cuda_device_total_bytes(int device);

}  // namespace bcd
