// Mapping of a Hugging Face config.json (llama, mistral, qwen2) onto ModelConfig.
#pragma once

#include <string>

#include "base/config.h"

namespace bcd {

// Fills the shape fields of `base` from the HF config at `path`; keeps bcdtrain-only fields
// (init_std, activation_checkpointing). UserError naming the file and key for a missing key,
// a wrong type or an unsupported model_type / feature (e.g. rope_scaling, sliding windows
// shorter than max_seq_len).
ModelConfig model_config_from_hf(const std::string& path, const ModelConfig& base);

// The shape fields stored in a bcdtrain weights file or checkpoint, onto `base`.
ModelConfig model_config_from_weights(const std::string& path, const ModelConfig& base);

// DIR of init_from = "hf:DIR"; "" for any other value.
std::string hf_init_dir(const std::string& init_from);

// The model's shape, from the first that is set (paths relative to the working directory):
// [model] hf_config; DIR/config.json when init_from = "hf:DIR"; the config stored in an
// init_from .h5 file; else the [model] fields as given.
ModelConfig resolve_model_config(const ModelConfig& cfg);

}  // namespace bcd
