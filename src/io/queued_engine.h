// Machinery shared by the real engines: splits requests into ops of at most extent_bytes, keeps
// at most queue_depth ops in flight (the rest wait, FIFO), requeues short transfers and -EAGAIN,
// and folds op results into one completion per request. Subclasses only start and reap ops.
#pragma once

#include <deque>
#include <vector>

#include "io/io_engine.h"

namespace bcd {

class QueuedEngine : public IoEngine {
 public:
  int submit(const IoRequest* reqs, size_t n) override;
  size_t poll(IoCompletion* out, size_t max) override;
  size_t wait(IoCompletion* out, size_t max, size_t min_complete) override;
  size_t pending() const override { return live_requests_; }
  unsigned queue_depth() const override { return static_cast<unsigned>(ops_.size()); }
  IoStats stats() const override { return stats_; }

 protected:
  // One kernel-sized piece of a request. Its address is stable while in flight (subclasses hand
  // it to the kernel or a worker as the op's identity).
  struct Op {
    IoOp op = IoOp::kRead;
    int fd = -1;
    uint64_t offset = 0;
    uint64_t length = 0;
    char* buf = nullptr;
    uint32_t request = 0;  // slot in requests_
    uint32_t retries = 0;  // -EAGAIN / no-progress reissues so far
  };

  QueuedEngine(unsigned queue_depth, uint64_t extent_bytes);

  // Starts one op; its result comes back later through finish_op(), called from reap_ops().
  virtual void start_op(Op* op) = 0;
  // Hands started ops to the kernel (io_uring_submit); no-op where start_op already did.
  virtual void flush() = 0;
  // Calls finish_op() for every finished op; with `block`, first flushes and waits for one.
  virtual void reap_ops(bool block) = 0;

  void finish_op(Op* op, int64_t res);
  // Waits for every op in flight: the kernel may still write into the callers' buffers, so
  // subclass destructors call this before tearing down their ring or threads.
  void drain_ops();
  size_t ops_in_flight() const { return ops_.size() - free_ops_.size(); }

 private:
  struct Request {
    IoRequest req;
    uint64_t issued = 0;   // bytes handed out as ops so far
    uint32_t ops_left = 0; // ops in flight
    int64_t error = 0;     // first failure (-errno), 0 if none
  };

  void issue_waiting();
  void complete_request(uint32_t slot);
  size_t take_done(IoCompletion* out, size_t max);

  uint64_t extent_bytes_;
  std::vector<Op> ops_;           // queue_depth slots: the in-flight cap
  std::vector<Op*> free_ops_;
  std::vector<Request> requests_;
  std::vector<uint32_t> free_requests_;
  std::deque<uint32_t> waiting_;  // requests with bytes not yet issued, oldest first
  std::deque<IoCompletion> done_;
  size_t live_requests_ = 0;
  IoStats stats_;
};

}  // namespace bcd
