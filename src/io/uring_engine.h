// The io_uring engine: one ring per engine, queue_depth SQEs in flight at most, registered
// (fixed) files and buffers where the kernel allows them. Built on liburing.
#pragma once

#include <liburing.h>

#include <memory>
#include <string>
#include <vector>

#include "io/queued_engine.h"

namespace bcd {

class UringEngine final : public QueuedEngine {
 public:
  // 0 and the engine in *out, or -errno and what failed in *why: -ENOSYS (no io_uring in this
  // kernel, or an opcode we need is missing: Linux < 5.6), -EPERM (seccomp, or
  // kernel.io_uring_disabled), -ENOMEM (locked-memory limit).
  static int create(const EngineOptions& opts, std::unique_ptr<IoEngine>* out, std::string* why);
  ~UringEngine() override;

  int register_file(int fd) override;
  int unregister_file(int fd) override;
  int register_buffer(void* buf, size_t bytes) override;
  int unregister_buffer(void* buf) override;
  EngineKind kind() const override { return EngineKind::kUring; }

 private:
  struct Region {  // one registered buffer (a slot of the kernel's buffer table)
    char* base;
    size_t bytes;
    int slot;
  };

  explicit UringEngine(const EngineOptions& opts);
  int init(const EngineOptions& opts, std::string* why);  // create()'s work: 0 or -errno
  void start_op(Op* op) override;
  void flush() override;
  void reap_ops(bool block) override;

  io_uring ring_{};             // owned once ring_live_: io_uring_queue_exit in the destructor
  bool ring_live_ = false;
  bool fixed_files_ = false;    // the sparse file table is registered
  bool fixed_buffers_ = false;  // the sparse buffer table is registered
  std::vector<int> file_slot_;  // by fd: slot in the file table, or -1
  std::vector<int> slot_fd_;    // by slot: fd, or -1 when free
  std::vector<Region> regions_;
  std::vector<bool> buffer_slot_used_;
  std::vector<std::pair<Op*, int>> reaped_;
};

}  // namespace bcd
