// A config resolved into its memory plan: the one path `bcdtrain plan`, `train --dry-run` and a
// run take, so what `plan` prints is what the run will do.
#pragma once

#include <torch/torch.h>

#include <string>

#include "base/config.h"
#include "data/dataset.h"
#include "memory/planner.h"

namespace bcd {

// Where a run is planned: the machine as the run finds it, or as `plan` assumes it (a login node
// plans a GPU run without a GPU at hand).
struct PlanSite {
  torch::Device device{torch::kCPU};  // the compute device at hand: a GPU's memory is compute_bytes = auto
  bool on_cuda = false;               // planned as a GPU run (fused attention, a GPU's stream rates)
  int local_ranks = 1;                // ranks sharing this machine's RAM
  int world_ranks = 1;                // ranks of the run: dist.shard_state shards the block state over them
};

// What the run is made of, resolved from the config (which stays as given: "auto" budgets are
// resolved again by a resume on other ranks).
struct RunPlan {
  ModelConfig model;    // the shape that is built (HF config.json, init_from, vocab_size from the data)
  MemoryConfig memory;  // the budgets as planned: auto resolved for this device and this rank's share
  int local_ranks = 1;  // ranks sharing this machine (its RAM)
  int shards = 1;       // ranks the block state is sharded over
  MemoryPlan plan;
};

// Ranks the block state is sharded over in a run of `world_ranks` ranks: all of them with
// dist.shard_state and the fused optimizer, else 1.
int state_shards(const Config& cfg, int world_ranks);

// The plan of `cfg` at `site`. `data`: the run's (first) dataset when it is at hand: the model's
// vocabulary, seq_len and [model] init_from's tokenizer are checked against it (UserError naming
// the key); without it [model] vocab_size must be set.
RunPlan resolve_plan(const Config& cfg, const PlanSite& site, const TokenDataset* data);

// The `bcdtrain plan` report: a line on the ranks when there are several, then format_plan.
std::string format_run_plan(const RunPlan& rp);

// The tokenizer that comes with weights (an [model] init_from value, or a file eval and generate
// read), where there is one: in an HF directory ("hf:DIR"), beside an imported .h5 (import
// copies it there), in the run directory of a model.h5 or of a checkpoint; "" when none.
std::string init_from_tokenizer(const std::string& init_from);

// `eval`'s forward pass over batches of `batch` sequences of `seq_len` tokens: one layer's
// transients and the logits at a time (the planner's estimate); UserError naming --batch-size when
// that is more than this machine's available memory.
void check_eval_fits(const ModelConfig& model, const TrainConfig& train, int64_t batch, int64_t seq_len);

}  // namespace bcd
