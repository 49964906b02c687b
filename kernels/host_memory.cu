// cudaHostAlloc / cudaFreeHost for the pinned slab pool.
#include "kernels/host_memory.h"

#include <cuda_runtime_api.h>

namespace bcd {

void* cuda_pinned_alloc(size_t bytes) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear the sticky "no device" status
    return nullptr;
  }
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void cuda_pinned_free(void* p) {
  if (p) cudaFreeHost(p);
}

}  // namespace bcd
