// Model weights file (<run_dir>/model.h5): every block's flat working buffer plus the config, in
// a state file (io/state_file.h: atomic write, checksummed datasets). Full training checkpoints
// (io/checkpoint.h: optimizer state, scheduler, data position) build on this layout.
//   /blocks/<block name>  float32 [numel]   (the block's flat buffer, padding included)
//   root attributes: format ("bcdtrain-weights"), version, config (TOML text), and any extra
//   string attributes the writer was given (an import from HF adds hf_config_json, hf_dtype,
//   hf_source). Training checkpoints (format "bcdtrain-checkpoint") are a superset of this
//   layout, so every reader here accepts them too.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/llama.h"

namespace bcd {

// Writes atomically: a temporary file in the same directory, fsync, rename.
void save_weights(const LlamaModel& model, const std::string& path, const std::string& config_toml,
                  const std::vector<std::pair<std::string, std::string>>& extra_attrs = {});

// Reads the config TOML stored in a weights file; UserError naming the file when unreadable.
std::string read_weights_config(const std::string& path);

// A root string attribute of a weights file; "" when the file lacks it.
std::string read_weights_attr(const std::string& path, const std::string& name);

// Loads every block's buffer into `model`; UserError naming the file and block on any mismatch
// (missing block, wrong size); the model is untouched unless every block checks out.
void load_weights(LlamaModel& model, const std::string& path);

}  // namespace bcd
