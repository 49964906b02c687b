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
#include "runtime/bcd_scheduler.h"
#include "runtime/block_optimizer.h"
#include "runtime/grad_reducer.h"
#include "runtime/optimizer.h"
#include "runtime/process_group.h"
#include "runtime/run_plan.h"
#include "runtime/streamed_weights.h"

namespace bcd {

class RunSetup {
 public:
  // `resume_from`: a checkpoint file to continue from exactly, or "" for a fresh run.
  RunSetup(Config config, std::string resume_from);
  RunSetup(const RunSetup&) = delete;
  RunSetup& operator=(const RunSetup&) = delete;

  // ---- The optimizer glue the loop calls (DESIGN §4) ----
  // Starts the visit of the schedule's current unit (its state comes in, the last one's goes home).
  void switch_unit();
  // Starts moving the state of the next units toward the compute tier (the stager's look-ahead).
  void prefetch();
  // Backward stops here: the lowest block of the active unit (0 for full-parameter training).
  int grad_from() const;
  // Data parallel: before the step's final backward, arm the gradient buckets (rebuilt when the
  // trainable set changed), so backward starts summing them over ranks as each completes; after
  // it, reduce_gradients() leaves the mean over ranks (sharded: in the ranges this rank's
  // optimizer slice owns, all that its update reads). No-ops on one rank.
  void arm_reduction();
  void reduce_gradients();
  // The global gradient norm, clipped to train.grad_clip (optimizer.h's clip_grad_norm); with
  // sharded state, of the ranges this rank owns, the norm summed over ranks.
  torch::Tensor clip_gradients();
  // After each micro-batch's backward: bf16 blocks add it to their fp32 gradient sum (the final
  // one's is added bucket by bucket as the reducer sends it, when there is a reducer).
  void accumulate_gradients(bool final_micro_batch);
  // Whether the next step's forward below the active unit may run while this step's gradient is
  // on the wire: more than one rank, dist.overlap_forward, a unit above the embedding, and the
  // next step trains the same unit.
  bool can_run_ahead(int64_t step) const;
  // AdamW on the active unit (or on everything); sharded, of this rank's slice, after which the
  // ranks all-gather the updated working weights.
  void update(double lr);
  // Ranks the block state is sharded over: the world size with dist.shard_state, else 1.
  int shards() const;
  int64_t tokens_per_step() const;  // over all ranks
  // FLOPs this rank executes in a step with the active unit as it is now (runtime/flops.h).
  double step_flops() const;
  bool can_checkpoint() const { return block_opt != nullptr; }  // the fused optimizer only
  bool is_root() const { return pg->is_root(); }  // rank 0 writes the run directory

  // The lines printed before the first step: model, data, training, BCD, memory, resume.
  std::vector<std::string> banner() const;

  // ---- In the order they are set up ----
  Config cfg;                    // as given, with [model] resolved to the shape that is built
  const DistEnv dist_env;        // this process's rank, from the launcher's environment
  const torch::Device device;    // resolved before anything is read; cuda:LOCAL_RANK on GPUs
  std::unique_ptr<ProcessGroup> pg;  // the ranks (one, without a launcher), joined before anything is read
  std::unique_ptr<GradReducer> reducer;  // more than one rank only
  std::vector<DataSource> sources;  // [data] path, or paths with their weights
  TokenDataset ds;                  // the first of them: its tokenizer and attributes (all share them)
  Tokenizer tok;
  DataLoader train_loader;
  MemoryAccounting acct;         // budgets from the plan
  const MemoryPlan plan;
  Charge activations;            // the plan's activation reservation on the compute tier
  const ExtentStore::EngineFactory nvme_faults;  // BCD_NVME_FAULTS: faults for every NVMe store of the run, else empty
  std::unique_ptr<StreamedWeights> streamed;  // frozen layers' weights from host memory (plan.stream), or none
  LlamaModel model;
  Charge working;                // the resident blocks' working weights (streamed ones: `streamed` charges them)
  const std::vector<TrainUnit> units;
  BcdScheduler sched;
  std::vector<Charge> torch_state;        // torch's AdamW: gradients and moments of every block
  std::unique_ptr<FullAdamW> torch_opt;   // [optim] impl = "torch"
  std::unique_ptr<BlockAdamW> block_opt;  // [optim] impl = "fused"
  const std::string resume_from;
  int64_t first_step = 1;        // > 1 when resumed
  double resume_s = 0;           // time to read the checkpoint
  int64_t steps_run_ahead = 0;   // steps whose frozen forward ran while the last gradient was on the wire
  double gather_s = 0;           // sharded: time in all-gathers of the updated weights
  std::optional<double> peak_tflops;  // the device's, for MFU: train.peak_tflops, else a known GPU's

 private:
  void make_optimizer();
};

// The plan of a run of `cfg` on `sources` (checked: a validation window, memory.nvme_paths) with
// `device` and its ranks: RunSetup's, and train --dry-run's.
RunPlan plan_for_run(const Config& cfg, const std::vector<DataSource>& sources, const torch::Device& device,
                     int local_ranks, int world_ranks);

// train --dry-run: what a run of `cfg` plans on this machine (this process's ranks), checked as the
// run checks it (device, threads, data and its tokenizer, shapes), allocating nothing.
RunPlan plan_this_run(const Config& cfg);

// Ranks on one machine share its RAM: the "auto" host budget (and on the CPU the compute
// budget) becomes each rank's 1/local_ranks share of what /proc/meminfo reports.
void share_machine_memory(MemoryConfig& mem, const torch::Device& device, int local_ranks);

// The tokenizer that comes with weights (an [model] init_from value, or a file eval and generate
// read), where there is one: in an HF directory ("hf:DIR"), beside an imported .h5 (import
// copies it there), in the run directory of a model.h5 or of a checkpoint; "" when none.
std::string init_from_tokenizer(const std::string& init_from);

// The CUDA device index of `device` ("cuda" without an index is device 0).
inline int cuda_index(const torch::Device& device) { return device.index() < 0 ? 0 : device.index(); }

// [train] device -> the compute device: "cpu", "cuda" (UserError naming why when it is not
// usable: no CUDA kernels in this build, LibTorch sees no device, or the GPU's architecture has
// no kernel image in this build), "auto" (cuda when usable). On CUDA the rank's GPU
// (cuda_device_for_rank) becomes the process's current device (start_cuda_device).
torch::Device resolve_device(DeviceChoice device, int local_rank = 0, int local_ranks = 1);

// The GPU of local rank `local_rank` of `local_ranks` on a machine where it sees `visible` GPUs:
// its LOCAL_RANK when every local rank has one of its own (torchrun, bcdtrain launch), 0 when it
// sees exactly one (Slurm's --gpus-per-task, CUDA_VISIBLE_DEVICES per rank); UserError when
// ranks would have to share a GPU.
int cuda_device_for_rank(int local_rank, int local_ranks, int visible);

// memory.compute_bytes = auto on a CUDA device: the device's total memory (on the CPU the planner
// takes the host's MemTotal).
void apply_device_budget(MemoryConfig& mem, const torch::Device& device);

// Sets torch's intra-op threads (0 = this process's share of the cores: all of them, divided
// among the ranks running on this machine).
void configure_threads(int64_t threads, int local_ranks = 1);

}  // namespace bcd
