// bcdtrain's HDF5 files (training checkpoints, model weights): a format attribute, attributes and
// 1-D float32 datasets addressed by path. Every dataset is chunked with HDF5's Fletcher-32
// checksum, so a flipped bit is an error on read, never a value. Written to a temporary file,
// fsync'd, renamed, the directory fsync'd: a crash at any moment leaves the previous file intact.
// What a file holds is its writer's business (io/checkpoint.h, model/weights.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace bcd {

// Elements of a dataset written or read by pieces travel in pieces of at most this many (64 MiB
// of fp32, 16 of the datasets' checksummed chunks): what a streamed write or read holds at once.
constexpr uint64_t kStatePieceElems = uint64_t{1} << 24;

// Puts elements [first, first + count) of the dataset being written into `out`.
using FloatFill = std::function<void(uint64_t first, float* out, uint64_t count)>;

class StateFileWriter {
 public:
  // Opens <path>.tmp-<pid> and writes the root attributes format and version; `noun` names the
  // file in errors ("checkpoint", "weights file"). UserError naming the path when it can't.
  StateFileWriter(std::string path, const std::string& format, int64_t version, std::string noun);
  ~StateFileWriter();  // without commit(): the temporary file is removed
  StateFileWriter(const StateFileWriter&) = delete;
  StateFileWriter& operator=(const StateFileWriter&) = delete;

  // Objects are addressed by path ("/rank0/loader"); missing groups are created.
  void group(const std::string& path);
  void attr(const std::string& object, const std::string& name, int64_t value);
  void attr(const std::string& object, const std::string& name, const std::string& value);
  void floats(const std::string& dataset, const float* data, uint64_t n);  // 1-D float32
  // The same dataset, n elements produced by `fill` in order, a piece of at most
  // kStatePieceElems at a time (each piece a whole number of chunks but the last): a dataset
  // larger than memory never is in memory.
  void floats(const std::string& dataset, uint64_t n, const FloatFill& fill);

  // Closes, fsyncs and renames into place, then fsyncs the directory.
  void commit();

 private:
  void write_floats(const std::string& dataset, uint64_t n, const float* data, const FloatFill* fill);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True once a write inside HDF5 failed in this process and its file was abandoned open (see
// StateFileWriter). HDF5's exit handler would then flush that file again and can crash: main()
// ends such a process with _exit() after its error line.
bool state_file_abandoned();

class StateFileReader {
 public:
  // UserError naming the file (as a `noun`) when it is missing or unreadable (e.g. truncated).
  // The format is not checked here: the caller knows which formats it reads (format()).
  StateFileReader(std::string path, const std::string& noun);
  ~StateFileReader();
  StateFileReader(StateFileReader&&) noexcept;
  StateFileReader& operator=(StateFileReader&&) noexcept;

  const std::string& path() const { return path_; }
  // The root attribute "format"; "" when the file has none (not one of ours).
  std::string format() const;
  bool has(const std::string& object) const;
  bool has_attr(const std::string& object, const std::string& name) const;
  // UserError naming the file, the object and the attribute when absent or of another type.
  int64_t attr_int(const std::string& object, const std::string& name) const;
  std::string attr_str(const std::string& object, const std::string& name) const;
  uint64_t length(const std::string& dataset) const;  // elements of a 1-D dataset
  // Reads exactly n floats; UserError naming the file and dataset on a length mismatch or a
  // failed checksum.
  void floats(const std::string& dataset, float* out, uint64_t n) const;
  // Elements [first, first + count) of a 1-D float32 dataset (UserError naming the file and
  // dataset past its end, or on a failed checksum). Consecutive ranges of one dataset reuse its
  // open handle and cached chunks, so reading a dataset piece by piece reads each chunk once.
  void floats(const std::string& dataset, uint64_t first, float* out, uint64_t count) const;

 private:
  struct Impl;
  std::string path_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bcd
