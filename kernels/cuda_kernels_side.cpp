// The CUDA side's entry (kernels/cuda_side.h): its table, with the kernels' part of it (the real
// adamw_cuda.h, copy_streams.h and host_memory.h of kernels/*.cu). Built into the side only.
#include <memory>

#include "kernels/adamw_cuda.h"
#include "kernels/copy_streams.h"
#include "kernels/cuda_side.h"
#include "kernels/host_memory.h"

namespace bcd::cuda_side_parts {

namespace {

CudaCopyStreams& streams(void* s) { return *static_cast<CudaCopyStreams*>(s); }
const CudaCopyStreams& streams(const void* s) { return *static_cast<const CudaCopyStreams*>(s); }

}  // namespace

void fill_kernels(CudaSide& t) {
  t.adamw_step = &adamw_step_cuda;
  t.adamw_unsupported_reason = &adamw_cuda_unsupported_reason;
  t.device_usable = &cuda_device_usable;
  t.host_register = &cuda_host_register;
  t.host_unregister = &cuda_host_unregister;
  t.device_memory = &cuda_device_memory;
  t.streams_new = [](void* compute) -> void* { return new CudaCopyStreams(compute); };
  t.streams_delete = [](void* s) { delete static_cast<CudaCopyStreams*>(s); };
  t.streams_copy_out = [](void* s, void* host, const void* dev, size_t n) { return streams(s).copy_out(host, dev, n); };
  t.streams_copy_in = [](void* s, void* dev, const void* host, size_t n) { return streams(s).copy_in(dev, host, n); };
  t.streams_zero = [](void* s, void* dev, size_t n) { return streams(s).zero(dev, n); };
  t.streams_done = [](void* s, uint64_t token) { return streams(s).done(token); };
  t.streams_wait = [](void* s, uint64_t token) { streams(s).wait(token); };
  t.streams_fence = [](void* s) { streams(s).fence(); };
  t.streams_fence_token = [](void* s, uint64_t token) { streams(s).fence(token); };
  t.streams_copy_seconds = [](void* s) { return streams(s).copy_seconds(); };
  t.streams_wait_seconds = [](void* s) { return streams(s).wait_seconds(); };
  t.streams_live_copies = [](const void* s) { return streams(s).live_copies(); };
  t.streams_events_created = [](const void* s) { return streams(s).events_created(); };
}

}  // namespace bcd::cuda_side_parts

extern "C" __attribute__((visibility("default"))) const bcd::CudaSide* bcd_cuda_side_table() {
  static const bcd::CudaSide table = [] {
    bcd::CudaSide t;
    bcd::cuda_side_parts::fill_kernels(t);
    bcd::cuda_side_parts::fill_torch(t);
#ifdef BCD_CUDA_SIDE_NCCL
    bcd::cuda_side_parts::fill_nccl(t);
#endif
    return t;
  }();
  return &table;
}
