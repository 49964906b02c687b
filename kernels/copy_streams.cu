// Dedicated copy streams with events (kernels/copy_streams.h).
#include "kernels/copy_streams.h"

#include <cuda_runtime_api.h>

#include <map>
#include <vector>

#include "kernels/cuda_check.h"

namespace bcd {

struct CudaCopyStreams::Impl {
  struct Copy {
    cudaEvent_t start = nullptr, end = nullptr;
  };
  cudaStream_t compute = cudaStreamLegacy;  // where the training work runs
  cudaStream_t out = nullptr, in = nullptr;
  cudaEvent_t compute_mark = nullptr;   // re-recorded on the compute stream before each copy
  cudaEvent_t out_tail = nullptr;       // the latest copy_out's end
  cudaEvent_t in_tail = nullptr;        // the latest copy_in's end
  bool any_out = false, any_in = false;
  std::map<uint64_t, Copy> copies;      // by token, until found finished
  std::vector<cudaEvent_t> spare;       // finished copies' events, reused
  uint64_t next = 1;
  double copy_s = 0;

  cudaEvent_t event(bool timing) {
    if (timing && !spare.empty()) {
      cudaEvent_t e = spare.back();
      spare.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    // Timed events are the ones the host waits on: block in the driver rather than spin a core.
    CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventBlockingSync : cudaEventDisableTiming));
    return e;
  }

  // Both copies touch the one compute image, so each follows everything issued before it that
  // touches the image too: the compute stream's work so far and the other stream's last copy.
  // (cudaStreamWaitEvent takes the event's state at the call, so re-recording a mark later is safe.)
  // src == nullptr: zero dst.
  uint64_t copy(cudaStream_t s, cudaEvent_t tail, bool& any, cudaEvent_t other_tail, bool other_any, void* dst,
                const void* src, size_t bytes, cudaMemcpyKind kind) {
    CUDA_CHECK(cudaEventRecord(compute_mark, compute));
    CUDA_CHECK(cudaStreamWaitEvent(s, compute_mark, 0));
    if (other_any) CUDA_CHECK(cudaStreamWaitEvent(s, other_tail, 0));
    Copy c;
    c.start = event(true);
    c.end = event(true);
    CUDA_CHECK(cudaEventRecord(c.start, s));
    if (src) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    else CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, s));
    CUDA_CHECK(cudaEventRecord(c.end, s));
    CUDA_CHECK(cudaEventRecord(tail, s));
    any = true;
    const uint64_t t = next++;
    copies[t] = c;
    return t;
  }

  // A finished copy: its time counted, its events back to the spares.
  void retire(uint64_t t) {
    auto it = copies.find(t);
    if (it == copies.end()) return;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, it->second.start, it->second.end) == cudaSuccess) copy_s += ms / 1e3;
    else (void)cudaGetLastError();  // no timing is no error: the copy itself is done
    spare.push_back(it->second.start);
    spare.push_back(it->second.end);
    copies.erase(it);
  }
};

CudaCopyStreams::CudaCopyStreams(void* compute_stream) : impl_(std::make_unique<Impl>()) {
  if (compute_stream) impl_->compute = static_cast<cudaStream_t>(compute_stream);
  CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->out, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->in, cudaStreamNonBlocking));
  impl_->compute_mark = impl_->event(false);
  impl_->out_tail = impl_->event(false);
  impl_->in_tail = impl_->event(false);
}

CudaCopyStreams::~CudaCopyStreams() {
  Impl& m = *impl_;
  // Nothing may still read or write memory its owners are about to free.
  if (m.out) cudaStreamSynchronize(m.out);
  if (m.in) cudaStreamSynchronize(m.in);
  for (auto& [t, c] : m.copies) cudaEventDestroy(c.start), cudaEventDestroy(c.end);
  for (cudaEvent_t e : m.spare) cudaEventDestroy(e);
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
  auto it = impl_->copies.find(token);
  if (it == impl_->copies.end()) return true;
  const cudaError_t e = cudaEventQuery(it->second.end);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" would otherwise be the next launch check's error
    return false;
  }
  CUDA_CHECK(e);
  impl_->retire(token);
  return true;
}

void CudaCopyStreams::wait(uint64_t token) {
  auto it = impl_->copies.find(token);
  if (it == impl_->copies.end()) return;
  CUDA_CHECK(cudaEventSynchronize(it->second.end));
  impl_->retire(token);
}

void CudaCopyStreams::fence() {
  Impl& m = *impl_;
  if (m.any_out) CUDA_CHECK(cudaStreamWaitEvent(m.compute, m.out_tail, 0));
  if (m.any_in) CUDA_CHECK(cudaStreamWaitEvent(m.compute, m.in_tail, 0));
}

double CudaCopyStreams::copy_seconds() {
  std::vector<uint64_t> finished;
  for (auto& [t, c] : impl_->copies) {
    const cudaError_t e = cudaEventQuery(c.end);
    if (e == cudaSuccess) finished.push_back(t);
    else if (e == cudaErrorNotReady) (void)cudaGetLastError();  // not an error; a real one stays
  }
  for (uint64_t t : finished) impl_->retire(t);
  return impl_->copy_s;
}

}  // namespace bcd
