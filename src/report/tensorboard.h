// TensorBoard event files of a run's metrics (<run_dir>/tensorboard/events.out.tfevents.*): the
// scalars of every metrics.jsonl record, so a run sits beside other trainers' runs in the
// dashboard users already have. Written directly: TFRecord framing (length, masked CRC-32C of
// the length, data, masked CRC-32C of the data) around Event protobufs encoded by hand (no
// protobuf library: LibTorch's bundled one is the known clash).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace bcd {

// CRC-32C (Castagnoli) of `n` bytes, and the masked form TFRecord stores.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// The scalars of one metrics.jsonl record, as TensorBoard tags: every finite number but "step",
// nested objects flattened with "/" ("state_bytes_by_block/layer.0"); booleans, strings and
// nulls (an unknown MFU) left out.
std::vector<std::pair<std::string, double>> metrics_scalars(const nlohmann::json& record);

// One event file, created afresh (its first record the file_version event); every add_scalars
// is one Event flushed to the file.
class EventFileWriter {
 public:
  // <dir>/events.out.tfevents.<seconds>.<host>.<pid>.bcdtrain; UserError naming it when it cannot
  // be written.
  explicit EventFileWriter(const std::string& dir);
  // `wall_time`: seconds since the epoch; < 0 (the default) for now.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values, double wall_time = -1);
  const std::string& path() const { return path_; }
  int64_t events() const { return events_; }  // add_scalars calls so far

 private:
  void write_record(const std::string& data);

  std::string path_;
  std::ofstream out_;
  int64_t events_ = 0;
};

// <run_dir>/tensorboard written anew from <run_dir>/metrics.jsonl: the event files bcdtrain wrote
// there before are replaced by one holding each record's scalars at its step, so a resumed run
// (whose metrics.jsonl was cut back to its checkpoint) has no step twice. Returns the writer,
// open for the records that follow. A torn last line of metrics.jsonl (a killed run's) is left
// out; any other line that is not a record is a UserError naming it, and the event files there
// stay as they were.
EventFileWriter open_tensorboard(const std::string& run_dir);

}  // namespace bcd
