// The training run: data, model, optimizer, the step loop, validation, metrics, samples.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/config.h"

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
};

// Runs the whole training described by `cfg` and writes <run_dir>/{config.toml, metrics.jsonl,
// model.h5, tokenizer.model, samples.txt}. Progress goes to stdout unless quiet.
TrainSummary run_training(Config cfg, bool quiet = false);

// Mean validation loss of a model over `batches` micro-batches of the validation split.
class LlamaModel;
class TokenDataset;
double evaluate_val_loss(const LlamaModel& model, const TokenDataset& ds, int64_t batch_size,
                         int64_t seq_len, int64_t batches);

// Sets torch's intra-op threads (0 = all cores).
void configure_threads(int64_t threads);

}  // namespace bcd
