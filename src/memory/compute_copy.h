// Copies between the pinned slab pool and the compute tier, off the training thread (DESIGN.md
// §3): on CUDA builds on two dedicated streams ordered by events, on CPU builds on a worker
// thread. The stager enqueues a switch's copies and returns; whoever next touches the compute
// memory calls fence() first.
#pragma once

#include <cstdint>
#include <memory>

namespace bcd {

class ComputeCopier {
 public:
  using Token = uint64_t;  // one enqueued copy; 0 = none
  virtual ~ComputeCopier() = default;

  // Copies are ordered after every copy issued before them (they share the one compute image)
  // and after the compute side's work so far.
  // compute -> pinned: after the last update of the image, and the last copy_in.
  virtual Token copy_out(void* pinned, const void* compute, uint64_t bytes) = 0;
  // pinned -> compute: after the compute side's last use of the image, and the last copy_out.
  virtual Token copy_in(void* compute, const void* pinned, uint64_t bytes) = 0;
  // Zeroes compute memory, ordered like a copy_in (after the compute side's work so far and the
  // last copy_out): a unit starting with fresh moments does not make its step wait for the
  // previous unit's image to leave.
  virtual Token zero(void* compute, uint64_t bytes) = 0;
  // Host side: has the copy finished (its pinned buffer may be reused / handed to the I/O queue)?
  virtual bool done(Token t) = 0;
  virtual void wait(Token t) = 0;
  // Compute-side work issued after this call sees every copy issued before it and never races
  // one. CPU: the training thread is the compute side, so this waits. CUDA: the compute stream
  // waits on the copies' events; the host returns at once.
  virtual void fence() = 0;
  // As fence(), for copy `t` and the copies issued before it only (copies are ordered): a later
  // copy (a prefetch further ahead) is not waited for.
  virtual void fence(Token t) = 0;
  // Seconds the finished copies took (the copy engines' time, not the training thread's).
  virtual double copy_seconds() = 0;
  // Seconds the compute side spent waiting for copies at fences. CPU: the training thread's
  // waits. CUDA: the compute stream's, timed by events recorded on it around each wait (the
  // stream reaching the wait, the stream going on) and summed as they are found finished, never
  // by a host sync; the host itself does not wait there.
  virtual double wait_seconds() = 0;
  virtual bool on_cuda() const = 0;
};

// CPU builds and host compute memory: memcpy on one worker thread, in issue order.
std::unique_ptr<ComputeCopier> make_thread_copier();
// Compute memory on the current CUDA device; `compute_stream` is the cudaStream_t the compute
// side enqueues on (LibTorch's current stream; nullptr: the legacy default stream). UserError
// when the build has no CUDA kernels or no device is usable.
std::unique_ptr<ComputeCopier> make_cuda_copier(void* compute_stream);

}  // namespace bcd
