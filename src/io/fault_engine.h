// Fault injection for tests and users: a FaultEngine wraps a real engine and, following a shared
// FaultPlan, fails chosen requests with EIO or ENOSPC, cuts them short, or flips a bit in their
// data. A whole run takes a plan from the environment (BCD_NVME_FAULTS, see parse_faults).
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "io/direct_io.h"
#include "io/io_engine.h"

namespace bcd {

enum class FaultKind : uint8_t {
  kEio,      // the request fails with -EIO; nothing is transferred
  kEnospc,   // the request fails with -ENOSPC; nothing is transferred
  kShort,    // only the first half (whole 4 KiB pages, possibly none) is transferred and reported
  kBitFlip,  // a read succeeds, then `bit` of its buffer flips; a write stores the data with
             // that bit flipped (the caller's buffer is left alone): silent corruption either way
};

const char* to_string(FaultKind kind);

// "The 3rd write gets ENOSPC": Fault{IoOp::kWrite, 3, FaultKind::kEnospc}.
// "Flip bit 5 of the 2nd read's buffer": Fault{IoOp::kRead, 2, FaultKind::kBitFlip, 5}.
struct Fault {
  IoOp op = IoOp::kRead;
  uint64_t nth = 1;  // 1-based, counting requests of this op type across every engine of the plan
  FaultKind kind = FaultKind::kEio;
  uint64_t bit = 0;  // kBitFlip: bit index in the request's data (taken modulo its size in bits)
};

// A plan written as text: comma-separated OP:N:KIND[:BIT], OP read or write, N the 1-based request
// of that type, KIND eio, enospc, short or bitflip (BIT: the bit to flip, default 0), e.g.
// "read:3:bitflip:77,write:5:enospc". UserError naming `source` and the bad item.
std::vector<Fault> parse_faults(const std::string& spec, const std::string& source);

// Shared by the engines of one store (its read and write queues), so counts are per store.
class FaultPlan {
 public:
  explicit FaultPlan(std::vector<Fault> faults) : faults_(std::move(faults)) {}

  // Counts one more request of type `op`; the fault planned for it, if any.
  std::optional<Fault> next(IoOp op);
  uint64_t injected() const;            // faults fired so far
  uint64_t seen(IoOp op) const;         // requests of type `op` counted so far
  std::vector<Fault> fired() const;     // the faults fired, in order

 private:
  mutable std::mutex mu_;
  std::vector<Fault> faults_;
  std::vector<Fault> fired_;
  uint64_t seen_[2] = {0, 0};
};

class FaultEngine final : public IoEngine {
 public:
  FaultEngine(std::unique_ptr<IoEngine> inner, std::shared_ptr<FaultPlan> plan);

  int submit(const IoRequest* reqs, size_t n) override;
  size_t poll(IoCompletion* out, size_t max) override;
  size_t wait(IoCompletion* out, size_t max, size_t min_complete) override;
  size_t pending() const override { return inner_->pending() + ready_.size(); }
  int register_file(int fd) override { return inner_->register_file(fd); }
  int unregister_file(int fd) override { return inner_->unregister_file(fd); }
  int register_buffer(void* buf, size_t bytes) override { return inner_->register_buffer(buf, bytes); }
  int unregister_buffer(void* buf) override { return inner_->unregister_buffer(buf); }
  EngineKind kind() const override { return inner_->kind(); }
  unsigned queue_depth() const override { return inner_->queue_depth(); }
  IoStats stats() const override { return inner_->stats(); }

 private:
  struct InFlight {
    uint64_t tag;                 // the caller's
    std::optional<Fault> fault;
    void* buf;                    // the caller's
    uint64_t length;              // as the caller asked
    uint64_t reported;            // kShort: bytes actually requested from the inner engine
    AlignedBuffer bounce;         // kBitFlip on a write: the corrupted copy that goes to disk
  };

  size_t translate(IoCompletion* out, size_t n);  // inner completions -> the caller's, in place
  size_t take_ready(IoCompletion* out, size_t max);

  std::shared_ptr<FaultPlan> plan_;
  std::unordered_map<uint64_t, InFlight> in_flight_;  // by inner tag
  std::deque<IoCompletion> ready_;                    // failed without reaching the inner engine
  uint64_t next_tag_ = 0;
  std::unique_ptr<IoEngine> inner_;  // last: destroyed (drained) before the bounce buffers above
};

}  // namespace bcd
