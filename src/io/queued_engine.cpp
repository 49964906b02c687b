// Request splitting, the queue-depth cap and requeueing of short transfers and -EAGAIN, shared by
// UringEngine and ThreadEngine.
#include "io/queued_engine.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "io/direct_io.h"
#include "base/error.h"

namespace bcd {

namespace {

// -EAGAIN / -EINTR / zero-byte writes are reissued this often before the op fails with the error:
// a regular file that keeps saying "try again" has a problem retrying won't fix.
constexpr uint32_t kMaxRetries = 64;
// After this many reissues of one op, back off briefly instead of spinning on the kernel.
constexpr uint32_t kRetriesBeforeBackoff = 8;

}  // namespace

QueuedEngine::QueuedEngine(unsigned queue_depth, uint64_t extent_bytes)
    : extent_bytes_(extent_bytes), ops_(queue_depth) {
  BCD_CHECK(queue_depth >= 1, "queue depth {}", queue_depth);
  BCD_CHECK(extent_bytes >= kIoAlign && is_aligned(extent_bytes), "extent bytes {}", extent_bytes);
  free_ops_.reserve(ops_.size());
  for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) free_ops_.push_back(&*it);
}

int QueuedEngine::submit(const IoRequest* reqs, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (int rc = validate_request(reqs[i])) return rc;
  for (size_t i = 0; i < n; ++i) {
    uint32_t slot;
    if (!free_requests_.empty()) {
      slot = free_requests_.back();
      free_requests_.pop_back();
    } else {
      slot = static_cast<uint32_t>(requests_.size());
      requests_.emplace_back();
    }
    requests_[slot] = Request{reqs[i]};
    waiting_.push_back(slot);
    ++live_requests_;
  }
  issue_waiting();
  flush();
  return 0;
}

size_t QueuedEngine::poll(IoCompletion* out, size_t max) {
  reap_ops(false);
  issue_waiting();
  flush();
  return take_done(out, max);
}

size_t QueuedEngine::wait(IoCompletion* out, size_t max, size_t min_complete) {
  const size_t want = std::min({min_complete, max, live_requests_});
  for (;;) {
    issue_waiting();
    if (done_.size() >= want) break;
    BCD_CHECK(ops_in_flight() > 0, "waiting for {} completions, {} ready, nothing in flight", want, done_.size());
    reap_ops(true);
  }
  flush();
  return take_done(out, max);
}

void QueuedEngine::drain_ops() {
  while (ops_in_flight() > 0) reap_ops(true);
}

// Only the oldest waiting request can be partly issued, so ops of one request go out in order
// and each file sees sequential offsets when requests are sequential.
void QueuedEngine::issue_waiting() {
  while (!waiting_.empty() && !free_ops_.empty()) {
    const uint32_t slot = waiting_.front();
    Request& r = requests_[slot];
    Op* op = free_ops_.back();
    free_ops_.pop_back();
    const uint64_t len = std::min(extent_bytes_, r.req.length - r.issued);
    *op = Op{r.req.op, r.req.fd, r.req.offset + r.issued, len, static_cast<char*>(r.req.buf) + r.issued, slot, 0};
    r.issued += len;
    ++r.ops_left;
    if (r.issued == r.req.length) waiting_.pop_front();
    ++stats_.ops;
    start_op(op);
  }
}

void QueuedEngine::finish_op(Op* op, int64_t res) {
  const bool again = res == -EAGAIN || res == -EINTR || (res == 0 && op->op == IoOp::kWrite);
  if (again && op->retries < kMaxRetries) {
    if (++op->retries > kRetriesBeforeBackoff) std::this_thread::sleep_for(std::chrono::microseconds(100));
    ++stats_.requeued_again;
    ++stats_.ops;
    start_op(op);
    return;
  }
  if (res > 0 && static_cast<uint64_t>(res) < op->length) {
    // Short transfer (a signal, a page-cache boundary, the end of a device): issue the rest.
    stats_.bytes += static_cast<uint64_t>(res);
    op->offset += static_cast<uint64_t>(res);
    op->buf += res;
    op->length -= static_cast<uint64_t>(res);
    op->retries = 0;
    ++stats_.requeued_short;
    ++stats_.ops;
    start_op(op);
    return;
  }
  BCD_CHECK(res <= static_cast<int64_t>(op->length), "op of {} bytes returned {}", op->length, res);
  if (res == 0) res = op->op == IoOp::kRead ? -ENODATA : -EIO;  // read at end of file / write stuck

  const uint32_t slot = op->request;
  Request& r = requests_[slot];
  if (res < 0) {
    if (r.error == 0) r.error = res;
    if (r.issued < r.req.length) {  // stop issuing the rest; it is the oldest waiting request
      BCD_CHECK(!waiting_.empty() && waiting_.front() == slot);
      waiting_.pop_front();
      r.issued = r.req.length;
    }
  } else {
    stats_.bytes += static_cast<uint64_t>(res);
  }
  free_ops_.push_back(op);
  if (--r.ops_left == 0 && r.issued == r.req.length) complete_request(slot);
}

void QueuedEngine::complete_request(uint32_t slot) {
  const Request& r = requests_[slot];
  done_.push_back(IoCompletion{r.req.tag, r.error != 0 ? r.error : static_cast<int64_t>(r.req.length)});
  free_requests_.push_back(slot);
}

size_t QueuedEngine::take_done(IoCompletion* out, size_t max) {
  const size_t n = std::min(max, done_.size());
  for (size_t i = 0; i < n; ++i) {
    out[i] = done_.front();
    done_.pop_front();
  }
  live_requests_ -= n;
  return n;
}

}  // namespace bcd
