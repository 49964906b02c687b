// The stager (DESIGN.md §3): moves each BCD unit's inactive state ("image": its fp32 master and
// Adam moments, concatenated) between its home (resident host memory or the NVMe tier) and the
// compute tier, through the pinned slab pool, ahead of need:
//
//   prefetch   home -> slab            async (NVMe reads on the store's read queue; host copies on
//                                      a thread), started from the scheduler's look-ahead
//   swap       compute -> slab, slab -> compute, enqueued at the switch on the compute copier
//              (CUDA: two copy streams ordered by events; CPU: a worker thread); waits only for
//              a late prefetch or a slab still being written back (the stall, measured)
//   write-back slab -> home            async, started once the compute -> slab copy is done
//                                      (the store's write queue: never ahead of a prefetch)
//
// After swap() the compute memory may still be in flight: call fence() before touching it.
// Knows bytes and units, not layers or losses. Not thread-safe: the training thread drives it.
#pragma once

#include <array>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/direct_io.h"
#include "io/extent_store.h"
#include "memory/accounting.h"
#include "memory/compute_copy.h"
#include "memory/slab_pool.h"
#include "memory/tier.h"

namespace bcd {

struct StagedUnit {
  std::string name;      // object name on the NVMe tier ("unit.<name>")
  std::array<uint64_t, kNumStateKinds> kind_bytes{};  // what the image holds (for the accounting)
  Tier home = Tier::kPinned;  // kPinned (resident host copy) or kNvme
  uint64_t bytes() const;     // image size: the sum of kind_bytes; 0 = nothing moves
};

struct StagerOptions {
  int prefetch_depth = 1;                 // units prefetched ahead; the pool has depth + 1 slabs
  std::vector<std::string> nvme_paths;    // directories of the NVMe tier (needed when a home is kNvme)
  StoreOptions store;
  ExtentStore::EngineFactory engine_factory;  // tests: fault injection
  bool compute_on_cuda = false;           // compute memory is CUDA device memory (copy streams)
  void* compute_stream = nullptr;         // CUDA: the cudaStream_t training runs on (nullptr: legacy default)
};

struct StagerStats {
  uint64_t switches = 0;
  double stall_s = 0;        // the training thread waiting for staging: late prefetches, busy
                             // slabs at switches, and compute copies not done at a fence
  double last_stall_s = 0;   // of the latest switch
  double fence_s = 0;        // the part of stall_s spent at fences
  double copy_wait_s = 0;    // the compute side waiting at fences for the compute image's copies:
                             // CUDA: the compute stream's waits, event-timed (the host does not
                             // wait there); CPU: fence_s
  double copy_s = 0;         // compute <-> slab copies (the copy engine's time, off the training thread)
  uint64_t nvme_read_bytes = 0, nvme_write_bytes = 0;
  uint64_t host_read_bytes = 0, host_write_bytes = 0;   // resident host copies <-> slabs
  uint64_t compute_in_bytes = 0, compute_out_bytes = 0; // slabs <-> compute tier
};

class Stager {
 public:
  // Reserves every home up front: host copies (charged to the host pool), NVMe objects (charged
  // to the NVMe pool), and the slab pool (pinned). UserError naming the path when the NVMe tier
  // can't be set up.
  Stager(std::vector<StagedUnit> units, StagerOptions opts, MemoryAccounting* acct);
  ~Stager();  // waits for transfers in flight (errors are dropped here: flush() reports them)
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  int n_units() const { return static_cast<int>(units_.size()); }
  uint64_t unit_bytes(int unit) const { return units_.at(unit).bytes(); }
  Tier home(int unit) const { return units_.at(unit).home; }
  bool has_data(int unit) const { return has_data_.at(unit); }  // its home holds an image
  int active() const { return active_; }

  // Starts bringing `unit`'s image into a slab. Ignored for the active unit, a unit without data,
  // one already prefetched, or when prefetch_depth slabs already hold prefetches.
  void prefetch(int unit);

  // The switch from `from` (-1: none) to `to`: `from`'s image (its first unit_bytes(from) bytes of
  // `compute`) goes home, then `to`'s image is copied into `compute`; both copies are enqueued,
  // not done: fence() before touching `compute`. Returns false when `to` has no data yet (then
  // `compute` will hold nothing of it: the caller initialises it after fence()). UserError when a
  // transfer failed (I/O error, checksum mismatch), before any of `to`'s bytes reach `compute`.
  bool swap(int from, int to, void* compute);

  // Compute-side work issued after this sees the latest swap's copies done and never races
  // them (CPU: waits, counted as stall; CUDA: orders the compute stream, host returns at once).
  // Also starts write-backs whose copies finished. Cheap: call before every update.
  void fence();
  // Zeroes compute memory (fresh moments) behind the latest swap's copies, without waiting for
  // them; fence() before the compute side touches it.
  void zero_compute(void* compute, uint64_t bytes);
  bool on_cuda() const { return copier_->on_cuda(); }

  // Synchronous access to a unit's home image (checkpoints, tests); not for the active unit.
  // `dst` gets unit_bytes(unit) bytes; false when the unit has no data yet.
  bool get(int unit, void* dst);
  void put(int unit, const void* src);  // replaces the home image

  // Waits for every write-back; UserError if one failed.
  void flush();

  const StagerStats& stats() const;
  uint64_t slab_bytes() const { return pool_->slab_bytes(); }
  int slab_count() const { return pool_->count(); }
  const ExtentStore* store() const { return store_.get(); }
  // The NVMe tier's files go when the stager does (see ExtentStore::discard_at_close).
  void discard_nvme_at_close() {
    if (store_) store_->discard_at_close();
  }

 private:
  // A transfer between a slab and a unit's home.
  struct Op {
    int unit = -1;
    int slab = -1;
    bool read = true;
    Ticket ticket = 0;                // NVMe
    std::shared_future<void> copy;    // host
    ComputeCopier::Token filled = 0;  // write-back: the compute -> slab copy it waits for
    bool started = true;              // write-back: submitted to its home
    bool waited = false;
  };
  // A slab whose image is being copied into the compute tier.
  struct InCopy {
    int slab;
    ComputeCopier::Token token;
  };
  void start(Op& op);
  void finish(Op& op);                // waits; throws on failure
  void start_write(Op& op);           // waits for its compute copy, then submits it
  void poll();                        // starts write-backs / frees slabs whose copies finished
  void start_writes_of(int unit);     // before anything reads `unit`'s home
  void retire_oldest_write();         // waits for it (and its copy); its slab goes back
  void retire_oldest_in();            // waits for the copy; its slab goes back
  bool write_done(const Op& op);
  int take_slab();                    // a free slab, waiting for the oldest write-back if needed
  void wait_host_write(int unit);

  std::vector<StagedUnit> units_;
  StagerOptions opts_;
  MemoryAccounting* acct_;
  std::vector<bool> has_data_;
  std::vector<AlignedBuffer> host_;   // resident copies (home kPinned)
  std::vector<Charge> charges_;
  std::unique_ptr<SlabPool> pool_;        // before store_: the store (registered buffer) goes first
  std::unique_ptr<ExtentStore> store_;
  std::vector<ObjectId> objects_;
  int active_ = -1;
  std::map<int, Op> reads_;           // by unit: prefetches
  std::vector<Op> writes_;            // write-backs in flight, oldest first
  std::map<int, std::shared_future<void>> host_writes_;  // by unit: ordering of host copies
  std::vector<InCopy> ins_;           // slabs whose copy into the compute tier is in flight
  std::unique_ptr<ComputeCopier> copier_;  // after pool_: drained before the slabs go
  ComputeCopier::Token last_copy_ = 0;     // the compute image's latest copy: what fence() waits for
  mutable StagerStats stats_;
};

}  // namespace bcd
