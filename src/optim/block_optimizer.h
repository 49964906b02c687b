// AdamW over BCD units: fp32 master and Adam moments per block segment, one fused kernel pass
// per segment, state kept between visits (`keep`) or dropped on switch (`reset`, as BAdam).
//
// Only the active unit's state is in the compute tier, in one flat fp32 "image":
//   [master (bf16 runs only) | m | v], each region the unit's segments back to back.
// The image's prefix that outlives the visit (master and moments with keep; the master alone
// with reset) is what the stager (memory/stager.h) moves to and from the unit's home tier.
//
// Sharded (data parallel, dist.shard_state): rank r of N owns the contiguous slice
// shard_range(S, r, N) of each unit's S elements (its segments back to back), and its image,
// homes and checkpoint state hold that slice only. step() updates the owned slice from the
// gradient (reduced into its owners: grad_ranges()); the ranks then exchange the updated working weights
// (owned_weights() -> all-gather -> set_gathered_weights()).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "memory/accounting.h"
#include "memory/planner.h"
#include "memory/stager.h"
#include "model/llama.h"
#include "optim/bcd_scheduler.h"
#include "optim/optimizer.h"
#include "base/config.h"

namespace bcd {

// State of one block segment (see Block::segments()).
struct SegmentState {
  torch::Tensor master;  // fp32; undefined when the working buffer is fp32 (it is the master)
  torch::Tensor m, v;    // fp32 Adam moments; undefined when the segment holds none now
  int64_t step = 0;      // updates applied with these moments (bias correction)
};

// Where inactive state lives. The default: resident host copies, no budgets.
struct StateStorage {
  MemoryAccounting* accounting = nullptr;  // charged for compute state, homes and slabs
  std::vector<Tier> unit_home;             // per unit: Tier::kPinned (host) or Tier::kNvme; empty = host
  StagerOptions stager;
  int shard_rank = 0, shard_count = 1;     // this rank owns 1/shard_count of every unit's state
};

class BlockAdamW : public Optimizer {
 public:
  // `keep_state`: moments persist between visits; otherwise they are dropped on switch.
  BlockAdamW(LlamaModel& model, std::vector<UnitShape> units, const OptimConfig& cfg, bool keep_state,
             StateStorage storage = {});
  ~BlockAdamW() override;

  // Starts a visit of `unit`: freezes the previous unit (frees its gradients; its state goes
  // home, moments dropped with reset), brings `unit`'s state into the compute tier and makes it
  // trainable. Call at every switch, also when a new visit is of the same unit.
  void activate(int unit) override;
  int active() const { return active_; }
  // Called by activate() between freezing the previous unit and touching the new one's weights,
  // with both units' blocks (prev's empty when none): streamed weights move here
  // (runtime/streamed_weights.h).
  using SwitchHook = std::function<void(const std::vector<int>& prev_blocks, const std::vector<int>& blocks)>;
  void set_switch_hook(SwitchHook hook) { switch_hook_ = std::move(hook); }
  const std::vector<UnitShape>& units() const { return units_; }

  // Look-ahead: start moving these units' state toward the compute tier (the stager's prefetch).
  // Cheap to call every step; a prefetch that had to wait for a free slab starts then.
  void prefetch(const std::vector<int>& next_units) override;

  // One fused AdamW update of the active unit from its gradient buffers; with bf16 working
  // weights the updated master is written back into the working buffer in the same pass.
  // Sharded: of the owned slice only (the other ranks' slices of the working weights are stale
  // until set_gathered_weights()).
  void step(double lr) override;

  // Sharded runs, after step(): this rank's slice of the active unit's working weights, padded
  // to the shard chunk ({chunk}, working dtype, on the weights' device), and the inverse of an
  // all-gather of every rank's: {shard_count * chunk} into the active unit's working weights.
  int shard_count() const override { return shard_count_; }
  int shard_rank() const { return shard_rank_; }
  torch::Tensor owned_weights() const override;
  void set_gathered_weights(const torch::Tensor& all) override;
  // The active unit's gradient ranges, each with the rank whose slice it is (each rank's in its
  // slice's order), made at activate(); sharded, the reduction sums each range into its owner
  // only and the update reads the owner's. Unsharded: every range is rank 0's.
  const std::vector<GradRange>& grad_ranges() const override;

  // Bytes of optimizer state held now, wherever it lives: moments (+ fp32 masters when they are
  // separate copies of the working weights).
  int64_t state_bytes() const override;
  int64_t moment_bytes() const;
  int64_t unit_moment_bytes(int unit) const;  // 8 bytes/param of the unit's segments when held
  std::optional<int64_t> moments_of(int unit) const override { return unit_moment_bytes(unit); }

  // Segment state by (block index, segment index), of the first unit training it (a vocabulary
  // slice: its rows of the segment): views into the compute image for the active
  // unit, copies read from the home tier otherwise; for tests and checkpoints.
  SegmentState segment_state(int block, int segment);

  // ---- Checkpoints ----
  // A unit's state as a checkpoint keeps it: the whole compute image ([master] m v) of the
  // active unit; for an inactive one what its home holds (master and/or moments: whatever
  // outlives a visit), empty when nothing does yet. `steps`: updates applied with its moments.
  // Sharded: of the owned slice, unit_regions(unit) regions of shard(unit).len elements each.
  std::vector<float> unit_state(int unit, int64_t* steps);
  int unit_regions(int unit) const;  // regions unit_state(unit) returns now (0: none)
  ShardRange shard(int unit) const { return layout_.at(unit).own; }
  // Restores unit_state()'s output (of this rank's slice). Inactive units first, before
  // activate(); the active unit right after activate(unit). UserError when the image has the
  // wrong size for the unit.
  void restore_unit_state(int unit, const std::vector<float>& image, int64_t steps, const std::string& where);
  int64_t unit_elems(int unit) const { return layout_.at(unit).elems; }

  // Waits for write-backs in flight (surfacing their errors).
  void flush() override { stager_->flush(); }
  const StagerStats& staging() const { return stager_->stats(); }
  const Stager& stager() const { return *stager_; }
  void discard_nvme_at_close() override { stager_->discard_nvme_at_close(); }
  const Stager* staged() const override { return stager_.get(); }
  bool checkpointable() const override { return true; }

 private:
  struct SegRef {
    int block, segment;
    int64_t offset, numel;  // in the unit's S elements
    int64_t in_seg = 0;     // first element within the segment (a vocabulary slice, an owned piece)
  };
  struct UnitLayout {
    std::vector<SegRef> segs;
    std::vector<SegRef> owned;  // the parts of segs in `own`, offsets relative to own.begin
    int64_t elems = 0;      // S: the unit's state elements (master, m and v each)
    ShardRange own;         // what this rank holds: its image regions have own.len elements
  };
  // Element offsets of the image's regions for a unit of S elements.
  int64_t master_at(int64_t) const { return 0; }
  int64_t m_at(int64_t s) const { return separate_master_ ? s : 0; }
  int64_t v_at(int64_t s) const { return m_at(s) + s; }
  uint64_t moved_bytes(int64_t s) const;  // the image prefix that outlives a visit

  void fill_fresh(int unit);    // master from the working weights, moments zero
  void zero_moments(int unit);  // on the copier, behind the switch's copies
  SegmentState view_of(const UnitLayout& u, const SegRef& r, const torch::Tensor& image);

  LlamaModel& model_;
  std::vector<UnitShape> units_;
  std::vector<UnitLayout> layout_;
  OptimConfig cfg_;
  bool keep_state_;
  bool separate_master_;
  bool on_cuda_ = false;             // working weights and the compute image in CUDA memory
  void* compute_stream_ = nullptr;   // CUDA: the cudaStream_t LibTorch computes on (nullptr: legacy default)
  int shard_rank_ = 0, shard_count_ = 1;
  int active_ = -1;
  std::vector<int64_t> steps_;       // per unit: updates applied with its moments
  std::vector<bool> has_moments_;    // per unit
  MemoryAccounting* acct_;
  torch::Tensor image_;              // compute tier: the active unit's state
  std::vector<Charge> image_charges_;
  Charge grad_charge_;               // the active unit's gradient buffers
  std::vector<GradRange> grad_ranges_;  // the active unit's, by owning rank
  std::unique_ptr<Stager> stager_;
  SwitchHook switch_hook_;
};

}  // namespace bcd
