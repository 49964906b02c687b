// A training run's setup: everything the step loop works on, built and checked before the
// first step — data, model, memory plan, BCD schedule, optimizer, and the state a resume
// brings back. Bad input (data, shapes, a plan that does not fit) is refused before the model
// is allocated.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/config.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "memory/accounting.h"
#include "memory/planner.h"
#include "model/llama.h"
#include "optim/bcd_scheduler.h"
#include "optim/block_optimizer.h"
#include "dist/grad_reducer.h"
#include "optim/optimizer.h"
#include "dist/process_group.h"
#include "runtime/machine.h"
#include "runtime/run_guard.h"
#include "runtime/run_plan.h"
#include "runtime/step_ops.h"
#include "runtime/streamed_weights.h"
#include "runtime/train_state.h"

namespace bcd {

// Where a run runs and what it is of, found in this order (run_setup.cpp: find_run_site): this
// process's rank from the launcher's environment, its compute device, the ranks joined, the data
// opened and its tokenizer checked, [model] resolved to the shape that is built, and the memory
// plan, refused when it does not fit and agreed by every rank. RunSetup builds the run on it.
struct RunSite {
  Config cfg;  // [model]: the shape that is built
  DistEnv env;
  torch::Device device{torch::kCPU};
  std::unique_ptr<ProcessGroup> pg;
  std::vector<DataSource> sources;
  std::optional<Tokenizer> tok;
  MemoryPlan plan;
};

class RunSetup {
 public:
  // `resume_from`: a checkpoint file to continue from exactly, or "" for a fresh run.
  RunSetup(Config config, const std::string& resume_from);
  RunSetup(const RunSetup&) = delete;
  RunSetup& operator=(const RunSetup&) = delete;

  // The optimizer glue the loop calls (DESIGN §4): switch, prefetch, arm, reduce, clip, update.
  StepOps& ops() { return *ops_; }
  const StepOps& ops() const { return *ops_; }

  // Ranks the block state is sharded over: the world size with dist.shard_state, else 1.
  int shards() const;
  int64_t tokens_per_step() const;  // over all ranks
  bool can_checkpoint() const { return opt_->checkpointable(); }  // the fused optimizer only
  // What a checkpoint saves and restores (can_checkpoint() only).
  TrainState train_state();
  // What the step loop's guard works on (runtime/run_guard.h).
  RunGuard::Parts guard_parts();
  bool is_root() const { return pg->is_root(); }  // rank 0 writes the run directory

  // The model, the training data's loader, the BCD schedule and the optimizer (built by the
  // constructor, in its order).
  LlamaModel& model() { return *model_; }
  const LlamaModel& model() const { return *model_; }
  DataLoader& train_loader() { return *train_loader_; }
  BcdScheduler& sched() { return *sched_; }
  const BcdScheduler& sched() const { return *sched_; }
  Optimizer& optimizer() { return *opt_; }  // [optim] impl: "fused" (BlockAdamW) or "torch" (FullAdamW)
  const Optimizer& optimizer() const { return *opt_; }
  // The first data source: its tokenizer and attributes stand for every source (they share them).
  const TokenDataset& ds() const { return sources.front().ds; }

  // ---- The site (RunSite, found first, in the order find_run_site states) ----
  Config cfg;                    // as given, with [model] resolved to the shape that is built
  const DistEnv dist_env;        // this process's rank, from the launcher's environment
  const torch::Device device;    // resolved before anything is read; cuda:LOCAL_RANK on GPUs
  std::unique_ptr<ProcessGroup> pg;  // the ranks (one, without a launcher), joined before anything is read
  const std::vector<DataSource> sources;  // [data] path, or paths with their weights
  const Tokenizer tok;           // the data's, checked against it
  const MemoryPlan plan;         // fits, and every rank agreed to it
  MemoryAccounting acct;         // the plan's budgets

  // ---- The run, built on the site in the order the constructor states. Each member is
  // declared after the parts it holds (a charge after the accounting, the optimizer after the
  // model, the model after the streamed weights): members are destroyed in the reverse order,
  // so nothing outlives what it holds. ----
  std::unique_ptr<GradReducer> reducer;  // more than one rank only
  Charge activations;            // the plan's activation reservation on the compute tier
  ExtentStore::EngineFactory nvme_faults;  // BCD_NVME_FAULTS: faults for every NVMe store of the run, else empty
  std::unique_ptr<StreamedWeights> streamed;  // frozen layers' weights from host memory (plan.stream), or none
  Charge working;                // the resident blocks' working weights (streamed ones: `streamed` charges them)
  std::vector<UnitShape> units;  // the BCD units (blocks trained together)
  std::vector<Charge> torch_state;        // torch's AdamW: gradients and moments of every block
  std::string resume_from;
  int64_t first_step = 1;        // > 1 when resumed
  double resume_s = 0;           // time to read the checkpoint
  int64_t steps_run_ahead = 0;   // steps whose frozen forward ran while the last gradient was on the wire
  std::optional<double> peak_tflops;  // the device's, for MFU: train.peak_tflops, else a known GPU's

 private:
  RunSetup(RunSite site, const std::string& resume_from);
  void make_optimizer();

  // The rest of the run, declared last: each holds parts declared before it.
  std::optional<DataLoader> train_loader_;
  std::optional<LlamaModel> model_;
  std::optional<BcdScheduler> sched_;
  std::unique_ptr<Optimizer> opt_;
  std::optional<StepOps> ops_;  // made with the optimizer
};

// The plan of a run of `cfg` on `sources` (checked: a validation window, memory.nvme_paths) with
// `device` and its ranks: RunSetup's, and train --dry-run's.
RunPlan plan_for_run(const Config& cfg, const std::vector<DataSource>& sources, const torch::Device& device,
                     int local_ranks, int world_ranks);

// train --dry-run: what a run of `cfg` plans on this machine (this process's ranks), checked as the
// run checks it (device, threads, data and its tokenizer, shapes), allocating nothing.
RunPlan plan_this_run(const Config& cfg);

}  // namespace bcd
