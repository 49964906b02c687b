// A training run's setup: everything the step loop works on, built and checked before the
// first step — data, model, memory plan, BCD schedule, optimizer, and the state a resume
// brings back. Bad input (data, shapes, a plan that does not fit) is refused before the model
// is allocated.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "io/dataset.h"
#include "io/loader.h"
#include "io/tokenizer.h"
#include "memory/accounting.h"
#include "memory/planner.h"
#include "model/llama.h"
#include "runtime/bcd_scheduler.h"
#include "runtime/block_optimizer.h"
#include "runtime/optimizer.h"

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
  void update(double lr);  // AdamW on the active unit (or on everything)
  int64_t tokens_per_step() const;
  bool can_checkpoint() const { return block_opt != nullptr; }  // the fused optimizer only

  // The lines printed before the first step: model, data, training, BCD, memory, resume.
  std::vector<std::string> banner() const;

  // ---- In the order they are set up ----
  Config cfg;                    // as given, with [model] resolved to the shape that is built
  const torch::Device device;    // resolved before anything is read
  TokenDataset ds;
  Tokenizer tok;
  DataLoader train_loader;
  MemoryAccounting acct;         // budgets from the plan
  const MemoryPlan plan;
  Charge activations;            // the plan's activation reservation on the compute tier
  LlamaModel model;
  Charge working;                // every block's working weights
  const std::vector<TrainUnit> units;
  BcdScheduler sched;
  std::vector<Charge> torch_state;        // torch's AdamW: gradients and moments of every block
  std::unique_ptr<FullAdamW> torch_opt;   // [optim] impl = "torch"
  std::unique_ptr<BlockAdamW> block_opt;  // [optim] impl = "fused"
  const std::string resume_from;
  int64_t first_step = 1;        // > 1 when resumed
  double resume_s = 0;           // time to read the checkpoint

 private:
  void make_optimizer();
};

// [train] device -> the compute device: "cpu", "cuda" (UserError naming why when it is not
// usable: no CUDA kernels in this build, LibTorch sees no device, or the GPU's architecture has
// no kernel image in this build), "auto" (cuda when usable).
torch::Device resolve_device(const std::string& device);

// memory.compute_bytes = auto on a CUDA device: the device's total memory (on the CPU the planner
// takes the host's MemTotal).
void apply_device_budget(MemoryConfig& mem, const torch::Device& device);

// Sets torch's intra-op threads (0 = all cores).
void configure_threads(int64_t threads);

}  // namespace bcd
