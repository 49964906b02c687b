// The Hugging Face (transformers) names and layouts of our blocks' parameters, and the dtypes
// an HF checkpoint may store them in. Shared by the importer and the exporter.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "model/llama.h"
#include "model/safetensors.h"

namespace bcd {

// One tensor of a transformers LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM /
// Qwen3ForCausalLM state dict and the slot it fills. Linear weights are [out, in] in both (F.linear computes
// x W^T) and our RoPE is transformers' rotate_half, so no transpose or q/k permutation.
struct HfTensor {
  std::string name;             // e.g. "model.layers.0.self_attn.q_proj.weight"
  int block = 0;                // index into LlamaModel::blocks()
  std::string slot;             // e.g. "wq"
  std::vector<int64_t> shape;
  int64_t offset = 0;           // the slot's first element in its block's flat buffer
  int64_t numel() const;
};

// Every tensor of the model `cfg` describes, in transformers' state_dict order (embed, each
// layer's q/k/v/o, MLP and norms, final norm, lm_head unless tied), block by block: the model
// need not exist (an import or export streams between files).
std::vector<HfTensor> hf_tensor_map(const ModelConfig& cfg);
std::vector<HfTensor> hf_tensor_map(const LlamaModel& model);  // of model.config()

// Tensors transformers keeps as buffers in some older checkpoints; an importer skips them.
bool hf_ignored_tensor(const std::string& name);

// Dtypes a model may be stored in: "bf16", "fp16", "fp32" <-> safetensors <-> torch <->
// config.json torch_dtype ("bfloat16", "float16", "float32").
bool hf_float_dtype(st::Dtype d);
torch::ScalarType torch_dtype_of(st::Dtype d);
std::string short_dtype_name(st::Dtype d);
// UserError naming `what` for anything but bf16, fp16, fp32.
st::Dtype parse_short_dtype(const std::string& name, const std::string& what);
std::string hf_torch_dtype_name(st::Dtype d);
bool dtype_from_hf_torch_dtype(const std::string& name, st::Dtype& out);

std::string format_shape(const std::vector<int64_t>& shape);  // "[4096, 11008]"

}  // namespace bcd
