// The fallback engine: a pool of queue_depth threads (at most 256) doing blocking pread/pwrite,
// for kernels or sandboxes without io_uring (ENOSYS, EPERM under seccomp) or when forced by config.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "io/queued_engine.h"

namespace bcd {

class ThreadEngine final : public QueuedEngine {
 public:
  // One transfer as a syscall does it: bytes moved, or -errno. The default is pread/pwrite; tests
  // pass a flaky one (short transfers, -EAGAIN) to exercise the requeue path.
  using TransferFn = std::function<int64_t(IoOp op, int fd, void* buf, uint64_t length, uint64_t offset)>;

  explicit ThreadEngine(const EngineOptions& opts, TransferFn transfer = {});
  ~ThreadEngine() override;

  EngineKind kind() const override { return EngineKind::kThreads; }

 private:
  void start_op(Op* op) override;
  void flush() override {}
  void reap_ops(bool block) override;
  void run_worker();

  TransferFn transfer_;
  std::mutex mu_;
  std::condition_variable work_cv_;  // workers: work_ not empty or stop_
  std::condition_variable done_cv_;  // the reaping thread: finished_ not empty
  std::deque<Op*> work_;
  std::vector<std::pair<Op*, int64_t>> finished_;
  std::vector<std::pair<Op*, int64_t>> reaped_;  // reaping thread only
  bool stop_ = false;
  std::vector<std::thread> workers_;  // last: started after everything they use exists
};

}  // namespace bcd
