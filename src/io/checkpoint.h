// Training checkpoints: one state file (io/state_file.h: atomic, checksummed) per checkpoint,
// <run_dir>/checkpoints/step-<N>.h5, a superset of the weights file (model/weights.h):
// /blocks/<name> and the config attribute, plus whatever the trainer needs to continue exactly
// (runtime/train_state.h: optimizer state per unit, scheduler, loader). Here: the format, and
// the files of a checkpoint directory.
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

// Checkpoint files of a directory (step-<N>.h5), oldest first by N; temporaries are ignored.
std::vector<std::string> list_checkpoints(const std::string& dir);
// A checkpoint file as given, or the latest in <run_dir>/checkpoints; UserError when none.
std::string resolve_checkpoint(const std::string& run_dir_or_file);
// Removes all but the newest `keep` checkpoints of `dir` (keep <= 0: none removed), and
// temporaries left by a crashed writer.
void prune_checkpoints(const std::string& dir, int64_t keep);

}  // namespace bcd
