// The I/O engine seam: submit reads and writes of aligned extents, poll or wait for completions,
// each with a status. Implementations: UringEngine (io_uring), ThreadEngine (pread/pwrite pool),
// FaultEngine (wraps another to inject faults in tests). make_io_engine() picks one.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace bcd {

enum class IoOp : uint8_t { kRead, kWrite };
enum class EngineKind : uint8_t { kAuto, kUring, kThreads };

const char* to_string(IoOp op);          // "read", "write"
const char* to_string(EngineKind kind);  // "auto", "uring", "threads"
IoOp parse_io_op(const std::string& text);             // UserError unless read|write
EngineKind parse_engine_kind(const std::string& text);  // UserError unless auto|uring|threads

// One transfer of `length` bytes between `buf` and file `fd` at `offset`. offset, length and buf
// must be multiples of kIoAlign (4096), as O_DIRECT needs; buffered files accept the same.
struct IoRequest {
  IoOp op = IoOp::kRead;
  int fd = -1;
  uint64_t offset = 0;
  uint64_t length = 0;
  void* buf = nullptr;
  uint64_t tag = 0;  // the caller's, handed back in the completion
};

struct IoCompletion {
  uint64_t tag = 0;
  // `length` on success, else -errno (-ENODATA: the file ended before `length` bytes were read).
  // Short transfers and -EAGAIN are requeued inside the engine, never reported; only a
  // FaultEngine reports 0 <= result < length, simulating a device that gives up early. Callers
  // treat any result != length as a failure.
  int64_t result = 0;
};

struct EngineOptions {
  EngineKind kind = EngineKind::kAuto;  // kAuto: io_uring if it can be set up, else threads
  unsigned queue_depth = 8;             // ops in flight at most (threads: pool size); 1..4096
  uint64_t extent_bytes = 1 << 20;      // requests are split into ops of at most this many bytes
};

struct IoStats {
  uint64_t ops = 0;              // ops issued (requeues included)
  uint64_t bytes = 0;            // bytes transferred by successful ops
  uint64_t requeued_short = 0;   // ops reissued for the rest of a short transfer
  uint64_t requeued_again = 0;   // ops reissued after -EAGAIN / -EINTR
};

// Not thread-safe: one thread at a time drives an engine (the extent store gives each engine to
// one lane thread). Requests beyond the queue depth wait inside the engine, in FIFO order.
class IoEngine {
 public:
  virtual ~IoEngine() = default;

  // Queues `n` requests and starts as many ops as the queue depth allows. 0, or -EINVAL when any
  // request is malformed (misaligned, empty, bad fd): none is queued then.
  virtual int submit(const IoRequest* reqs, size_t n) = 0;
  int submit(const IoRequest& req) { return submit(&req, 1); }

  // Moves up to `max` finished requests' completions into `out` without blocking; returns how many.
  virtual size_t poll(IoCompletion* out, size_t max) = 0;

  // Blocks until min(min_complete, max, pending()) completions are ready, then as poll().
  virtual size_t wait(IoCompletion* out, size_t max, size_t min_complete = 1) = 0;

  // Requests submitted whose completion has not been handed out yet.
  virtual size_t pending() const = 0;

  // Optional speed-ups (io_uring registered files and buffers): 0, or -errno when the kernel or
  // engine can't (-EOPNOTSUPP here); I/O works either way. Unregister a file before closing it,
  // and a buffer before freeing it.
  virtual int register_file(int /*fd*/) { return -EOPNOTSUPP; }
  virtual int unregister_file(int /*fd*/) { return -EOPNOTSUPP; }
  virtual int register_buffer(void* /*buf*/, size_t /*bytes*/) { return -EOPNOTSUPP; }
  virtual int unregister_buffer(void* /*buf*/) { return -EOPNOTSUPP; }

  virtual EngineKind kind() const = 0;
  virtual unsigned queue_depth() const = 0;
  virtual IoStats stats() const = 0;
};

// Checks the alignment rules of IoRequest: 0 or -EINVAL.
int validate_request(const IoRequest& req);

// kUring: io_uring or UserError saying why not. kThreads: the thread pool. kAuto: io_uring when it
// can be set up, else the thread pool, with one line on stderr (once per process) saying why.
// UserError on a queue depth or extent size out of range, naming the option.
std::unique_ptr<IoEngine> make_io_engine(const EngineOptions& opts);

// Whether an io_uring instance can be set up here; if not and `why` is given, what failed
// (e.g. "io_uring_queue_init: Operation not permitted" under a seccomp filter).
bool uring_available(std::string* why = nullptr);

}  // namespace bcd
