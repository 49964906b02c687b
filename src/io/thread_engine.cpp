// Thread-pool engine: workers take ops from a queue, run one pread/pwrite each, and post results.
#include "io/thread_engine.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace bcd {

namespace {

constexpr unsigned kMaxWorkers = 256;

int64_t posix_transfer(IoOp op, int fd, void* buf, uint64_t length, uint64_t offset) {
  const ssize_t n = op == IoOp::kRead ? ::pread(fd, buf, length, static_cast<off_t>(offset))
                                      : ::pwrite(fd, buf, length, static_cast<off_t>(offset));
  return n < 0 ? -errno : n;
}

}  // namespace

ThreadEngine::ThreadEngine(const EngineOptions& opts, TransferFn transfer)
    : QueuedEngine(opts.queue_depth, opts.extent_bytes),
      transfer_(transfer ? std::move(transfer) : TransferFn(posix_transfer)) {
  // One thread per op in flight, up to a point: past a few hundred blocking syscalls a drive is
  // saturated and more threads only cost memory; the ops beyond wait in work_.
  const unsigned n = std::min(opts.queue_depth, kMaxWorkers);
  workers_.reserve(n);
  for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this] { run_worker(); });
}

ThreadEngine::~ThreadEngine() {
  drain_ops();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadEngine::start_op(Op* op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_.push_back(op);
  }
  work_cv_.notify_one();
}

void ThreadEngine::reap_ops(bool block) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (block) done_cv_.wait(lock, [this] { return !finished_.empty(); });
    reaped_.swap(finished_);  // the two vectors trade capacity: no allocation per reap
  }
  for (auto& [op, res] : reaped_) finish_op(op, res);
  reaped_.clear();
}

void ThreadEngine::run_worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stop_ || !work_.empty(); });
    if (work_.empty()) return;  // stop_ and nothing left
    Op* op = work_.front();
    work_.pop_front();
    lock.unlock();
    const int64_t res = transfer_(op->op, op->fd, op->buf, op->length, op->offset);
    lock.lock();
    finished_.emplace_back(op, res);
    done_cv_.notify_one();
  }
}

}  // namespace bcd
