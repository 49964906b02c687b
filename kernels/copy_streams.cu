// Dedicated copy streams with events (kernels/copy_streams.h).
#include "kernels/copy_streams.h"

#include <cuda_runtime_api.h>

#include "kernels/copy_ledger.h"
#include "kernels/cuda_check.h"

namespace bcd {

namespace {

// CUDA events for the ledger: timed, and blocking-sync (the host waits on them: block in the
// driver rather than spin a core).
struct CudaEvents {
  using Event = cudaEvent_t;
  Event create() {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventBlockingSync));
    return e;
  }
  bool finished(Event e) {
    const cudaError_t s = cudaEventQuery(e);
    if (s == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not ready" would otherwise be the next launch check's error
      return false;
    }
    CUDA_CHECK(s);
    return true;
  }
  double seconds(Event a, Event b) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, a, b) == cudaSuccess) return ms / 1e3;
    (void)cudaGetLastError();  // no timing is no error: the copy itself is done
    return 0;
  }
  void destroy(Event e) {
    if (e) cudaEventDestroy(e);
  }
};

cudaEvent_t untimed_event() {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

}  // namespace

struct CudaCopyStreams::Impl {
  cudaStream_t compute = cudaStreamLegacy;  // where the training work runs
  cudaStream_t out = nullptr, in = nullptr;
  cudaEvent_t compute_mark = nullptr;   // re-recorded on the compute stream before each copy
  cudaEvent_t out_tail = nullptr;       // the latest copy_out's end
  cudaEvent_t in_tail = nullptr;        // the latest copy_in's end
  bool any_out = false, any_in = false;
  CopyLedger<CudaEvents> copies;        // copies issued and not yet found finished

  // Both copies touch the one compute image, so each follows everything issued before it that
  // touches the image too: the compute stream's work so far and the other stream's last copy.
  // (cudaStreamWaitEvent takes the event's state at the call, so re-recording a mark later is safe.)
  // src == nullptr: zero dst.
  uint64_t copy(cudaStream_t s, cudaEvent_t tail, bool& any, cudaEvent_t other_tail, bool other_any, void* dst,
                const void* src, size_t bytes, cudaMemcpyKind kind) {
    CUDA_CHECK(cudaEventRecord(compute_mark, compute));
    CUDA_CHECK(cudaStreamWaitEvent(s, compute_mark, 0));
    if (other_any) CUDA_CHECK(cudaStreamWaitEvent(s, other_tail, 0));
    const auto [t, c] = copies.open();  // retires the copies found finished first
    CUDA_CHECK(cudaEventRecord(c.start, s));
    if (src) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    else CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, s));
    CUDA_CHECK(cudaEventRecord(c.end, s));
    CUDA_CHECK(cudaEventRecord(tail, s));
    any = true;
    return t;
  }
};

CudaCopyStreams::CudaCopyStreams(void* compute_stream) : impl_(std::make_unique<Impl>()) {
  if (compute_stream) impl_->compute = static_cast<cudaStream_t>(compute_stream);
  CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->out, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->in, cudaStreamNonBlocking));
  impl_->compute_mark = untimed_event();
  impl_->out_tail = untimed_event();
  impl_->in_tail = untimed_event();
}

CudaCopyStreams::~CudaCopyStreams() {
  Impl& m = *impl_;
  // Nothing may still read or write memory its owners are about to free.
  if (m.out) cudaStreamSynchronize(m.out);
  if (m.in) cudaStreamSynchronize(m.in);
  // The ledger's events go with impl_, after the streams were synchronised here.
  for (cudaEvent_t e : {m.compute_mark, m.out_tail, m.in_tail})
    if (e) cudaEventDestroy(e);
  if (m.out) cudaStreamDestroy(m.out);
  if (m.in) cudaStreamDestroy(m.in);
}

uint64_t CudaCopyStreams::copy_out(void* host, const void* device, size_t bytes) {
  Impl& m = *impl_;
  return m.copy(m.out, m.out_tail, m.any_out, m.in_tail, m.any_in, host, device, bytes, cudaMemcpyDeviceToHost);
}

uint64_t CudaCopyStreams::copy_in(void* device, const void* host, size_t bytes) {
  Impl& m = *impl_;
  return m.copy(m.in, m.in_tail, m.any_in, m.out_tail, m.any_out, device, host, bytes, cudaMemcpyHostToDevice);
}

uint64_t CudaCopyStreams::zero(void* device, size_t bytes) {
  Impl& m = *impl_;
  return m.copy(m.in, m.in_tail, m.any_in, m.out_tail, m.any_out, device, nullptr, bytes, cudaMemcpyHostToDevice);
}

bool CudaCopyStreams::done(uint64_t token) {
  const auto* c = impl_->copies.find(token);
  if (!c) return true;
  if (!impl_->copies.events().finished(c->end)) return false;
  impl_->copies.retire(token);
  return true;
}

void CudaCopyStreams::wait(uint64_t token) {
  const auto* c = impl_->copies.find(token);
  if (!c) return;
  CUDA_CHECK(cudaEventSynchronize(c->end));
  impl_->copies.retire(token);
}

void CudaCopyStreams::fence() {
  Impl& m = *impl_;
  if (!m.any_out && !m.any_in) return;
  const auto w = m.copies.open_wait();
  CUDA_CHECK(cudaEventRecord(w.start, m.compute));
  if (m.any_out) CUDA_CHECK(cudaStreamWaitEvent(m.compute, m.out_tail, 0));
  if (m.any_in) CUDA_CHECK(cudaStreamWaitEvent(m.compute, m.in_tail, 0));
  CUDA_CHECK(cudaEventRecord(w.end, m.compute));
}

void CudaCopyStreams::fence(uint64_t token) {
  Impl& m = *impl_;
  const auto* c = m.copies.find(token);
  if (!c) return;  // retired: found finished
  const cudaEvent_t end = c->end;  // (open_wait may sweep; the copy's events stay until it is retired)
  const auto w = m.copies.open_wait();
  CUDA_CHECK(cudaEventRecord(w.start, m.compute));
  CUDA_CHECK(cudaStreamWaitEvent(m.compute, end, 0));
  CUDA_CHECK(cudaEventRecord(w.end, m.compute));
}

double CudaCopyStreams::wait_seconds() { return impl_->copies.waited_seconds(); }

double CudaCopyStreams::copy_seconds() {
  impl_->copies.sweep();
  return impl_->copies.seconds();
}

size_t CudaCopyStreams::live_copies() const { return impl_->copies.live_copies(); }
uint64_t CudaCopyStreams::events_created() const { return impl_->copies.events_created(); }

}  // namespace bcd
