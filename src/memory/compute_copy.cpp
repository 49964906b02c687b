// The compute copiers: a worker thread on CPU builds, CUDA copy streams on CUDA builds.
#include "memory/compute_copy.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "base/error.h"
#ifdef BCD_HAVE_CUDA_KERNELS
#include "kernels/copy_streams.h"
#include "kernels/host_memory.h"
#endif

namespace bcd {

namespace {

// ---- CPU: one worker thread, copies in issue order ----
class ThreadCopier final : public ComputeCopier {
 public:
  ThreadCopier() : worker_([this] { run(); }) {}
  ~ThreadCopier() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();  // after the queue drained: nothing writes memory its owner frees next
  }

  Token copy_out(void* pinned, const void* compute, uint64_t bytes) override {
    return enqueue(pinned, compute, bytes);
  }
  Token copy_in(void* compute, const void* pinned, uint64_t bytes) override {
    return enqueue(compute, pinned, bytes);
  }
  Token zero(void* compute, uint64_t bytes) override { return enqueue(compute, nullptr, bytes); }
  bool done(Token t) override {
    std::lock_guard<std::mutex> lk(mu_);
    return finished_ >= t;
  }
  void wait(Token t) override {
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return finished_ >= t; });
  }
  void fence() override { fence(issued_); }
  void fence(Token t) override {
    const auto t0 = std::chrono::steady_clock::now();
    wait(t);
    waited_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double copy_seconds() override {
    std::lock_guard<std::mutex> lk(mu_);
    return copy_s_;
  }
  double wait_seconds() override { return waited_s_; }
  bool on_cuda() const override { return false; }

 private:
  struct Job {
    void* dst;
    const void* src;  // nullptr: zero dst
    uint64_t bytes;
  };

  Token enqueue(void* dst, const void* src, uint64_t bytes) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back({dst, src, bytes});
      ++issued_;
    }
    cv_.notify_one();
    return issued_;
  }

  void run() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      const Job j = queue_.front();
      lk.unlock();
      const auto t0 = std::chrono::steady_clock::now();
      if (j.src) std::memcpy(j.dst, j.src, j.bytes);
      else std::memset(j.dst, 0, j.bytes);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      lk.lock();
      queue_.pop_front();
      ++finished_;
      copy_s_ += s;
      done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Job> queue_;
  Token issued_ = 0;    // written by the owner's thread only
  Token finished_ = 0;  // guarded by mu_
  double copy_s_ = 0;
  double waited_s_ = 0;  // the owner's thread only: its waits at fences
  bool stop_ = false;
  std::thread worker_;  // last: starts after every member above exists
};

#ifdef BCD_HAVE_CUDA_KERNELS
// ---- CUDA: dedicated streams, events ----
class CudaCopier final : public ComputeCopier {
 public:
  explicit CudaCopier(void* compute_stream) : s_(compute_stream) {}
  Token copy_out(void* pinned, const void* compute, uint64_t bytes) override {
    return s_.copy_out(pinned, compute, bytes);
  }
  Token copy_in(void* compute, const void* pinned, uint64_t bytes) override {
    return s_.copy_in(compute, pinned, bytes);
  }
  Token zero(void* compute, uint64_t bytes) override { return s_.zero(compute, bytes); }
  bool done(Token t) override { return s_.done(t); }
  void wait(Token t) override { s_.wait(t); }
  void fence() override { s_.fence(); }
  void fence(Token t) override { s_.fence(t); }
  double copy_seconds() override { return s_.copy_seconds(); }
  double wait_seconds() override { return s_.wait_seconds(); }
  bool on_cuda() const override { return true; }

 private:
  CudaCopyStreams s_;
};
#endif

}  // namespace

std::unique_ptr<ComputeCopier> make_thread_copier() { return std::make_unique<ThreadCopier>(); }

std::unique_ptr<ComputeCopier> make_cuda_copier(void* compute_stream) {
#ifdef BCD_HAVE_CUDA_KERNELS
  if (!cuda_device_usable()) user_error("memory: compute state is on CUDA but no CUDA device is usable");
  return std::make_unique<CudaCopier>(compute_stream);
#else
  user_error("memory: compute state is on CUDA but this build has no CUDA kernels (configure with -DBCD_CUDA=ON)");
#endif
}

}  // namespace bcd
