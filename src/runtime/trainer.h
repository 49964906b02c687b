// The training run: set-up (runtime/run_setup.h), the step loop, validation, outputs.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memory/stager.h"
#include "runtime/metrics.h"
#include "runtime/run_setup.h"

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
  nlohmann::json memory;                   // MemoryAccounting::to_json() at the end
  uint64_t rss_peak_bytes = 0;             // VmHWM of the process at the end
  int stopped_by_signal = 0;               // SIGINT/SIGTERM: checkpointed and stopped after `steps`
};

// Runs the whole training described by `cfg` and writes <run_dir>/{config.toml, metrics.jsonl,
// model.h5, tokenizer.model, samples.txt}, and checkpoints/step-N.h5 every train.checkpoint_every
// steps, at the end, and on SIGINT/SIGTERM (then it stops after the current step). Progress goes
// to stdout unless quiet. Whichever way it ends once the run directory is claimed, it writes
// <run_dir>/summary.json: status (finished, stopped by a signal, or failed with its error),
// steps done of total_steps, final loss and validation loss, tokens/s, peak bytes per memory
// pool, peak RSS, staging stall, wall time. With train.plot, a finished or stopped run draws its
// plots into <run_dir>/plots (runtime/plots.h). `resume_from`: a checkpoint file to continue from, exactly.
// The run directory is locked for the run (a second run on it is refused naming the holder's
// PID), and a fresh run into a directory holding an earlier run's checkpoints is refused
// unless `overwrite`, which deletes them first.
TrainSummary run_training(Config cfg, bool quiet = false, const std::string& resume_from = "", bool overwrite = false);

// Mean validation loss of a model over `batches` micro-batches of the validation split; with a
// process group of several ranks, the batches are shared out and the sum reduced.
double evaluate_val_loss(const LlamaModel& model, const TokenDataset& ds, int64_t batch_size,
                         int64_t seq_len, int64_t batches, ProcessGroup* pg = nullptr);
// The same over a mixture's validation splits, drawn with its weights ([data] paths).
double evaluate_val_loss(const LlamaModel& model, const std::vector<DataSource>& sources, int64_t batch_size,
                         int64_t seq_len, int64_t batches, ProcessGroup* pg = nullptr);

}  // namespace bcd
