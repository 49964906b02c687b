// Shared by the Hugging Face interop tests (test_hf_import.cpp, test_hf_export.cpp): tiny models
// of each supported kind and a minimal HF writer/reader whose names and layouts are spelled out
// independently of src/model/hf_weights.cpp.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <H5Cpp.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "model/weights.h"
#include "model/hf_config.h"
#include "model/hf_export.h"
#include "model/hf_import.h"
#include "model/llama.h"
#include "model/safetensors.h"
#include "base/config.h"
#include "base/error.h"
#include "model_test_helpers.h"
#include "test_util.h"

namespace bcd::hf_test {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline void expect_has(const std::string& text, const std::vector<std::string>& needles) {
  EXPECT_FALSE(text.empty()) << "no error";
  for (const auto& n : needles) EXPECT_NE(text.find(n), std::string::npos) << "missing '" << n << "' in: " << text;
}

// ---- Tiny models of each supported kind ----

struct Variant {
  std::string name, model_type;
  bool tie = false;
};
inline void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }
inline const Variant kVariants[] = {{"llama", "llama", false}, {"llama_tied", "llama", true}, {"qwen2", "qwen2", false},
                                    {"mistral", "mistral", false}};

// The model tests' small model (model_test_helpers.h) in the variant's family.
inline ModelConfig tiny(const Variant& v) {
  ModelConfig m = test::tiny_config();
  m.norm_eps = 1e-6;
  m.rope_theta = v.model_type == "qwen2" ? 1e6 : 10000.0;
  m.qkv_bias = v.model_type == "qwen2";
  m.tie_embeddings = v.tie;
  return m;
}

// A source model with every parameter (norms and biases too) away from its init value.
inline std::unique_ptr<LlamaModel> source_model(const ModelConfig& cfg, uint64_t seed) {
  auto m = std::make_unique<LlamaModel>(cfg);
  m->init_weights(seed);
  torch::NoGradGuard ng;
  torch::manual_seed(seed + 1);
  for (Block& b : m->blocks()) b.data().add_(torch::randn_like(b.data()) * 0.1);
  return m;
}

// ---- An independent minimal HF writer ----

// transformers' state_dict of the model, by hand: HF name -> our parameter.
inline std::vector<std::pair<std::string, torch::Tensor>> hf_state_dict(const LlamaModel& m) {
  const ModelConfig& c = m.config();
  std::vector<std::pair<std::string, torch::Tensor>> sd;
  sd.emplace_back("model.embed_tokens.weight", m.block(0).param("tok_embeddings"));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const Block& b = m.block(static_cast<int>(i) + 1);
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::pair<const char*, const char*> names[] = {
        {"input_layernorm.weight", "attn_norm"},      {"self_attn.q_proj.weight", "wq"},
        {"self_attn.k_proj.weight", "wk"},            {"self_attn.v_proj.weight", "wv"},
        {"self_attn.o_proj.weight", "wo"},            {"post_attention_layernorm.weight", "mlp_norm"},
        {"mlp.gate_proj.weight", "w_gate"},           {"mlp.up_proj.weight", "w_up"},
        {"mlp.down_proj.weight", "w_down"}};
    for (const auto& [hf, ours] : names) sd.emplace_back(p + hf, b.param(ours));
    if (c.qkv_bias) {
      sd.emplace_back(p + "self_attn.q_proj.bias", b.param("bq"));
      sd.emplace_back(p + "self_attn.k_proj.bias", b.param("bk"));
      sd.emplace_back(p + "self_attn.v_proj.bias", b.param("bv"));
    }
  }
  sd.emplace_back("model.norm.weight", m.block(m.n_blocks() - 1).param("norm"));
  if (!c.tie_embeddings) sd.emplace_back("lm_head.weight", m.block(m.n_blocks() - 1).param("output"));
  return sd;
}

inline const char* st_name(torch::ScalarType t) {
  switch (t) {
    case torch::kBFloat16: return "BF16";
    case torch::kFloat16: return "F16";
    case torch::kFloat32: return "F32";
    case torch::kInt64: return "I64";
    default: throw std::runtime_error("dtype");
  }
}

// One safetensors file, written byte by byte from the spec (no shared code with the module).
inline void write_st(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& ts) {
  json h = {{"__metadata__", {{"format", "pt"}}}};
  std::string data;
  for (const auto& [name, t] : ts) {
    torch::Tensor c = t.contiguous();
    const size_t begin = data.size();
    data.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
    h[name] = {{"dtype", st_name(c.scalar_type())}, {"shape", c.sizes().vec()}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = h.dump();
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  test::write_text(path, len + text + data);
}

inline json hf_config(const ModelConfig& m, const std::string& model_type) {
  json j = {{"architectures", {model_type == "qwen2" ? "Qwen2ForCausalLM" : model_type == "mistral" ? "MistralForCausalLM"
                                                                                                    : "LlamaForCausalLM"}},
            {"model_type", model_type},           {"vocab_size", m.vocab_size},
            {"hidden_size", m.d_model},           {"intermediate_size", m.d_ff},
            {"num_hidden_layers", m.n_layers},    {"num_attention_heads", m.n_heads},
            {"num_key_value_heads", m.n_kv_heads}, {"max_position_embeddings", m.max_seq_len},
            {"rms_norm_eps", m.norm_eps},         {"rope_theta", m.rope_theta},
            {"tie_word_embeddings", m.tie_embeddings}, {"hidden_act", "silu"},
            {"torch_dtype", "bfloat16"},          {"bos_token_id", 1},
            {"eos_token_id", 2}};
  if (model_type == "qwen2") j["use_sliding_window"] = false;
  if (model_type == "mistral") j["sliding_window"] = nullptr;
  return j;
}

struct HfDirOptions {
  torch::ScalarType dtype = torch::kFloat32;
  int shards = 1;  // 1: model.safetensors; else model-0000i-of-0000N + index
  std::function<void(std::vector<std::pair<std::string, torch::Tensor>>&)> edit_tensors;
  std::function<void(json&)> edit_config, edit_index;
};

inline HfDirOptions stored_as(torch::ScalarType dtype, int shards = 1) {
  HfDirOptions o;
  o.dtype = dtype;
  o.shards = shards;
  return o;
}

// A HF model directory for `m` (config.json, weights, tokenizer.json).
inline void write_hf_dir(const LlamaModel& m, const std::string& model_type, const std::string& dir, const HfDirOptions& o = {}) {
  fs::create_directories(dir);
  auto sd = hf_state_dict(m);
  for (auto& [name, t] : sd) t = t.detach().to(o.dtype);
  if (o.edit_tensors) o.edit_tensors(sd);
  json cfg = hf_config(m.config(), model_type);
  cfg["torch_dtype"] = o.dtype == torch::kBFloat16 ? "bfloat16" : o.dtype == torch::kFloat16 ? "float16" : "float32";
  if (o.edit_config) o.edit_config(cfg);
  test::write_text(dir + "/config.json", cfg.dump(2));
  // A tokenizer that loads and fits the model (import checks both): three pieces, one merge.
  test::write_text(dir + "/tokenizer.json", R"({"version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [], "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})");
  if (o.shards == 1) return write_st(dir + "/model.safetensors", sd);
  json wm = json::object();
  const size_t per = (sd.size() + o.shards - 1) / o.shards;
  for (int s = 0; s < o.shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, o.shards);
    std::vector<std::pair<std::string, torch::Tensor>> part;
    for (size_t i = s * per; i < std::min(sd.size(), (s + 1) * per); ++i) part.push_back(sd[i]), wm[sd[i].first] = name;
    write_st(dir + "/" + name, part);
  }
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", wm}};
  if (o.edit_index) o.edit_index(index);
  test::write_text(dir + "/model.safetensors.index.json", index.dump(2));
}

inline torch::Tensor logits_of(const LlamaModel& m) {
  torch::NoGradGuard ng;
  torch::manual_seed(5);
  return m.forward(torch::randint(m.config().vocab_size, {2, 11}, torch::kInt64));
}

// Every tensor of a HF directory: name -> (dtype, shape, bytes), through the index when sharded.
struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  bool operator==(const RawTensor& o) const { return dtype == o.dtype && shape == o.shape && bytes == o.bytes; }
};
inline std::map<std::string, RawTensor> read_hf_dir(const std::string& dir) {
  std::vector<std::string> files;
  if (fs::exists(dir + "/model.safetensors")) {
    files.push_back(dir + "/model.safetensors");
  } else {
    json idx = json::parse(test::read_text(dir + "/model.safetensors.index.json"));
    std::set<std::string> names;
    for (auto& [k, v] : idx["weight_map"].items()) names.insert(v.get<std::string>());
    for (const auto& n : names) files.push_back(dir + "/" + n);
  }
  std::map<std::string, RawTensor> out;
  for (const auto& f : files) {
    st::SafetensorsFile sf(f);
    for (const auto& t : sf.header().tensors) out[t.name] = {st::dtype_name(t.dtype), t.shape, sf.read(t)};
  }
  return out;
}

}  // namespace bcd::hf_test
