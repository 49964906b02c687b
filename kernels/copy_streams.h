// Asynchronous host <-> device copies on dedicated CUDA streams, ordered by events against the
// compute stream: the stream LibTorch enqueues the training work on (its current stream, handed
// in by the caller; nullptr means the legacy default stream).
// Includable from plain C++: no CUDA headers. Built on CUDA builds only, into the CUDA side
// (kernels/cuda_side.h): the program calls it through the side's table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace bcd {

class CudaCopyStreams {
 public:
  // Two non-blocking streams (device -> host, host -> device) on the current device, ordered
  // against `compute_stream` (a cudaStream_t; nullptr: the legacy default stream).
  // Throws (CUDA_CHECK) when the runtime refuses.
  explicit CudaCopyStreams(void* compute_stream = nullptr);
  ~CudaCopyStreams();  // synchronises both streams, then destroys streams and events
  CudaCopyStreams(const CudaCopyStreams&) = delete;
  CudaCopyStreams& operator=(const CudaCopyStreams&) = delete;

  // D2H on the out stream after all work enqueued so far on the compute stream and every
  // copy_in issued so far.
  uint64_t copy_out(void* host, const void* device, size_t bytes);
  // H2D on the in stream after all work enqueued so far on the compute stream and every
  // copy_out issued so far.
  uint64_t copy_in(void* device, const void* host, size_t bytes);
  // cudaMemsetAsync(0) on the in stream, ordered like copy_in.
  uint64_t zero(void* device, size_t bytes);
  bool done(uint64_t token);   // cudaEventQuery; throws on an error status
  void wait(uint64_t token);   // cudaEventSynchronize
  void fence();                // compute stream waits for every copy issued so far
  // The compute stream waits for copy `token` (and so for every copy issued before it: each
  // copy follows the other stream's last); nothing when it was found finished already.
  void fence(uint64_t token);
  double copy_seconds();       // summed event-timed durations of copies found finished
  // Seconds the compute stream spent waiting at fences, timed with events recorded around each
  // wait (the stream reaching it, the stream going on), summed over the waits found finished.
  double wait_seconds();
  // The bookkeeping, bounded by the copies in flight however completions are learned (done,
  // wait, or only fences): copies not yet found finished, and timed events created so far.
  size_t live_copies() const;
  uint64_t events_created() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bcd
