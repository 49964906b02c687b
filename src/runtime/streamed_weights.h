// Frozen layers' working weights streamed from host memory (DESIGN.md §2), as the memory plan
// says: which blocks stream, the window's depth, the active unit's buffer. Glue between the
// model (LayerWeights: a block's data() is rebound to a window buffer while it is used, to its
// host copy otherwise) and memory's WeightStream.
//
// A streamed block's data() is its host copy whenever it is not in use, so whatever reads or
// writes the weights outside a forward (initialisation, checkpoints, weights files) sees the
// truth. While a unit is active its streamed blocks live in the compute tier's active buffer for
// the whole visit (the optimizer updates them there) and go home when the visit ends.
// With several ranks on a machine the host copy is one shared-memory segment: its first rank
// writes the new weights of a unit back, once, and the others wait for it (a barrier).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "memory/accounting.h"
#include "io/extent_store.h"
#include "memory/planner.h"
#include "memory/weight_stream.h"
#include "model/llama.h"
#include "dist/process_group.h"

namespace bcd {

// Streamed bytes and waits since the last take().
struct StreamStepStats {
  uint64_t bytes = 0;
  uint64_t uses = 0;             // acquires of streamed layers (window hits and misses)
  double stall_s = 0;
  double max_layer_stall_s = 0;  // the longest wait for one layer's weights
  int max_stall_block = -1;
};

class StreamedWeights final : public LayerWeights {
 public:
  // Host copy, window and active buffer of the plan's streamed blocks (plan.stream); charged to
  // `acct` as working weights (host: this rank's share of a shared copy). With several ranks on
  // the machine the host copy is shared: the ranks meet in `pg` to create and attach it.
  // Layers homed on NVMe (plan.stream.home) live in an extent store in `nvme_dirs` (this rank's
  // NvmeStore::kWeights directories, memory/nvme_dirs.h; created when a layer is homed there), its
  // I/O engines made by `engines` (tests: faults).
  StreamedWeights(const MemoryPlan& plan, const ModelConfig& model, torch::TensorOptions working,
                  MemoryAccounting* acct, ProcessGroup& pg, const DistEnv& env,
                  const std::vector<std::string>& nvme_dirs = {}, ExtentStore::EngineFactory engines = {});
  ~StreamedWeights() override;

  // LlamaModel's BlockStorage: a streamed block's host copy, undefined for the others.
  torch::Tensor storage(int block) const;
  // After the model is built on storage(): it fetches its layers through this.
  void attach(LlamaModel& model);
  // Once every rank has written its initial weights (drawn, loaded or resumed): the ranks of a
  // machine meet, so none reads the shared copy while another still writes it.
  void ready();

  // A BCD switch (BlockAdamW's hook, between freezing `prev_blocks` and activating `blocks`):
  // the previous unit's streamed blocks go home (their new weights written back), the new
  // unit's come into the active buffer for its visit.
  void switch_blocks(const std::vector<int>& prev_blocks, const std::vector<int>& blocks);

  void expect(const std::vector<int>& blocks) override;
  // IoError naming the block when its NVMe read failed (before anything computes with it).
  void acquire(int block) override;
  void release(int block) override;
  // A block homed on NVMe, for initialisation, weights files and checkpoints: read into a
  // temporary host buffer (zeros before its first write), written back on commit.
  void open_block(int block) override;
  void close_block(int block, bool commit) override;

  bool streams(int block) const {
    return block >= 0 && block < static_cast<int>(offset_.size()) && (offset_[block] >= 0 || on_nvme_[block]);
  }
  int streamed_count() const;
  int nvme_count() const { return static_cast<int>(std::count(on_nvme_.begin(), on_nvme_.end(), true)); }
  uint64_t host_bytes() const { return host_.bytes(); }
  bool shared() const { return host_.shared(); }
  int depth() const { return stream_->depth(); }
  const WeightStreamStats& totals() const { return stream_->stats(); }
  StreamStepStats take();

 private:
  bool is_active(int block) const {
    return std::find(active_blocks_.begin(), active_blocks_.end(), block) != active_blocks_.end();
  }
  IoError failed_read(const IoError& e) const;  // e, naming the layer whose read failed
  torch::Tensor home_view(int block) const;  // host homes: the host copy's part
  torch::Tensor idle_view(int block) const;  // what data() is when the block is not in use
  torch::Tensor bounce() const;              // NVMe homes: the staging buffer of synchronous I/O
  void read_home(int block, const torch::Tensor& dst);
  void write_home(int block, const torch::Tensor& src);  // host homes: the machine's first rank only

  LlamaModel* model_ = nullptr;
  ProcessGroup& pg_;
  bool writer_;                     // writes the host copy back (the machine's first rank)
  bool meet_;                       // ranks of the machine share the copy: barriers at write-backs
  torch::TensorOptions working_;
  std::vector<int64_t> numel_;      // per block
  std::vector<int64_t> offset_;     // per block: elements into the host copy; -1 = not there
  std::vector<bool> on_nvme_;       // per block: streamed from the NVMe tier
  int64_t elem_ = 4;                // bytes per working element
  HostWeights host_;
  std::unique_ptr<ExtentStore> store_;  // NVMe homes
  std::vector<ObjectId> object_;
  std::vector<bool> written_;       // NVMe homes holding weights
  HostWeights staging_;             // NVMe homes: depth + 1 pinned buffers of stage_bytes_
  uint64_t stage_bytes_ = 0;
  std::map<int, torch::Tensor> open_;  // blocks opened by open_block
  torch::Tensor window_;            // depth x slot elements on the compute device
  int64_t slot_numel_ = 0;
  torch::Tensor active_;            // the active unit's streamed blocks, for its visit
  std::vector<int> active_blocks_;  // streamed blocks now in active_
  std::vector<Charge> charges_;
  std::unique_ptr<WeightStream> stream_;
  WeightStreamStats last_;          // totals at the last take()
  uint64_t uses_ = 0, last_uses_ = 0;
  double step_max_stall_s_ = 0;     // since the last take(): the longest wait for one block
  int step_max_stall_block_ = -1;
};

}  // namespace bcd
