// The training run: set-up (runtime/run_setup.h), the step loop, validation, outputs.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "report/metrics.h"
#include "runtime/run_setup.h"
#include "report/summary.h"

namespace bcd {

// Runs the whole training described by `cfg` and writes <run_dir>/{config.toml, metrics.jsonl,
// model.h5, tokenizer.model, samples.txt}, and checkpoints/step-N.h5 every train.checkpoint_every
// steps, at the end, and on SIGINT/SIGTERM (then it stops: runtime/run_guard.h). Progress goes
// to stdout unless quiet. Whichever way it ends once the run directory is claimed, it writes
// <run_dir>/summary.json (report/summary.h) — except a resume refused before it wrote anything,
// which leaves the run's files as they were. With train.plot, a finished or stopped run draws its
// plots into <run_dir>/plots (report/plots.h). `resume_from`: a checkpoint file to continue from, exactly.
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
