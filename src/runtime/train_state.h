// The trainer's state in a checkpoint (io/checkpoint.h) and back: everything the next step
// needs to continue exactly as the uninterrupted run would.
//   root attributes     config (TOML), step, tokens, world_size
//   /blocks/<block>     working weights, fp32
//   /scheduler          epoch, position, step_in_visit, active (the unit being visited)
//   /rank0/loader       epoch, cursor (the data position: global, every rank's is the same)
//   /rank0/optimizer/<unit>/image, steps, elems   the unit's [master] m v as its home holds them
// Data parallel: the ranks' weights and data position are the same, so rank 0 writes the file.
// A sharded optimizer state stays where it is: rank k of n writes its slice into its own file
// (io/checkpoint.h's slice file: /rank<k>/optimizer/<unit>, the unit's regions of its slice),
// all ranks at once, and the checkpoint file says `optimizer_shards` = n and the save's
// `shard_token` in place of /rank0/optimizer. It is committed only after every slice is, so
// the checkpoint is there whole or not at all. A resume on m ranks cuts each rank's slice from
// the slices it overlaps (m = n: its own file; otherwise re-sliced, whole units on one rank).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/config.h"
#include "data/loader.h"
#include "model/llama.h"
#include "optim/bcd_scheduler.h"
#include "optim/block_optimizer.h"
#include "dist/process_group.h"
#include "runtime/streamed_weights.h"

namespace bcd {

// What a checkpoint holds of a run, where it lives in the run (runtime/run_setup.h hands it over).
struct TrainState {
  const Config& cfg;
  ProcessGroup& pg;
  LlamaModel& model;
  const std::vector<UnitShape>& units;
  BcdScheduler& sched;
  DataLoader& train_loader;
  BlockAdamW& opt;             // the fused optimizer: checkpoints need it
  StreamedWeights* streamed;   // the streamed layers' weights, or none
  int64_t tokens_per_step;     // over all ranks
};

// "/rank<r>": the group of what rank r owns.
std::string rank_group(int rank);

// Writes <run_dir>/checkpoints/step-<step>.h5 (atomically) after `step`, then applies
// train.keep_checkpoints; returns the path. The active unit must be the schedule's current one
// (a switch that is due happens before: the next step would start with it). Every rank calls
// it; sharded, each writes its slice file; rank 0 writes the checkpoint file, the others return
// "". A rank that cannot write its part makes every rank's call a UserError, and no slice of
// that save stays behind.
std::string save_checkpoint(const TrainState& run, int64_t step);

// Restores a checkpoint into a freshly set-up run; returns the step it was written after.
// UserError naming the file when it does not match the run (blocks, units, schedule).
int64_t read_train_state(const TrainState& run, const std::string& path);

}  // namespace bcd
