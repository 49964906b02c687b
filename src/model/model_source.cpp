// Where a model's shape comes from (hf_config.h: resolve_model_config): [model] hf_config, the
// config.json of init_from = "hf:DIR", or the config stored in an init_from weights file. Apart
// from hf_config.cpp, whose config.json reader builds without LibTorch (tests/fuzz).
#include "base/config.h"
#include "model/hf_config.h"
#include "model/weights.h"

namespace bcd {

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
  m.d_head = f.d_head;
  m.d_ff = f.d_ff;
  m.max_seq_len = f.max_seq_len;
  m.rope_theta = f.rope_theta;
  m.rope_type = f.rope_type;
  m.rope_factor = f.rope_factor;
  m.rope_low_freq_factor = f.rope_low_freq_factor;
  m.rope_high_freq_factor = f.rope_high_freq_factor;
  m.rope_original_max_len = f.rope_original_max_len;
  m.rope_beta_fast = f.rope_beta_fast;
  m.rope_beta_slow = f.rope_beta_slow;
  m.rope_attention_factor = f.rope_attention_factor;
  m.rope_truncate = f.rope_truncate;
  m.norm_eps = f.norm_eps;
  m.qkv_bias = f.qkv_bias;
  m.qk_norm = f.qk_norm;
  m.tie_embeddings = f.tie_embeddings;
  return m;
}

ModelConfig resolve_model_config(const ModelConfig& cfg) {
  if (!cfg.hf_config.empty()) return model_config_from_hf(cfg.hf_config, cfg);
  const std::string dir = hf_init_dir(cfg.init_from);
  if (!dir.empty()) return model_config_from_hf(dir + "/config.json", cfg);
  if (!cfg.init_from.empty()) return model_config_from_weights(cfg.init_from, cfg);
  return cfg;
}

}  // namespace bcd
