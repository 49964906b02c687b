// LibTorch's CUDA side (runtime/cuda_torch.h), reached through the CUDA side's table
// (kernels/cuda_side.h): calling any of these loads it.
#include "runtime/cuda_torch.h"

#include <array>

#include "kernels/cuda_side.h"
#include "kernels/host_memory.h"

namespace bcd {

void start_cuda_device(int device) { cuda_side().start_device(device); }

void* torch_current_cuda_stream(int device) { return cuda_side().current_stream(device); }

void cap_cuda_allocator(int device, uint64_t bytes) { cuda_side().cap_allocator(device, bytes); }

CudaAllocatorPeaks cuda_allocator_peaks(int device) {
  CudaAllocatorPeaks p;
  cuda_side().allocator_peaks(device, &p.allocated, &p.reserved);
  return p;
}

std::optional<uint64_t> cuda_device_used_bytes(int device) {
  size_t free_bytes = 0, total_bytes = 0;
  if (!cuda_device_memory(device, &free_bytes, &total_bytes)) return std::nullopt;
  return static_cast<uint64_t>(total_bytes - free_bytes);
}

std::string cuda_device_name(int device) { return cuda_side().device_name(device); }

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
