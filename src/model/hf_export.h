// Writing a model as a Hugging Face directory that transformers loads: config.json plus
// model.safetensors, or shards model-0000i-of-0000N.safetensors with model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/llama.h"
#include "model/safetensors.h"

namespace bcd {

struct HfExportOptions {
  std::string checkpoint;                  // bcdtrain weights file or training checkpoint (.h5)
  std::string out_dir;                     // created if absent
  std::string dtype;                       // bf16, fp16, fp32; "" = the dtype it was imported in, else bf16
  uint64_t shard_bytes = 5'000'000'000;    // transformers' default max_shard_size ("5GB")
};

struct HfExportReport {
  std::string dtype;                       // bf16, fp16 or fp32
  std::string model_type;                  // llama, mistral or qwen2
  std::vector<std::string> files;          // every file written, config.json first
  uint64_t tensor_bytes = 0;               // sum of the tensors' bytes (the index's total_size)
  std::string tokenizer;                   // where the tokenizer was copied; "" when none
};

// `bcdtrain export`: loads the checkpoint (config from its stored TOML), then export_hf_model.
// config.json starts from the imported one when the file has it (attribute hf_config_json, or
// the run's [model] hf_config file), so its other fields survive a round trip. Copies the
// tokenizer beside the checkpoint (or in its run directory): tokenizer.json and tokenizer.model,
// whichever are there, with the Hugging Face config files that came with them.
HfExportReport export_hf(const HfExportOptions& opt);

// Writes `model` into out_dir. Each file goes to a temporary name, is fsynced and renamed;
// stale files of a previous export (shards of another count) are removed at the end. An
// existing out_dir holding anything but a previous bcdtrain export is a UserError, untouched.
HfExportReport export_hf_model(const LlamaModel& model, const std::string& out_dir, st::Dtype dtype,
                               uint64_t shard_bytes, const std::string& base_config_json);

// config.json for `m`: base_config_json's keys kept (when it describes the same architecture),
// the shape keys set from `m`, torch_dtype from `dtype`. Qwen2 when the model has q/k/v biases,
// else the base's model_type (llama, mistral), else llama.
std::string hf_config_json(const ModelConfig& m, const std::string& base_config_json, st::Dtype dtype);

}  // namespace bcd
