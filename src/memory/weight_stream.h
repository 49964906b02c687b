// Streamed working weights (DESIGN.md §2): frozen blocks whose working weights live in host
// memory and reach the compute tier through a window of `depth` buffers as they are used, the
// next ones copied while the current one computes (double buffering and deeper).
//
//   HostWeights   the host copy of every streamed block: private, or one shared-memory segment
//                 that all ranks of a machine map (one copy per machine, not per rank)
//   WeightStream  the window: acquire(b) returns a compute buffer holding block b's weights,
//                 waiting only when its copy is late (the stall, measured); the order of uses
//                 announced by expect() drives the prefetches, cyclically (the next pass starts
//                 like this one)
//
// Knows bytes and blocks by index, not layers. Not thread-safe: the training thread drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/files.h"
#include "io/extent_store.h"
#include "memory/compute_copy.h"

namespace bcd {

// The host copy of the streamed weights: `bytes` in host memory, page-locked for a CUDA
// device's copies when `cuda` (cudaHostRegister; UserError saying why when that fails: copies
// from pageable memory would be synchronous, the stream's overlap lost).
class HostWeights {
 public:
  HostWeights() = default;
  // A private copy (anonymous memory); `what` names it in a refusal to page-lock it.
  static HostWeights make_private(uint64_t bytes, bool cuda, const std::string& what = "the host copy");
  // One copy per machine: the first rank of the machine creates the segment `name` (a POSIX
  // shared-memory name, "/bcdtrain-..."; a stale one of a dead run is replaced), the others
  // attach to it once it exists (the caller orders them, e.g. with a barrier). UserError naming
  // the segment when it cannot be made or mapped (/dev/shm too small: the message says so).
  static HostWeights create_shared(const std::string& name, uint64_t bytes, bool cuda);
  static HostWeights attach_shared(const std::string& name, uint64_t bytes, bool cuda);
  ~HostWeights();
  HostWeights(HostWeights&& o) noexcept;
  HostWeights& operator=(HostWeights&& o) noexcept;
  HostWeights(const HostWeights&) = delete;
  HostWeights& operator=(const HostWeights&) = delete;

  char* data() const { return data_; }  // the memory is not the handle's: writable through a const one
  uint64_t bytes() const { return bytes_; }
  bool shared() const { return !name_.empty(); }
  // Removes the segment's name (every rank has attached): the memory stays mapped, and nothing
  // is left in /dev/shm however the run ends.
  void unlink_name();

 private:
  static HostWeights sized(uint64_t bytes, std::string name);  // nothing mapped yet
  void map_fd(UniqueFd fd, bool cuda);  // maps the shared-memory object `fd` (closed here)
  void reset();
  char* data_ = nullptr;
  uint64_t bytes_ = 0, mapped_ = 0;
  std::string name_;
  bool registered_ = false;
};

// Where a streamed block's weights come from: host memory, or an object of an extent store on
// the NVMe tier, read into a pinned staging buffer and copied from there.
struct StreamSource {
  const void* host = nullptr;
  ExtentStore* store = nullptr;
  ObjectId object = 0;
  bool on_nvme() const { return store != nullptr; }
};

struct WeightStreamStats {
  uint64_t bytes = 0;      // host -> compute copies issued
  uint64_t nvme_bytes = 0; // of which read from the NVMe tier first
  uint64_t copies = 0;
  uint64_t misses = 0;     // uses whose block was not on its way (a copy issued at the use)
  double stall_s = 0;      // the training thread waiting for copies (CPU: measured; CUDA: the
                           // compute stream waits on an event, off the host: not counted)
  double max_stall_s = 0;  // the longest single wait, and its block
  int max_stall_block = -1;
  double last_stall_s = 0; // the latest acquire's wait
  double copy_wait_s = 0;  // the compute side waiting for its layers' copies: CUDA: the compute
                           // stream's waits, event-timed; CPU: stall_s's waits for the copies
  uint64_t acquires = 0;   // uses that waited for a copy (not nested ones)
};

class WeightStream {
 public:
  // `homes[b]`: where block b's weights are, `bytes[b]` of them (0: b is not streamed); `slots`:
  // `slot_bytes`-sized compute buffers, at least 2. The copier moves host -> compute. With NVMe
  // homes, `staging` holds one pinned 4 KiB-aligned buffer of `slot_bytes` per slot.
  WeightStream(std::vector<StreamSource> homes, std::vector<uint64_t> bytes, std::vector<void*> slots,
               uint64_t slot_bytes, std::unique_ptr<ComputeCopier> copier, std::vector<void*> staging = {});
  ~WeightStream();  // waits for the copies in flight
  WeightStream(const WeightStream&) = delete;
  WeightStream& operator=(const WeightStream&) = delete;

  bool streamed(int block) const { return block >= 0 && block < static_cast<int>(bytes_.size()) && bytes_[block] > 0; }
  int depth() const { return static_cast<int>(slots_.size()); }

  // The blocks the coming uses will be, in order (blocks not streamed are skipped); prefetches
  // follow it, wrapping around to its start after its end.
  void expect(const std::vector<int>& order);
  // A compute buffer holding `block`'s weights, until release(block); acquires of a block
  // already held nest. Compute-side work issued after this sees the copy done. UserError (naming
  // the object and file) when its NVMe read failed or its checksum did not match: nothing of it
  // reaches the compute buffer then.
  void* acquire(int block);
  void release(int block);
  // `block`'s home changed (its weights were updated elsewhere): a copy of it in a slot is stale.
  void invalidate(int block);
  bool held(int block) const;

  const WeightStreamStats& stats() const {
    stats_.copy_wait_s = copier_->wait_seconds();
    return stats_;
  }
  int last_failed() const { return last_failed_; }  // the block of the latest read that failed, -1: none

 private:
  struct Slot {
    void* ptr = nullptr;
    void* staging = nullptr;        // NVMe homes: the pinned buffer a read lands in
    int block = -1;                 // whose weights it holds or receives
    ComputeCopier::Token token = 0;
    Ticket read = 0;                // NVMe read in flight into `staging` (0: none)
    int users = 0;                  // acquires not yet released
  };
  // An NVMe read into the slot's staging buffer is over: its copy to the compute buffer starts
  // (or the slot is emptied and the read's error thrown).
  void land(Slot& s);
  void poll();  // lands the reads that are done
  int slot_of(int block) const;
  // A slot free for a new copy: not in use, not holding one of `keep`; -1 when none.
  int free_slot(const std::vector<int>& keep) const;
  void copy_into(int slot, int block);
  void prefetch_ahead(int current);

  std::vector<StreamSource> homes_;
  std::vector<uint64_t> bytes_;
  std::vector<Slot> slots_;
  uint64_t slot_bytes_;
  std::unique_ptr<ComputeCopier> copier_;
  std::vector<int> order_;  // streamed blocks of the pass, in use order
  size_t cursor_ = 0;       // next expected position in order_
  mutable WeightStreamStats stats_;  // (copy_wait_s is brought up to date when read)
  int last_failed_ = -1;
};

}  // namespace bcd
