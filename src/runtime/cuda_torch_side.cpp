// LibTorch's CUDA side (runtime/cuda_torch.h): the real functions, built into the CUDA side
// (kernels/cuda_side.h) only; the program reaches them through its table.
#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "base/error.h"
#include "kernels/cuda_side.h"
#include "kernels/host_memory.h"

namespace bcd {

namespace {

void start_cuda_device(int device) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
}

void* torch_current_cuda_stream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

void cap_cuda_allocator(int device, uint64_t bytes) {
  const size_t total = cuda_device_total_bytes(device);  // the side's own (kernels/host_memory.cu)
  if (total == 0) user_error("cuda:{}: cannot read the device's memory size to cap it at {} bytes", device, bytes);
  if (bytes > total)
    user_error("config: [memory] compute_bytes = {:.2f} GiB exceeds cuda:{}'s {:.2f} GiB", bytes / 1073741824.0, device,
               total / 1073741824.0);
  // The allocator exists per device only after LibTorch's CUDA init (a CUDA tensor, or this):
  // setMemoryFraction on an uninitialised one fails its "did you call init?" assertion.
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  c10::cuda::CUDACachingAllocator::setMemoryFraction(static_cast<double>(bytes) / static_cast<double>(total),
                                                     static_cast<c10::DeviceIndex>(device));
}

void cuda_allocator_peaks(int device, uint64_t* allocated, uint64_t* reserved) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  constexpr size_t kAggregate = 0;  // StatType::AGGREGATE: all pools together
  *allocated = static_cast<uint64_t>(stats.allocated_bytes[kAggregate].peak);
  *reserved = static_cast<uint64_t>(stats.reserved_bytes[kAggregate].peak);
}

std::string cuda_device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return prop.name;
}

}  // namespace

void cuda_side_parts::fill_torch(CudaSide& t) {
  t.start_device = &start_cuda_device;
  t.current_stream = &torch_current_cuda_stream;
  t.cap_allocator = &cap_cuda_allocator;
  t.allocator_peaks = &cuda_allocator_peaks;
  t.device_name = &cuda_device_name;
}

}  // namespace bcd
