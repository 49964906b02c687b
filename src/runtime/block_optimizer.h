// AdamW over BCD units: fp32 master and Adam moments per block segment, one fused kernel pass
// per segment, state kept between visits (`keep`) or dropped on switch (`reset`, as BAdam).
// Where inactive state lives is the memory manager's business; here it is host memory.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <vector>

#include "model/llama.h"
#include "runtime/bcd_scheduler.h"
#include "runtime/config.h"

namespace bcd {

// State of one block segment (see Block::segments()).
struct SegmentState {
  torch::Tensor master;  // fp32; undefined when the working buffer is fp32 (it is the master)
  torch::Tensor m, v;    // fp32 Adam moments; undefined until first trained (or after a reset)
  int64_t step = 0;      // updates applied with these moments (bias correction)
};

class BlockAdamW {
 public:
  // `keep_state`: moments persist between visits; otherwise they are dropped on switch.
  BlockAdamW(LlamaModel& model, std::vector<TrainUnit> units, const OptimConfig& cfg, bool keep_state);

  // Starts a visit of `unit`: freezes the previous unit (frees its gradients; drops its moments
  // with reset), makes `unit` trainable and creates its moments if absent. Call at every switch,
  // also when a new visit is of the same unit.
  void activate(int unit);
  int active() const { return active_; }
  const std::vector<TrainUnit>& units() const { return units_; }

  // One fused AdamW update of the active unit from its gradient buffers; with bf16 working
  // weights the updated master is written back into the working buffer in the same pass.
  void step(double lr);

  // Bytes of optimizer state held now: moments (+ fp32 masters when they are separate copies).
  int64_t state_bytes() const;
  int64_t moment_bytes() const;
  int64_t unit_moment_bytes(int unit) const;  // 8 bytes/param of the unit's segments when present

  // Segment state by (block index, segment index); for tests and checkpoints.
  const SegmentState& segment_state(int block, int segment) const;

 private:
  std::vector<std::pair<int, int>> unit_segments(int unit) const;  // (block, segment) pairs

  LlamaModel& model_;
  std::vector<TrainUnit> units_;
  OptimConfig cfg_;
  bool keep_state_;
  bool separate_master_;
  int active_ = -1;
  std::map<std::pair<int, int>, SegmentState> state_;
};

}  // namespace bcd
