// io_uring engine: ops become SQEs (read/write, or their _fixed forms on registered buffers),
// CQEs are reaped in batches; requeueing and the depth cap live in QueuedEngine.
#include "io/uring_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "io/direct_io.h"
#include "base/error.h"

namespace bcd {

namespace {

constexpr unsigned kFileSlots = 16;    // a store has one data file per path
constexpr unsigned kBufferSlots = 64;  // buffers of up to kMaxRegion each
constexpr size_t kMaxRegion = 1ull << 30;  // the kernel's limit for one registered buffer

}  // namespace

int UringEngine::create(const EngineOptions& opts, std::unique_ptr<IoEngine>* out, std::string* why) {
  std::unique_ptr<UringEngine> engine(new UringEngine(opts));
  const int rc = engine->init(opts, why);
  if (rc == 0) *out = std::move(engine);
  return rc;
}

UringEngine::UringEngine(const EngineOptions& opts) : QueuedEngine(opts.queue_depth, opts.extent_bytes) {}

int UringEngine::init(const EngineOptions& opts, std::string* why) {
  // One SQE per op in flight; the kernel rounds up to a power of two and gives twice as many CQEs,
  // so the completion queue can never overflow.
  const int rc = io_uring_queue_init(opts.queue_depth, &ring_, 0);
  if (rc < 0) {
    *why = fmt::format("io_uring_queue_init: {}", errno_text(rc));
    return rc;
  }
  ring_live_ = true;
  // io_uring exists since 5.1, but IORING_OP_READ/WRITE (no iovec) since 5.6.
  io_uring_probe* probe = io_uring_get_probe_ring(&ring_);
  const bool ok = probe && io_uring_opcode_supported(probe, IORING_OP_READ) &&
                  io_uring_opcode_supported(probe, IORING_OP_WRITE) &&
                  io_uring_opcode_supported(probe, IORING_OP_READ_FIXED) &&
                  io_uring_opcode_supported(probe, IORING_OP_WRITE_FIXED);
  if (probe) io_uring_free_probe(probe);
  if (!ok) {
    *why = "the kernel's io_uring lacks IORING_OP_READ/WRITE (Linux < 5.6)";
    return -ENOSYS;
  }
  // Sparse tables (Linux 5.19+) let files and buffers come and go one slot at a time; without
  // them every op simply uses plain fds and buffers.
  fixed_files_ = io_uring_register_files_sparse(&ring_, kFileSlots) == 0;
  if (fixed_files_) slot_fd_.assign(kFileSlots, -1);
  fixed_buffers_ = io_uring_register_buffers_sparse(&ring_, kBufferSlots) == 0;
  if (fixed_buffers_) buffer_slot_used_.assign(kBufferSlots, false);
  return 0;
}

UringEngine::~UringEngine() {
  if (!ring_live_) return;
  drain_ops();  // the kernel may still be writing into callers' buffers
  io_uring_queue_exit(&ring_);
}

// ---- Registration ----

int UringEngine::register_file(int fd) {
  if (!fixed_files_) return -EOPNOTSUPP;
  if (fd < 0) return -EBADF;
  if (static_cast<size_t>(fd) < file_slot_.size() && file_slot_[fd] >= 0) return 0;
  int slot = 0;
  while (slot < static_cast<int>(kFileSlots) && slot_fd_[slot] >= 0) ++slot;
  if (slot == static_cast<int>(kFileSlots)) return -ENOSPC;
  const int rc = io_uring_register_files_update(&ring_, slot, &fd, 1);
  if (rc < 0) return rc;
  if (static_cast<size_t>(fd) >= file_slot_.size()) file_slot_.resize(fd + 1, -1);
  file_slot_[fd] = slot;
  slot_fd_[slot] = fd;
  return 0;
}

int UringEngine::unregister_file(int fd) {
  if (fd < 0 || static_cast<size_t>(fd) >= file_slot_.size() || file_slot_[fd] < 0) return -ENOENT;
  const int slot = file_slot_[fd];
  int none = -1;
  const int rc = io_uring_register_files_update(&ring_, slot, &none, 1);
  file_slot_[fd] = -1;  // plain fd from now on, whatever the kernel said
  slot_fd_[slot] = -1;
  return rc < 0 ? rc : 0;
}

int UringEngine::register_buffer(void* buf, size_t bytes) {
  if (!fixed_buffers_) return -EOPNOTSUPP;
  if (!buf || bytes == 0) return -EINVAL;
  char* p = static_cast<char*>(buf);
  // The kernel takes at most 1 GiB per slot: a larger buffer becomes several regions.
  std::vector<Region> added;
  for (size_t done = 0; done < bytes;) {
    int slot = 0;
    while (slot < static_cast<int>(kBufferSlots) && buffer_slot_used_[slot]) ++slot;
    int rc = -ENOSPC;
    const size_t len = std::min(kMaxRegion, bytes - done);
    if (slot < static_cast<int>(kBufferSlots)) {
      iovec iov{p + done, len};
      rc = io_uring_register_buffers_update_tag(&ring_, slot, &iov, nullptr, 1);
    }
    if (rc < 0) {  // e.g. -ENOMEM over RLIMIT_MEMLOCK: undo the part already registered
      for (const Region& r : added) {
        iovec none{nullptr, 0};
        io_uring_register_buffers_update_tag(&ring_, r.slot, &none, nullptr, 1);
        buffer_slot_used_[r.slot] = false;
      }
      return rc;
    }
    buffer_slot_used_[slot] = true;
    added.push_back(Region{p + done, len, slot});
    done += len;
  }
  regions_.insert(regions_.end(), added.begin(), added.end());
  return 0;
}

int UringEngine::unregister_buffer(void* buf) {
  char* p = static_cast<char*>(buf);
  int found = -ENOENT;
  // The regions of one registration are adjacent: drop the one starting at buf and its followers.
  for (size_t i = 0; i < regions_.size(); ++i) {
    if (regions_[i].base != p) continue;
    found = 0;
    char* next = p;
    while (i < regions_.size() && regions_[i].base == next) {
      iovec none{nullptr, 0};
      io_uring_register_buffers_update_tag(&ring_, regions_[i].slot, &none, nullptr, 1);
      buffer_slot_used_[regions_[i].slot] = false;
      next = regions_[i].base + regions_[i].bytes;
      regions_.erase(regions_.begin() + static_cast<long>(i));
    }
    break;
  }
  return found;
}

// ---- Ops ----

void UringEngine::start_op(Op* op) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  // At most queue_depth ops exist and the SQ has at least as many entries.
  BCD_CHECK(sqe != nullptr, "submission queue full with {} ops in flight", ops_in_flight());
  int fd = op->fd;
  bool fixed_file = false;
  if (static_cast<size_t>(fd) < file_slot_.size() && file_slot_[fd] >= 0) {
    fd = file_slot_[fd];
    fixed_file = true;
  }
  int buf_slot = -1;
  for (const Region& r : regions_)
    if (op->buf >= r.base && op->buf + op->length <= r.base + r.bytes) buf_slot = r.slot;
  const unsigned len = static_cast<unsigned>(op->length);  // extent_bytes <= 1 GiB
  if (op->op == IoOp::kRead) {
    if (buf_slot >= 0)
      io_uring_prep_read_fixed(sqe, fd, op->buf, len, op->offset, buf_slot);
    else
      io_uring_prep_read(sqe, fd, op->buf, len, op->offset);
  } else {
    if (buf_slot >= 0)
      io_uring_prep_write_fixed(sqe, fd, op->buf, len, op->offset, buf_slot);
    else
      io_uring_prep_write(sqe, fd, op->buf, len, op->offset);
  }
  if (fixed_file) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data(sqe, op);
}

void UringEngine::flush() {
  int tries = 0;
  while (io_uring_sq_ready(&ring_) > 0) {
    const int rc = io_uring_submit(&ring_);
    if (rc >= 0 || rc == -EINTR) continue;
    // -EAGAIN/-EBUSY: the kernel is short of memory for requests right now; retry a while.
    BCD_CHECK((rc == -EAGAIN || rc == -EBUSY) && ++tries < 1000, "io_uring_submit: {}", errno_text(rc));
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void UringEngine::reap_ops(bool block) {
  if (block) {
    int tries = 0;
    for (;;) {
      // Submits whatever start_op queued and sleeps until one CQE is there, in one syscall.
      const int rc = io_uring_submit_and_wait(&ring_, 1);
      if (rc >= 0) break;
      if (rc == -EINTR) continue;
      BCD_CHECK((rc == -EAGAIN || rc == -EBUSY) && ++tries < 1000, "io_uring_submit_and_wait: {}", errno_text(rc));
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  // Copy out first: finish_op may start new ops, which must not race the CQ walk.
  unsigned head;
  unsigned n = 0;
  io_uring_cqe* cqe;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    reaped_.emplace_back(static_cast<Op*>(io_uring_cqe_get_data(cqe)), cqe->res);
    ++n;
  }
  io_uring_cq_advance(&ring_, n);
  for (auto& [op, res] : reaped_) finish_op(op, res);
  reaped_.clear();
}

}  // namespace bcd
