// BCD partition and schedule: which block trains now, for how long, and which come next.
// A BCD block ("unit") is one or more storage blocks, or one part (attn/mlp) of a layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/model_shape.h"

namespace bcd {

class LlamaModel;

// The partition of the model for `cfg` (with enabled = false: one unit, model): unit_shapes of
// its config, so the plan and the run agree by construction.
std::vector<UnitShape> make_units(const LlamaModel& model, const BcdConfig& cfg);

// Where the schedule is: enough to continue exactly (saved in checkpoints).
struct SchedulerState {
  uint64_t epoch = 0;          // block-epochs completed
  uint64_t position = 0;       // index in this epoch's order
  uint64_t step_in_visit = 0;  // optimizer steps already taken in the current visit
  bool operator==(const SchedulerState& o) const {
    return epoch == o.epoch && position == o.position && step_in_visit == o.step_in_visit;
  }
};

class BcdScheduler {
 public:
  // `fixed` gives the unit order for order = "fixed". Random orders are a pure function of
  // (seed, epoch), so the state above is all a resume needs.
  BcdScheduler(int n_units, const BcdConfig& cfg, uint64_t seed, std::vector<int> fixed = {});

  int current() const { return order_[state_.position]; }
  uint64_t epoch() const { return state_.epoch; }
  uint64_t step_in_visit() const { return state_.step_in_visit; }
  int64_t switch_every() const { return switch_every_; }
  // The units of the next n visits after the current one (the stager prefetches these).
  std::vector<int> lookahead(int n) const;
  // The visiting order of a block-epoch.
  std::vector<int> epoch_order(uint64_t epoch) const;

  // Call after each optimizer step; true when the next step starts a new visit.
  bool step();

  SchedulerState state() const { return state_; }
  void restore(const SchedulerState& s);

 private:
  int n_units_;
  BlockOrder order_kind_;
  int64_t switch_every_;
  uint64_t seed_;
  std::vector<int> fixed_;
  SchedulerState state_;
  std::vector<int> order_;  // epoch_order(state_.epoch)
};

}  // namespace bcd
