// The trainer's state in a checkpoint (io/checkpoint.h) and back: everything the next step
// needs to continue exactly as the uninterrupted run would.
//   root attributes     config (TOML), step, tokens, world_size
//   /blocks/<block>     working weights, fp32
//   /scheduler          epoch, position, step_in_visit, active (the unit being visited)
//   /rank<r>/loader     epoch, cursor (the data position of rank r)
//   /rank<r>/optimizer/<unit>/image, steps   the unit's [master] m v as its home holds them
// Data parallel: the ranks' weights and data position are the same (the loader's is global), so
// rank 0 writes. A sharded optimizer state is gathered to rank 0 unit by unit and stored whole
// under /rank0: a checkpoint does not depend on the world size, and a resume on any number of
// ranks takes each rank's slice from it (/rank<r> stays free for state that differs by rank).
#pragma once

#include <cstdint>
#include <string>

namespace bcd {

class RunSetup;

// "/rank<r>": the group of what rank r owns.
std::string rank_group(int rank);

// Writes <run_dir>/checkpoints/step-<step>.h5 (atomically) after `step`, then applies
// train.keep_checkpoints; returns the path. The active unit must be the schedule's current one
// (a switch that is due happens before: the next step would start with it). Every rank calls
// it (sharded state is gathered); rank 0 writes, the others return "".
std::string save_checkpoint(RunSetup& run, int64_t step);

// Restores a checkpoint into a freshly set-up run; returns the step it was written after.
// UserError naming the file when it does not match the run (blocks, units, schedule).
int64_t read_train_state(RunSetup& run, const std::string& path);

}  // namespace bcd
