// Model weights file (<run_dir>/model.h5): every block's flat working buffer plus the config.
// Full training checkpoints (optimizer state, scheduler, data position) build on this layout.
//   /blocks/<block name>  float32 [numel]   (the block's flat buffer, padding included)
//   root attributes: format ("bcdtrain-weights"), version, config (TOML text)
#pragma once

#include <string>

#include "model/llama.h"

namespace bcd {

// Writes atomically: a temporary file in the same directory, fsync, rename.
void save_weights(const LlamaModel& model, const std::string& path, const std::string& config_toml);

// Reads the config TOML stored in a weights file; UserError naming the file when unreadable.
std::string read_weights_config(const std::string& path);

// Loads every block's buffer into `model`; UserError naming the file and block on any mismatch
// (missing block, wrong size); the model is untouched unless every block checks out.
void load_weights(LlamaModel& model, const std::string& path);

}  // namespace bcd
