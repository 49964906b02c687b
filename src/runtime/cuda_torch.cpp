// LibTorch's CUDA side (runtime/cuda_torch.h).
#include "runtime/cuda_torch.h"

#include <fmt/format.h>

#ifdef BCD_TORCH_CUDA
#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include <array>

#include "base/error.h"

namespace bcd {

void start_cuda_device(int device) {
#ifdef BCD_TORCH_CUDA
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
#else
  (void)device;
#endif
}

void* torch_current_cuda_stream(int device) {
#ifdef BCD_TORCH_CUDA
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
#else
  (void)device;
  return nullptr;
#endif
}

void cap_cuda_allocator(int device, uint64_t bytes) {
#ifdef BCD_TORCH_CUDA
  size_t free_b = 0, total = 0;
  int before = 0;
  if (cudaGetDevice(&before) != cudaSuccess || (before != device && cudaSetDevice(device) != cudaSuccess) ||
      cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    user_error("cuda:{}: cannot read the device's memory size to cap it at {} bytes", device, bytes);
  }
  if (before != device) cudaSetDevice(before);
  if (bytes > total)
    user_error("config: [memory] compute_bytes = {:.2f} GiB exceeds cuda:{}'s {:.2f} GiB", bytes / 1073741824.0, device,
               total / 1073741824.0);
  // The allocator exists per device only after LibTorch's CUDA init (a CUDA tensor, or this):
  // setMemoryFraction on an uninitialised one fails its "did you call init?" assertion.
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  c10::cuda::CUDACachingAllocator::setMemoryFraction(static_cast<double>(bytes) / static_cast<double>(total),
                                                     static_cast<c10::DeviceIndex>(device));
#else
  (void)device, (void)bytes;
#endif
}

std::optional<CudaAllocatorPeaks> cuda_allocator_peaks(int device) {
#ifdef BCD_TORCH_CUDA
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  constexpr size_t kAggregate = 0;  // StatType::AGGREGATE: all pools together
  CudaAllocatorPeaks p;
  p.allocated = static_cast<uint64_t>(stats.allocated_bytes[kAggregate].peak);
  p.reserved = static_cast<uint64_t>(stats.reserved_bytes[kAggregate].peak);
  return p;
#else
  (void)device;
  return std::nullopt;
#endif
}

std::optional<uint64_t> cuda_device_used_bytes(int device) {
#ifdef BCD_TORCH_CUDA
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess || (current != device && cudaSetDevice(device) != cudaSuccess)) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  size_t free = 0, total = 0;
  const cudaError_t e = cudaMemGetInfo(&free, &total);
  if (current != device) cudaSetDevice(current);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  return static_cast<uint64_t>(total - free);
#else
  (void)device;
  return std::nullopt;
#endif
}

std::string cuda_device_name(int device) {
#ifdef BCD_TORCH_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return prop.name;
#else
  (void)device;
  return "";
#endif
}

std::optional<double> gpu_peak_tflops(const std::string& name, Dtype dtype) {
  struct Gpu {
    const char* match;  // a part of CUDA's device name; more specific names first
    double bf16, fp32;  // dense TFLOP/s
  };
  static constexpr std::array<Gpu, 10> kGpus = {{
      {"RTX 4090", 165.2, 82.6},
      {"RTX 3090", 71.0, 35.6},
      {"L40S", 362.1, 91.6},
      {"A100", 312.0, 19.5},
      {"A800", 312.0, 19.5},
      {"H100 PCIe", 756.5, 51.2},
      {"H100", 989.4, 66.9},  // SXM: "NVIDIA H100 80GB HBM3"
      {"H800", 989.4, 66.9},
      {"H200 NVL", 835.5, 60.3},
      {"H200", 989.4, 66.9},  // also GH200's name: the same GPU
  }};
  for (const Gpu& g : kGpus)
    if (name.find(g.match) != std::string::npos) return dtype == Dtype::kBf16 ? g.bf16 : g.fp32;
  return std::nullopt;
}

}  // namespace bcd
