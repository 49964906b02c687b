// The resume policies: what `train --resume` may change of a run's config, and what
// `train --resume auto` does with a run directory. Both read each key's Resume class, declared
// with the key (base/config.h), and the run's own files (checkpoints, config.toml, summary.json).
#pragma once

#include <cstdint>
#include <string>

#include "base/config.h"

namespace bcd {

// --resume CKPT with a config `now` against the checkpoint's `stored` one: keys the checkpoint's
// state is made of (the model's shape, the BCD units and their order, the working dtype, the
// optimizer, the seed) cannot change: UserError naming them, before anything runs. Keys that only
// change what the remaining steps compute (LR schedule, batch, Adam's hyper-parameters, data) are
// applied with a warning line: the run goes on, no longer as the uninterrupted one. The rest
// (where and how it runs: paths, logging, memory, threads, device, ranks) are applied silently.
// The ranks of the resume (`rank` of `world`; rank 0 says the warning) and of the run that wrote
// the checkpoint: a batch_size rescaled to the same global batch on another rank count is no change.
struct ResumeRanks {
  int rank = 0, world = 1;
  int stored_world = 1;
};
void check_resume_overrides(const std::string& ckpt, const Config& stored, const Config& now,
                            const ResumeRanks& ranks = {});

// A run keeps its tokenizer: a resume whose data (`data_tokenizer`, the tokenizer file of its
// first dataset) was tokenized with another tokenizer than the run's, the one in `run_dir`
// (copied there when the run started), would train on ids that now mean other pieces. UserError
// naming both, before anything in the run directory is written. A run directory without a
// tokenizer has nothing to compare with.
void check_resume_tokenizer(const std::string& run_dir, const std::string& data_tokenizer);

// --resume auto, for scripts that repeat one command line: the run directory of `given`
// (train.run_dir) goes on from its newest checkpoint when it holds a run of this config, starts
// when it holds none, and is left alone when its run has finished. A directory holding a run of
// another config, or a model.h5 whose summary cannot tell that the run finished, is a UserError
// naming the keys or the files: never overwritten.
struct AutoResume {
  enum Kind { kStart, kFinished, kResume } kind = kStart;
  Config config;           // what to run: `given` (kStart), the checkpoint's in run_dir (kResume)
  std::string checkpoint;  // kResume: the newest checkpoint
  int64_t steps = 0;       // kFinished: the steps the run took
};
AutoResume decide_resume_auto(const Config& given);

}  // namespace bcd
