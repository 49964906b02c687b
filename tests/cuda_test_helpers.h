// Helpers of the CUDA tests (CUDA builds only): why no device can be used, device arrays.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"

namespace bcd::test {

// Why no kernel can run here, or "" when a device is usable.
inline std::string no_device_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
  }
  if (count == 0) return "cudaGetDeviceCount returned 0";
  return "";
}

// Device memory for `n` elements of T plus `pad` in front (to misalign the data on purpose).
template <typename T>
class DeviceArray {
 public:
  DeviceArray(int64_t n, int64_t pad = 0) : n_(n), pad_(pad) {
    CUDA_CHECK(cudaMalloc(&base_, (n + pad) * sizeof(T)));
  }
  ~DeviceArray() { cudaFree(base_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return static_cast<T*>(base_) + pad_; }
  // The first `count` elements (-1: all n).
  void upload(const T* host, int64_t count = -1) {
    CUDA_CHECK(cudaMemcpy(get(), host, elems(count) * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download(int64_t count = -1) const {
    std::vector<T> out(elems(count));
    CUDA_CHECK(cudaMemcpy(out.data(), get(), out.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  int64_t elems(int64_t count) const { return count < 0 ? n_ : count; }
  void* base_ = nullptr;
  int64_t n_, pad_;
};

}  // namespace bcd::test
