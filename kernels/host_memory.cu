// Device facts and cudaHostRegister for the pinned slab pool and streamed weights.
#include "kernels/host_memory.h"

#include <cuda_runtime_api.h>

namespace bcd {

bool cuda_device_usable() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear the sticky "no device" status
    return false;
  }
  return true;
}

std::string cuda_host_register(void* p, size_t bytes) {
  if (!cuda_device_usable()) return "no CUDA device is usable";
  const cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("cudaHostRegister: ") + cudaGetErrorString(e);
  }
  return "";
}

void cuda_host_unregister(void* p) {
  if (p && cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

size_t cuda_device_total_bytes(int device) {
  int previous = 0;
  size_t free_b = 0, total = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || (previous != device && cudaSetDevice(device) != cudaSuccess) ||
      cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if (previous != device) cudaSetDevice(previous);
  return total;
}

}  // namespace bcd
