// <run_dir>/metrics.jsonl: one JSON object per logged step, flushed as written; the record of a
// step and the progress line built from the same figures.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include "base/progress.h"  // format_duration
#include "memory/stager.h"
#include "runtime/tensorboard.h"

namespace bcd {

class RunSetup;

class MetricsWriter {
 public:
  // Truncates the file (a new run) unless `append` (a resumed run). With `tensorboard`, every
  // record also goes to the TensorBoard events of the file's directory, written anew from the
  // file's records so far (runtime/tensorboard.h).
  MetricsWriter(const std::string& path, bool append = false, bool tensorboard = false);
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
  std::optional<EventFileWriter> events_;
};

// Keeps the records of a metrics file before `first_step` (a resumed run rewrites what follows).
// A torn last line (a killed run's) is cut; any other line that is not a record is a UserError
// naming the file and the line, and the file is left as it was.
void truncate_metrics(const std::string& path, int64_t first_step);

// What the loop measured of one step.
struct StepStats {
  int64_t step = 0;
  int unit = 0;                    // the active unit (index into RunSetup::units)
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0;         // since the previous record
  double flops = 0;                // this rank's FLOPs in this step (runtime/flops.h)
  double tflops = 0;               // this rank's achieved TFLOP/s since the previous record
  double elapsed_s = 0;            // since the first step started
  double eta_s = 0;                // to the last step, at the run's pace so far
  std::optional<double> val_loss;
  // Streamed frozen weights (memory.stream_weights), this step's: bytes copied host -> compute,
  // the training thread's wait for them, and the longest wait for one layer (block index).
  uint64_t stream_bytes = 0;
  uint64_t stream_uses = 0;
  double stream_stall_s = 0, stream_layer_stall_s = 0;
  int stream_stall_block = -1;
};

// The records of one run: metrics.jsonl keys (see README) from a step's figures and the run's
// optimizer, staging and memory state.
class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool append, bool tensorboard = false) : writer_(path, append, tensorboard) {}

  // Writes the step's record: staging since the previous record, totals, memory peaks, and on
  // the last step the whole accounting.
  void record(const StepStats& s, const RunSetup& run);
  // "step 20/500 | loss 7.0242 | lr 2.00e-03 | 6143 tok/s | ETA 2m19s | val 7.0366 | layers.2-3 (epoch 1)
  //  | stall 0.3 ms | compute 203 MiB, pinned 22.52 MiB, host 19.26 MiB": the stall so far and what
  // each memory tier holds now (tiers holding nothing left out)
  static std::string progress_line(const StepStats& s, const RunSetup& run);

  double checkpoint_s = 0;  // time spent writing checkpoints so far (recorded when > 0)

 private:
  MetricsWriter writer_;
  StagerStats logged_staging_;  // as of the last record
  double logged_exposed_s_ = 0;  // GradReducer's, as of the last record
};

// VmHWM / VmRSS of this process (bytes; 0 when /proc is unreadable).
uint64_t process_memory_bytes(const char* key);

}  // namespace bcd
