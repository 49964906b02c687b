// CUDA runtime facts (is a device usable, how much memory) and page-locking of host memory for
// the staging slab pool and streamed weights (DESIGN.md §2). Includable from plain C++;
// implemented in host_memory.cu on CUDA builds only, in the CUDA side (kernels/cuda_side.h),
// which a call from the program loads.
#pragma once

#include <cstddef>
#include <string>

namespace bcd {

// A CUDA device is present and the runtime answers (cudaGetDeviceCount).
bool cuda_device_usable();

// cudaHostRegister(portable) of memory the caller mapped (anonymous or a shared-memory segment),
// so copies from it run at pinned speed. Memory used for O_DIRECT or io_uring I/O is registered
// this way, never taken from cudaHostAlloc (DESIGN.md §7). "" when registered, else why not (no usable device, or CUDA's
// error: the locked-memory limit, a kernel without the support).
std::string cuda_host_register(void* p, size_t bytes);
void cuda_host_unregister(void* p);

// Free and total memory of CUDA device `device` (cudaMemGetInfo on that device; the current
// device is left as it was); false when no device is usable.
bool cuda_device_memory(int device, size_t* free_bytes, size_t* total_bytes);

// Total memory of CUDA device `device`; 0 when no device is usable.
inline size_t cuda_device_total_bytes(int device) {
  size_t free_bytes = 0, total_bytes = 0;
  return cuda_device_memory(device, &free_bytes, &total_bytes) ? total_bytes : 0;
}

}  // namespace bcd
