// Mapping of a Hugging Face config.json (llama, mistral, qwen2) onto ModelConfig.
#pragma once

#include <string>

#include "runtime/config.h"

namespace bcd {

// Fills the shape fields of `base` from the HF config at `path`; keeps bcdtrain-only fields
// (init_std, activation_checkpointing). UserError naming the file and key for a missing key,
// a wrong type or an unsupported model_type / feature (e.g. rope_scaling, sliding windows
// shorter than max_seq_len).
ModelConfig model_config_from_hf(const std::string& path, const ModelConfig& base);

// Resolves [model] hf_config when set (relative to the working directory).
ModelConfig resolve_model_config(const ModelConfig& cfg);

}  // namespace bcd
