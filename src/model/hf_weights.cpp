// HF tensor names of our block slots, and dtype names.
#include "model/hf_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"

namespace bcd {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; so is this host's");

int64_t HfTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<HfTensor> hf_tensor_map(const LlamaModel& model) { return hf_tensor_map(model.config()); }

std::vector<HfTensor> hf_tensor_map(const ModelConfig& cfg) {
  std::vector<std::vector<SlotShape>> slots;
  std::vector<BlockShape> shapes;
  for (int b = 0; b < model_block_count(cfg); ++b) {
    slots.push_back(model_block_slots(cfg, b));
    shapes.push_back(layout_block(model_block_name(cfg, b), slots.back()));
  }
  std::vector<HfTensor> out;
  auto add = [&](const std::string& name, int block, const std::string& slot) {
    const std::vector<SlotShape>& in = slots[static_cast<size_t>(block)];
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].name == slot) return out.push_back({name, block, slot, in[i].shape, shapes[static_cast<size_t>(block)].offsets[i]});
    BCD_CHECK(false, "block {} has no slot {}", shapes[static_cast<size_t>(block)].name, slot);
  };
  add("model.embed_tokens.weight", 0, slot::kTokEmbeddings);
  for (int64_t i = 0; i < cfg.n_layers; ++i) {
    const int b = static_cast<int>(i) + 1;
    const std::string p = fmt::format("model.layers.{}.", i);
    add(p + "self_attn.q_proj.weight", b, slot::kWq);
    if (cfg.qkv_bias) add(p + "self_attn.q_proj.bias", b, slot::kBq);
    add(p + "self_attn.k_proj.weight", b, slot::kWk);
    if (cfg.qkv_bias) add(p + "self_attn.k_proj.bias", b, slot::kBk);
    add(p + "self_attn.v_proj.weight", b, slot::kWv);
    if (cfg.qkv_bias) add(p + "self_attn.v_proj.bias", b, slot::kBv);
    add(p + "self_attn.o_proj.weight", b, slot::kWo);
    if (cfg.qk_norm) {  // Qwen3
      add(p + "self_attn.q_norm.weight", b, slot::kQNorm);
      add(p + "self_attn.k_norm.weight", b, slot::kKNorm);
    }
    add(p + "mlp.gate_proj.weight", b, slot::kWGate);
    add(p + "mlp.up_proj.weight", b, slot::kWUp);
    add(p + "mlp.down_proj.weight", b, slot::kWDown);
    add(p + "input_layernorm.weight", b, slot::kAttnNorm);
    add(p + "post_attention_layernorm.weight", b, slot::kMlpNorm);
  }
  const int head = model_block_count(cfg) - 1;
  add("model.norm.weight", head, slot::kNorm);
  if (!cfg.tie_embeddings) add("lm_head.weight", head, slot::kOutput);
  return out;
}

bool hf_ignored_tensor(const std::string& name) {
  const std::string suffix = ".rotary_emb.inv_freq";
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ---- Dtypes ----

bool hf_float_dtype(st::Dtype d) { return d == st::Dtype::kBF16 || d == st::Dtype::kF16 || d == st::Dtype::kF32; }

torch::ScalarType torch_dtype_of(st::Dtype d) {
  switch (d) {
    case st::Dtype::kBF16: return torch::kBFloat16;
    case st::Dtype::kF16: return torch::kFloat16;
    case st::Dtype::kF32: return torch::kFloat32;
    default: BCD_CHECK(false, "no torch dtype for safetensors {}", st::dtype_name(d));
  }
}

std::string short_dtype_name(st::Dtype d) {
  switch (d) {
    case st::Dtype::kBF16: return "bf16";
    case st::Dtype::kF16: return "fp16";
    case st::Dtype::kF32: return "fp32";
    default: return st::dtype_name(d);
  }
}

st::Dtype parse_short_dtype(const std::string& name, const std::string& what) {
  if (name == "bf16") return st::Dtype::kBF16;
  if (name == "fp16") return st::Dtype::kF16;
  if (name == "fp32") return st::Dtype::kF32;
  user_error("{}: expected bf16, fp16 or fp32, got \"{}\"", what, name);
}

std::string hf_torch_dtype_name(st::Dtype d) {
  switch (d) {
    case st::Dtype::kBF16: return "bfloat16";
    case st::Dtype::kF16: return "float16";
    default: return "float32";
  }
}

bool dtype_from_hf_torch_dtype(const std::string& name, st::Dtype& out) {
  if (name == "bfloat16") return out = st::Dtype::kBF16, true;
  if (name == "float16") return out = st::Dtype::kF16, true;
  if (name == "float32") return out = st::Dtype::kF32, true;
  return false;
}

std::string format_shape(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace bcd
