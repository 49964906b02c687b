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

bool cuda_device_memory(int device, size_t* free_bytes, size_t* total_bytes) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || (previous != device && cudaSetDevice(device) != cudaSuccess)) {
    cudaGetLastError();
    return false;
  }
  const cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
  if (previous != device) cudaSetDevice(previous);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

}  // namespace bcd
