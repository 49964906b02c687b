// What a training run tells when it ends: TrainSummary (run_training's result) and its file,
// <run_dir>/summary.json, written atomically however the run ends once its directory is claimed
// (scripts/batch.sh tabulates them; `train --resume auto` reads the status). The schema:
//   status          "finished", "stopped" (SIGINT/SIGTERM: checkpointed, then stopped) or "failed"
//   error           the failed run's error (status "failed" only)
//   steps           steps done; total_steps: train.steps
//   final_loss      the last step's training loss; final_val_loss the last validation's (or null)
//   tokens_per_s    over the whole run, validation excluded (null before a step)
//   peak_bytes      {compute, pinned, host, nvme}: each memory pool's peak
//   rss_peak_bytes  VmHWM of the process; stall_ms_total: staging stall; wall_s: the whole run
//   switch_wait_ms_total, switch_wait_ms_per_switch
//                   the compute side waiting for block switches' copies (CUDA: the compute
//                   stream's waits, event-timed; CPU: the training thread's)
//   stream_wait_ms_total, stream_wait_ms_per_layer
//                   the same for streamed layers' weights, per use of a streamed layer (null
//                   when no layer streams)
// Non-finite figures are null.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memory/stager.h"
#include "memory/weight_stream.h"

namespace bcd {

struct TrainSummary {
  int64_t steps = 0;
  double first_loss = 0, final_loss = 0;   // training loss of the first and last step
  std::optional<double> final_val_loss;
  double unigram_val_loss = 0;             // the dataset's unigram baseline, for comparison
  double tokens_per_s = 0;                 // over the whole run, validation excluded
  double wall_s = 0;
  int64_t num_params = 0;
  std::vector<std::string> samples;
  StagerStats staging;                     // block-state movement (BCD with the fused optimizer)
  std::optional<WeightStreamStats> stream; // frozen layers' weights streamed (when any is)
  nlohmann::json memory;                   // MemoryAccounting::to_json() at the end
  uint64_t rss_peak_bytes = 0;             // VmHWM of the process at the end
  int stopped_by_signal = 0;               // SIGINT/SIGTERM: checkpointed and stopped after `steps`
  bool opened_run_dir = false;             // the run's files were written: a resume refused before
                                           // leaves every file of the run as it was
};

// summary.json's object for a run that ended with `status` ("finished", "stopped", "failed")
// after `sum`, of `total_steps`, in `wall_s`.
nlohmann::json summary_json(const char* status, const TrainSummary& sum, int64_t total_steps, double wall_s);

// Writes <run_dir>/summary.json atomically (base/files.h).
void write_summary(const std::string& run_dir, const nlohmann::json& j);

// What a summary.json says of how its run ended.
struct SummaryStatus {
  std::string status;  // "finished", "stopped", "failed"
  int64_t steps = 0;   // 0 when the file does not say
};

// Reads `path` (a summary.json): nullopt when it is not a run summary (a JSON object with a string
// "status"); UserError naming it when it cannot be read.
std::optional<SummaryStatus> read_summary_status(const std::string& path);

}  // namespace bcd
