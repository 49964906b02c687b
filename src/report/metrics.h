// <run_dir>/metrics.jsonl: one JSON object per logged step, flushed as written; the record of a
// step and the progress line built from the same figures.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/progress.h"  // format_duration
#include "memory/stager.h"
#include "memory/tier.h"
#include "memory/weight_stream.h"
#include "report/tensorboard.h"

namespace bcd {

class MetricsWriter {
 public:
  // Truncates the file (a new run) unless `append` (a resumed run). With `tensorboard`, every
  // record also goes to the TensorBoard events of the file's directory, written anew from the
  // file's records so far (report/tensorboard.h).
  MetricsWriter(const std::string& path, bool append = false, bool tensorboard = false);
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
  std::optional<EventFileWriter> events_;
};

// The records of a metrics file, in order: each non-blank line that is a JSON object with an
// integer "step" (its line number and text kept). One rule for every reader that rewrites from
// them (a resume's truncation, TensorBoard's replay): a torn last line (a killed run's) is left
// out; any other line that is not a record is a UserError naming the file and the line, ending
// with `then` (what the user does next, what was left as it was). A missing file has none.
struct MetricsLine {
  int64_t line = 0;
  int64_t step = 0;
  std::string text;
  nlohmann::json record;
};
std::vector<MetricsLine> read_metrics_lines(const std::string& path, const std::string& then);

// Keeps the records of a metrics file before `first_step` (a resumed run rewrites what follows).
// A torn last line (a killed run's) is cut; any other line that is not a record is a UserError
// naming the file and the line, and the file is left as it was.
void truncate_metrics(const std::string& path, int64_t first_step);

// Everything a step's record says, as plain figures: the loop fills in what it measured, and the
// run's parts (optimizer, stager, streamed weights, ranks, memory accounting) add theirs
// (runtime/step_report.h). The writer sees nothing else of the run.
struct StepReport {
  // The loop's.
  int64_t step = 0;
  int64_t steps = 0;               // train.steps
  int unit = 0;                    // the active unit (index into the run's units)
  double loss = 0, lr = 0, grad_norm = 0;
  int64_t tokens = 0;              // trained so far, all ranks
  double tokens_per_s = 0;         // since the previous record
  double flops = 0;                // this rank's FLOPs in this step (runtime/flops.h)
  double tflops = 0;               // this rank's achieved TFLOP/s since the previous record
  std::optional<double> peak_tflops;  // the device's, for the MFU (unknown: null)
  double elapsed_s = 0;            // since the first step started
  double eta_s = 0;                // to the last step, at the run's pace so far
  std::optional<double> val_loss;
  // Streamed frozen weights (memory.stream_weights), this step's: bytes copied host -> compute,
  // the training thread's wait for them, and the longest wait for one layer (its block's name).
  uint64_t stream_bytes = 0;
  uint64_t stream_uses = 0;
  double stream_stall_s = 0, stream_layer_stall_s = 0;
  std::string stream_stall_block;  // "" when no layer waited

  // BCD's visit (absent without BCD).
  struct Visit {
    std::string block;
    uint64_t epoch = 0;
    uint64_t step_in_visit = 0;
  };
  std::optional<Visit> visit;
  // The optimizer's state: all of it, the active unit's moments, and each unit's (by name, at
  // the start of a visit); the staging totals (block optimizer only).
  int64_t optim_state_bytes = 0;
  std::optional<int64_t> block_state_bytes;
  std::vector<std::pair<std::string, int64_t>> state_bytes_by_block;
  std::optional<StagerStats> staging;
  std::optional<WeightStreamStats> stream_totals;  // when layers stream
  // Data parallel: the gradient's trip over the ranks, totals.
  struct Comm {
    uint64_t bytes_sent = 0;
    double exposed_s = 0;              // the host waiting for collectives (sharded: the gather too)
    std::optional<double> gather_s;    // sharded state: the updated weights' all-gather
    int64_t buckets = 0, buckets_in_backward = 0, bucket_rebuilds = 0;
    int64_t forward_ahead = 0;         // steps whose frozen forward ran behind the wire
  };
  std::optional<Comm> comm;
  // Memory: each pool's peak and what it holds now (compute, pinned, host, nvme), the process's
  // VmHWM, device values read by the host so far, the CUDA allocator's view, and on the last step
  // the whole accounting (MemoryAccounting::to_json()).
  std::array<uint64_t, kNumPools> pool_peak_bytes{}, pool_bytes{};  // by Pool
  uint64_t rss_peak_bytes = 0;
  uint64_t host_reads = 0;
  struct Cuda {
    uint64_t peak_allocated = 0, peak_reserved = 0;
    std::optional<uint64_t> used;
  };
  std::optional<Cuda> cuda;
  nlohmann::json accounting;  // null but on the last step
};

// The records of one run: metrics.jsonl keys (see README) from each step's report; what moved
// since the previous record (staging, exposed communication) is counted here.
class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool append, bool tensorboard = false) : writer_(path, append, tensorboard) {}

  // Writes the step's record: staging since the previous record, totals, memory peaks, and on
  // the last step the whole accounting.
  void record(const StepReport& s);
  // "step 20/500 | loss 7.0242 | lr 2.00e-03 | 6143 tok/s | ETA 2m19s | val 7.0366 | layers.2-3 (epoch 1)
  //  | stall 0.3 ms | compute 203 MiB, pinned 22.52 MiB, host 19.26 MiB": the stall so far and what
  // each memory tier holds now (tiers holding nothing left out)
  static std::string progress_line(const StepReport& s);

  double checkpoint_s = 0;  // time spent writing checkpoints so far (recorded when > 0)

 private:
  MetricsWriter writer_;
  StagerStats logged_staging_;  // as of the last record
  double logged_exposed_s_ = 0;  // as of the last record
};

// VmHWM / VmRSS of this process (bytes; 0 when /proc is unreadable).
uint64_t process_memory_bytes(const char* key);

}  // namespace bcd
