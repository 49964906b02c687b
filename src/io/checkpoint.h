// Training checkpoints: one state file (io/state_file.h: atomic, checksummed) per checkpoint,
// <run_dir>/checkpoints/step-<N>.h5, a superset of the weights file (model/weights.h):
// /blocks/<name> and the config attribute, plus whatever the trainer needs to continue exactly
// (runtime/train_state.h: optimizer state per unit, scheduler, loader). A run whose optimizer
// state is sharded over ranks adds one file per rank beside it, that rank's slice:
// step-<N>.shard-<r>-of-<n>.<token>.h5. The token names the save the slices belong to; the
// checkpoint file, written last, names it too, so a checkpoint is there only once every slice
// is. Here: the format, and the files of a checkpoint directory.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/state_file.h"

namespace bcd {

constexpr const char* kCheckpointFormat = "bcdtrain-checkpoint";
constexpr int kCheckpointVersion = 1;

// A checkpoint being written: the root attributes format and version are set.
class CheckpointWriter : public StateFileWriter {
 public:
  explicit CheckpointWriter(std::string path)
      : StateFileWriter(std::move(path), kCheckpointFormat, kCheckpointVersion, "checkpoint") {}
};

// UserError naming the file when it is missing, unreadable (e.g. truncated) or not a checkpoint
// of a version this build reads.
class CheckpointReader : public StateFileReader {
 public:
  explicit CheckpointReader(std::string path);
};

// When `path` names a slice file (by its name): the file name of its checkpoint file
// ("step-<N>.h5"); else "".
std::string checkpoint_of_slice(const std::string& path);

// The slice file of rank `rank` of `count` for the checkpoint file `checkpoint` and save `token`.
std::string checkpoint_shard_path(const std::string& checkpoint, int rank, int count, const std::string& token);

// Checkpoint files of a directory (step-<N>.h5), oldest first by N; temporaries and slice
// files are ignored.
std::vector<std::string> list_checkpoints(const std::string& dir);
// The step a checkpoint file's name gives (step-<N>.h5), or -1 for another name.
int64_t checkpoint_file_step(const std::string& path);
// A checkpoint file as given, or the latest in <run_dir>/checkpoints; UserError when none, or
// when the file is a slice file.
std::string resolve_checkpoint(const std::string& run_dir_or_file);
// Removes all but the newest `keep` checkpoints of `dir` (keep <= 0: none removed) with their
// slice files, temporaries left by a crashed writer, and slice files of no checkpoint (a save
// that stopped before its checkpoint file was committed).
void prune_checkpoints(const std::string& dir, int64_t keep);
// Removes `which` (checkpoint files of `dir`, as list_checkpoints gives them) with their slice
// files, and temporaries left by a crashed writer: what a run writing over a directory's
// checkpoints (--overwrite) deletes.
void remove_checkpoints(const std::string& dir, const std::vector<std::string>& which);

}  // namespace bcd
