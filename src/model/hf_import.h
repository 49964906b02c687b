// Loading a Hugging Face model directory (config.json + safetensors, single file or sharded)
// into our blocks, and the [model] init_from entry point the trainer calls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/llama.h"

namespace bcd {

struct HfImportInfo {
  std::string dtype;               // "bf16", "fp16" or "fp32": the dtype of most parameters in DIR
  std::vector<std::string> files;  // safetensors files read
  int64_t n_tensors = 0;
};

// Fills every parameter of `model` from the safetensors in `dir` (model.safetensors, else the
// shards listed by model.safetensors.index.json), converting bf16/fp16/fp32 to the model's
// dtype. Before any byte is written into the model every tensor is checked: present (else
// UserError naming the file and tensor), dtype bf16/fp16/fp32, shape equal to the model
// config's (else UserError naming file, tensor, expected and actual shape), and no tensor
// outside the model (rotary inv_freq buffers excepted; with tied embeddings lm_head.weight is
// accepted when equal to the embedding). config.json is not read here: `model` has the shape.
HfImportInfo import_hf_weights(LlamaModel& model, const std::string& dir);

// [model] init_from after LlamaModel::init_weights: "" leaves the model as it is; "hf:DIR"
// imports DIR (import_hf_weights); a .h5 path loads a bcdtrain weights file or checkpoint after
// checking that its stored shape (vocab_size, d_model, n_layers, heads, d_ff, qkv_bias,
// tie_embeddings) equals the model's, naming the first key that differs.
void load_initial_weights(LlamaModel& model, const std::string& init_from);

struct HfImportSummary {
  HfImportInfo info;
  std::string model_type;
  int64_t n_params = 0;
  std::string tokenizer;                     // where the tokenizer was copied; "" when DIR has none
  std::vector<std::string> tokenizer_files;  // every tokenizer file copied, `tokenizer` first
};

// `bcdtrain import`: reads DIR/config.json and the weights, writes a weights file at `out`
// (parent directories created) whose attributes keep what an export needs to reproduce the
// model: hf_config_json (config.json text), hf_dtype, hf_source. Copies DIR's tokenizer next to
// `out`: tokenizer.json and tokenizer.model, whichever it has, with tokenizer_config.json,
// special_tokens_map.json, generation_config.json and chat_template.jinja (data/tokenizer.h).
HfImportSummary import_hf_to_file(const std::string& dir, const std::string& out);

}  // namespace bcd
