// HF config.json reader: the fields of LlamaConfig / MistralConfig / Qwen2Config we support.
#include "model/hf_config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "model/weights.h"
#include "base/error.h"

namespace bcd {

namespace {

using json = nlohmann::json;

template <class T>
T get_key(const json& j, const std::string& path, const char* key) {
  if (!j.contains(key)) user_error("{}: missing key \"{}\"", path, key);
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    user_error("{}: key \"{}\" has the wrong type ({})", path, key, j.at(key).type_name());
  }
}

template <class T>
T get_or(const json& j, const std::string& path, const char* key, T dflt) {
  if (!j.contains(key) || j.at(key).is_null()) return dflt;
  return get_key<T>(j, path, key);
}

}  // namespace

ModelConfig model_config_from_hf(const std::string& path, const ModelConfig& base) {
  std::ifstream in(path);
  if (!in) user_error("{}: cannot open HF config ([model] hf_config, or the config.json of init_from)", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    user_error("{}: invalid JSON: {}", path, e.what());
  }
  if (!j.is_object()) user_error("{}: expected a JSON object", path);
  const std::string type = get_key<std::string>(j, path, "model_type");
  if (type != "llama" && type != "mistral" && type != "qwen2")
    user_error("{}: unsupported model_type \"{}\" (expected llama, mistral or qwen2)", path, type);
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    user_error("{}: rope_scaling is not supported (expected null)", path);
  const std::string act = get_or<std::string>(j, path, "hidden_act", "silu");
  if (act != "silu") user_error("{}: hidden_act \"{}\" is not supported (expected silu)", path, act);

  ModelConfig m = base;
  m.hf_config = path;
  m.vocab_size = get_key<int64_t>(j, path, "vocab_size");
  m.d_model = get_key<int64_t>(j, path, "hidden_size");
  m.n_layers = get_key<int64_t>(j, path, "num_hidden_layers");
  m.n_heads = get_key<int64_t>(j, path, "num_attention_heads");
  m.n_kv_heads = get_or<int64_t>(j, path, "num_key_value_heads", m.n_heads);
  m.d_ff = get_key<int64_t>(j, path, "intermediate_size");
  m.max_seq_len = get_or<int64_t>(j, path, "max_position_embeddings", 2048);
  m.rope_theta = get_or<double>(j, path, "rope_theta", 10000.0);
  m.norm_eps = get_or<double>(j, path, "rms_norm_eps", 1e-6);
  m.tie_embeddings = get_or<bool>(j, path, "tie_word_embeddings", false);
  // Qwen2 has q/k/v biases; Llama's attention_bias also adds one on o_proj, which we lack.
  m.qkv_bias = type == "qwen2";
  if (type != "qwen2" && get_or<bool>(j, path, "attention_bias", false))
    user_error("{}: attention_bias = true (biases on q, k, v and o_proj) is not supported (expected false)", path);
  if (get_or<bool>(j, path, "mlp_bias", false))
    user_error("{}: mlp_bias = true is not supported (expected false)", path);
  if (j.contains("head_dim") && !j["head_dim"].is_null() &&
      get_key<int64_t>(j, path, "head_dim") != m.d_model / std::max<int64_t>(m.n_heads, 1))
    user_error("{}: head_dim != hidden_size / num_attention_heads is not supported", path);
  if (type == "mistral" || type == "qwen2") {
    const bool use_sw = type == "qwen2" ? get_or<bool>(j, path, "use_sliding_window", false) : true;
    if (use_sw && j.contains("sliding_window") && !j["sliding_window"].is_null()) {
      const int64_t w = get_key<int64_t>(j, path, "sliding_window");
      if (w < m.max_seq_len)
        user_error("{}: sliding_window {} < max_position_embeddings {} is not supported", path, w,
                   m.max_seq_len);
    }
  }
  for (const auto& [key, size] : {std::pair<const char*, int64_t>{"hidden_size", m.d_model}, {"num_hidden_layers", m.n_layers},
                                  {"num_attention_heads", m.n_heads}, {"vocab_size", m.vocab_size},
                                  {"intermediate_size", m.d_ff}})
    if (size <= 0) user_error("{}: {} must be positive, got {}", path, key, size);
  if (m.d_model % m.n_heads != 0)
    user_error("{}: hidden_size ({}) must be divisible by num_attention_heads ({})", path, m.d_model,
               m.n_heads);
  if (m.n_kv_heads <= 0 || m.n_heads % m.n_kv_heads != 0)
    user_error("{}: num_attention_heads ({}) must be divisible by num_key_value_heads ({})", path,
               m.n_heads, m.n_kv_heads);
  if (m.head_dim() % 2 != 0)
    user_error("{}: hidden_size / num_attention_heads = {} must be even for rotary embeddings", path, m.head_dim());
  if (m.max_seq_len <= 0) user_error("{}: max_position_embeddings must be positive, got {}", path, m.max_seq_len);
  if (!(m.rope_theta > 0) || !std::isfinite(m.rope_theta))
    user_error("{}: rope_theta must be a positive number, got {}", path, m.rope_theta);
  if (!(m.norm_eps > 0) || !std::isfinite(m.norm_eps))
    user_error("{}: rms_norm_eps must be a positive number, got {}", path, m.norm_eps);
  return m;
}

ModelConfig model_config_from_weights(const std::string& path, const ModelConfig& base) {
  Config stored;
  apply_config_text(stored, read_weights_config(path), path);
  const ModelConfig& f = stored.model;
  ModelConfig m = base;
  m.vocab_size = f.vocab_size;
  m.d_model = f.d_model;
  m.n_layers = f.n_layers;
  m.n_heads = f.n_heads;
  m.n_kv_heads = f.n_kv_heads;
  m.d_ff = f.d_ff;
  m.max_seq_len = f.max_seq_len;
  m.rope_theta = f.rope_theta;
  m.norm_eps = f.norm_eps;
  m.qkv_bias = f.qkv_bias;
  m.tie_embeddings = f.tie_embeddings;
  return m;
}

std::string hf_init_dir(const std::string& init_from) {
  return init_from.rfind("hf:", 0) == 0 ? init_from.substr(3) : "";
}

ModelConfig resolve_model_config(const ModelConfig& cfg) {
  if (!cfg.hf_config.empty()) return model_config_from_hf(cfg.hf_config, cfg);
  const std::string dir = hf_init_dir(cfg.init_from);
  if (!dir.empty()) return model_config_from_hf(dir + "/config.json", cfg);
  if (!cfg.init_from.empty()) return model_config_from_weights(cfg.init_from, cfg);
  return cfg;
}

}  // namespace bcd
