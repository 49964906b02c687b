// Training checkpoints: one HDF5 file per checkpoint, <run_dir>/checkpoints/step-<N>.h5, a
// superset of the weights file (io/weights.h): /blocks/<name> and the config attribute, plus
// whatever the trainer needs to continue exactly (optimizer state per unit, scheduler, loader).
// Every dataset is chunked with HDF5's Fletcher-32 checksum, so a flipped bit is an error on
// read, never a value. Written to a temporary file, fsync'd, renamed, the directory fsync'd:
// a crash at any moment leaves the previous checkpoint intact.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bcd {

constexpr const char* kCheckpointFormat = "bcdtrain-checkpoint";
constexpr int kCheckpointVersion = 1;

class CheckpointWriter {
 public:
  // Opens <path>.tmp-<pid> for writing; UserError naming the path when it can't.
  explicit CheckpointWriter(std::string path);
  ~CheckpointWriter();  // without commit(): the temporary file is removed
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Objects are addressed by path ("/rank0/loader"); missing groups are created.
  void group(const std::string& path);
  void attr(const std::string& object, const std::string& name, int64_t value);
  void attr(const std::string& object, const std::string& name, const std::string& value);
  void floats(const std::string& dataset, const float* data, uint64_t n);  // 1-D float32

  // Closes, fsyncs and renames into place, then fsyncs the directory.
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class CheckpointReader {
 public:
  // UserError naming the file when it is missing, unreadable (e.g. truncated) or not a
  // checkpoint of a version this build reads.
  explicit CheckpointReader(std::string path);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& path() const { return path_; }
  bool has(const std::string& object) const;
  // UserError naming the file, the object and the attribute when absent or of another type.
  int64_t attr_int(const std::string& object, const std::string& name) const;
  std::string attr_str(const std::string& object, const std::string& name) const;
  uint64_t length(const std::string& dataset) const;  // elements of a 1-D dataset
  // Reads exactly n floats; UserError naming the file and dataset on a length mismatch or a
  // failed checksum.
  void floats(const std::string& dataset, float* out, uint64_t n) const;

 private:
  struct Impl;
  std::string path_;
  std::unique_ptr<Impl> impl_;
};

// Checkpoint files of a directory (step-<N>.h5), oldest first by N; temporaries are ignored.
std::vector<std::string> list_checkpoints(const std::string& dir);
// A checkpoint file as given, or the latest in <run_dir>/checkpoints; UserError when none.
std::string resolve_checkpoint(const std::string& run_dir_or_file);
// Removes all but the newest `keep` checkpoints of `dir` (keep <= 0: none removed), and
// temporaries left by a crashed writer.
void prune_checkpoints(const std::string& dir, int64_t keep);

}  // namespace bcd
