// Asynchronous host <-> device copies on dedicated CUDA streams, ordered by events against the
// compute stream (the legacy default stream, which LibTorch uses unless told otherwise).
// Includable from plain C++: no CUDA headers. Built on CUDA builds only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace bcd {

class CudaCopyStreams {
 public:
  // Two non-blocking streams (device -> host, host -> device) on the current device.
  // Throws (CUDA_CHECK) when the runtime refuses.
  CudaCopyStreams();
  ~CudaCopyStreams();  // synchronises both streams, then destroys streams and events
  CudaCopyStreams(const CudaCopyStreams&) = delete;
  CudaCopyStreams& operator=(const CudaCopyStreams&) = delete;

  // D2H on the out stream after all work enqueued so far on the compute stream and every
  // copy_in issued so far.
  uint64_t copy_out(void* host, const void* device, size_t bytes);
  // H2D on the in stream after all work enqueued so far on the compute stream and every
  // copy_out issued so far.
  uint64_t copy_in(void* device, const void* host, size_t bytes);
  bool done(uint64_t token);   // cudaEventQuery; throws on an error status
  void wait(uint64_t token);   // cudaEventSynchronize
  void fence();                // compute stream waits for every copy issued so far
  double copy_seconds();       // summed event-timed durations of copies found finished

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bcd
