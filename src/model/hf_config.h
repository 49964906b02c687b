// Mapping of a Hugging Face config.json (llama, mistral, qwen2, qwen3; transformers 4 and 5 forms) onto ModelConfig.
// hf_config.cpp reads config.json without LibTorch (its fuzz target builds it alone);
// model_source.cpp holds the two functions that read weights files.
#pragma once

#include <string>

#include "base/config.h"

namespace bcd {

// The Hugging Face model families (config.json model_type) bcdtrain builds.
enum class HfFamily { kLlama, kMistral, kQwen2, kQwen3 };
template <> struct Choices<HfFamily> { static constexpr const char* names[] = {"llama", "mistral", "qwen2", "qwen3"}; };

// Fills the shape fields of `base` from the HF config at `path` (RoPE from rope_parameters or
// rope_theta + rope_scaling); keeps bcdtrain-only fields (init_std, activation_checkpointing).
// UserError naming the file and key for a missing key, a wrong type, an unsupported model_type,
// rope_type or feature that changes the math (sliding windows shorter than the context,
// soft-capping, partial rotary, ...); keys it neither reads nor knows to be inert are named in
// one warning line on stderr (once per file and process).
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
