// Engine names, request validation and the choice of engine (io_uring, else the thread pool).
#include "io/io_engine.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>

#include "io/direct_io.h"
#include "io/thread_engine.h"
#include "io/uring_engine.h"
#include "base/error.h"

namespace bcd {

const char* to_string(IoOp op) { return op == IoOp::kRead ? "read" : "write"; }

const char* to_string(EngineKind kind) {
  switch (kind) {
    case EngineKind::kAuto: return "auto";
    case EngineKind::kUring: return "uring";
    case EngineKind::kThreads: return "threads";
  }
  return "?";
}

IoOp parse_io_op(const std::string& text) {
  if (text == "read") return IoOp::kRead;
  if (text == "write") return IoOp::kWrite;
  user_error("I/O mode '{}': expected read or write", text);
}

EngineKind parse_engine_kind(const std::string& text) {
  if (text == "auto") return EngineKind::kAuto;
  if (text == "uring" || text == "io_uring") return EngineKind::kUring;
  if (text == "threads") return EngineKind::kThreads;
  user_error("I/O engine '{}': expected auto, uring or threads", text);
}

int validate_request(const IoRequest& req) {
  if (req.fd < 0 || req.length == 0 || !req.buf) return -EINVAL;
  if (!is_aligned(req.offset) || !is_aligned(req.length) || !is_aligned(req.buf)) return -EINVAL;
  return 0;
}

bool uring_available(std::string* why) {
  std::unique_ptr<IoEngine> engine;
  std::string reason;
  const int rc = UringEngine::create(EngineOptions{}, &engine, &reason);
  if (rc != 0 && why) *why = reason;
  return rc == 0;
}

std::unique_ptr<IoEngine> make_io_engine(const EngineOptions& opts) {
  if (opts.queue_depth < 1 || opts.queue_depth > 4096)
    user_error("I/O queue depth {}: expected 1 to 4096", opts.queue_depth);
  if (opts.extent_bytes < kIoAlign || !is_aligned(opts.extent_bytes) || opts.extent_bytes > (1ull << 30))
    user_error("I/O extent size {}: expected a multiple of 4096 bytes up to 1 GiB", opts.extent_bytes);
  if (opts.kind == EngineKind::kThreads) return std::make_unique<ThreadEngine>(opts);

  std::unique_ptr<IoEngine> engine;
  std::string why;
  if (UringEngine::create(opts, &engine, &why) == 0) return engine;
  if (opts.kind == EngineKind::kUring) user_error("I/O engine uring: io_uring unavailable ({})", why);
  // Every engine of the process would fail the same way: say it once, not once per queue.
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    fmt::print(stderr, "bcdtrain: io_uring unavailable ({}); using the thread-pool pread/pwrite engine\n", why);
  return std::make_unique<ThreadEngine>(opts);
}

}  // namespace bcd
