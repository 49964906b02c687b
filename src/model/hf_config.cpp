// HF config.json reader: the fields of LlamaConfig / MistralConfig / Qwen2Config / Qwen3Config
// we support, in both forms transformers writes (4.x: top-level rope_theta and rope_scaling;
// 5.x: rope_parameters). Every key is read, known to be inert, refused, or named in a warning.
#include "model/hf_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <set>
#include <type_traits>

#include "base/error.h"
#include "base/model_shape.h"
#include "base/json_read.h"

namespace bcd {

namespace {

using json = nlohmann::json;

// The HF families we build, and what differs between them (transformers' config defaults).
struct Family {
  HfFamily family;
  bool qkv_bias, qk_norm;
  int64_t default_kv_heads;    // when num_key_value_heads is absent (0: num_attention_heads)
  int64_t default_head_dim;    // when head_dim is absent (0: hidden_size / num_attention_heads)
  int64_t default_max_pos;     // when max_position_embeddings is absent
  int64_t default_window;      // mistral: sliding_window when absent (0: none)
  bool window_switch;          // qwen: sliding_window counts only with use_sliding_window
};
constexpr Family kFamilies[] = {
    {HfFamily::kLlama, false, false, 0, 0, 2048, 0, false},
    {HfFamily::kMistral, false, false, 8, 0, 4096 * 32, 4096, false},
    {HfFamily::kQwen2, true, false, 32, 0, 32768, 0, true},
    {HfFamily::kQwen3, false, true, 32, 128, 32768, 0, true},
};

// Keys that never change what the model computes (ids, dtypes, caching, initialisation,
// generation defaults and bookkeeping that transformers writes into every config.json).
const std::set<std::string>& inert_keys() {
  static const std::set<std::string> keys = {
      "architectures", "transformers_version", "torch_dtype", "dtype", "bos_token_id", "eos_token_id",
      "pad_token_id", "sep_token_id", "decoder_start_token_id", "use_cache", "initializer_range", "pretraining_tp",
      "_name_or_path", "name_or_path", "output_attentions", "output_hidden_states", "return_dict", "use_return_dict",
      "torchscript", "is_encoder_decoder", "is_decoder", "add_cross_attention", "cross_attention_hidden_size",
      "tie_encoder_decoder", "chunk_size_feed_forward", "id2label", "label2id", "num_labels", "problem_type",
      "tokenizer_class", "prefix", "task_specific_params", "finetuning_task", "pruned_heads", "use_bfloat16",
      "tf_legacy_loss", "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
      "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
      "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
      "output_scores", "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
      "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
      "_attn_implementation_autoset", "model_type", "is_llama_config",
      "transformers.js_config",
  };
  return keys;
}

// Keys that change the math in ways we do not implement, with the value that means "off"
// (null always does): present with any other value, they are refused by name.
const std::vector<std::pair<const char*, json>>& refused_keys() {
  static const std::vector<std::pair<const char*, json>> keys = {
      {"attn_logit_softcapping", nullptr},  {"final_logit_softcapping", nullptr}, {"query_pre_attn_scalar", nullptr},
      {"logits_scaling", 1.0},              {"embedding_multiplier", 1.0},       {"residual_multiplier", 1.0},
      {"attention_multiplier", nullptr},    {"use_qk_norm", false},              {"no_rope_layers", nullptr},
      {"quantization_config", nullptr},     {"num_experts", 0},                  {"num_local_experts", 0},
      {"num_experts_per_tok", 0},           {"use_mrope", false},                {"mrope_section", nullptr},
      {"use_parallel_residual", false},     {"qk_layernorm", false},             {"auto_map", nullptr},
      {"rope_interleaved", false},  // nanotron's (SmolLM2 writes false): pairs (2i, 2i+1), not halves
  };
  return keys;
}

bool is_off(const json& value, const json& off) {
  if (value.is_null() || value == off) return true;
  if (value.is_number() && off.is_number()) return value.get<double>() == off.get<double>();
  return (value.is_boolean() && !value.get<bool>() && off.is_number() && off.get<double>() == 0);
}

// A config.json and the keys read from it so far.
class HfReader {
 public:
  HfReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {}
  const std::string& path() const { return path_; }
  bool has(const char* key) {  // present and not null
    read_.insert(key);
    return j_.contains(key) && !j_.at(key).is_null();
  }
  bool present(const char* key) {  // null included
    read_.insert(key);
    return j_.contains(key);
  }
  const json& at(const char* key) { return read_.insert(key), j_.at(key); }

  template <class T>
  T get(const char* key) {
    if (!has(key)) user_error("{}: missing key \"{}\"", path_, key);
    return value<T>(j_.at(key), key);
  }
  template <class T>
  T get_or(const char* key, T dflt) {
    return has(key) ? value<T>(j_.at(key), key) : dflt;
  }
  template <class T>
  T value(const json& v, const std::string& key) const {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      // nlohmann's get<int64_t> casts a float or a bool (1e37 to int64 is undefined behaviour,
      // 4096.5 becomes 4096) and wraps an unsigned past INT64_MAX: an integer is an integer in
      // range, or a float that is one.
      using lim = std::numeric_limits<T>;
      if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(lim::max())) return v.get<T>();
      if (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() >= static_cast<int64_t>(lim::min()) &&
          v.get<int64_t>() <= static_cast<int64_t>(lim::max()))
        return v.get<T>();
      if (v.is_number_float()) {
        const double d = v.get<double>();
        // min and max + 1 are powers of two, exact in a double: [min, max + 1) converts
        if (std::trunc(d) == d && d >= static_cast<double>(lim::min()) && d < static_cast<double>(lim::max()) + 1.0)
          return static_cast<T>(d);
      }
      if (v.is_number())
        user_error("{}: key \"{}\" is {}; expected an integer from {} to {}", path_, key, v.dump(), lim::min(),
                   lim::max());
    }
    try {
      return v.get<T>();
    } catch (const json::exception&) {
      user_error("{}: key \"{}\" has the wrong type ({})", path_, key, v.type_name());
    }
  }

  // Refuses the keys known to change the math that we do not implement; returns the keys neither
  // read nor known to be inert.
  std::vector<std::string> check_rest() const {
    std::vector<std::string> unknown;
    for (const auto& [key, value] : j_.items()) {
      if (read_.count(key) || inert_keys().count(key)) continue;
      bool known = false;
      for (const auto& [name, off] : refused_keys()) {
        if (key != name) continue;
        known = true;
        if (!is_off(value, off))
          user_error("{}: \"{}\" = {} changes the model in a way bcdtrain does not implement (supported: {})", path_,
                     key, value.dump(), off.is_null() ? "absent or null" : off.dump());
      }
      if (!known) unknown.push_back(key);
    }
    return unknown;
  }

 private:
  const json& j_;
  std::string path_;
  std::set<std::string> read_;
};

// One warning line per config.json and process, however often it is read (train start resolves
// the shape more than once).
void warn_unknown(const std::string& path, const std::vector<std::string>& keys) {
  if (keys.empty()) return;
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (!warned.insert(path).second) return;
  fmt::print(stderr,
             "bcdtrain: warning: {}: {} not known to bcdtrain, read as changing nothing in the model: {}\n", path,
             keys.size() == 1 ? "key" : "keys", fmt::join(keys, ", "));
}

// ---- RoPE: rope_parameters (transformers 5) or rope_theta + rope_scaling (4.x) ----

void read_rope(HfReader& r, ModelConfig& m) {
  // transformers 5 takes rope_scaling first when both are there (convert_rope_params_to_dict).
  std::string where;
  json params = json::object();
  const bool scaling = r.has("rope_scaling"), parameters = r.has("rope_parameters");
  if (scaling) {
    where = "rope_scaling", params = r.at("rope_scaling");
  } else if (parameters) {
    where = "rope_parameters", params = r.at("rope_parameters");
  }
  if (!params.is_object()) user_error("{}: \"{}\" must be an object, got {}", r.path(), where, params.type_name());
  // Grouped by layer type ({"full_attention": {...}}, as transformers 5 writes it for models with
  // several attention kinds): transformers 5.25 does not read that grouping for these families.
  // llama and mistral warn of an unrecognized key and build the default RoPE; qwen2 and qwen3
  // fail. Applying the group would be a different model in silence, so it is refused.
  for (const auto& [k, v] : params.items())
    if (v.is_object())
      user_error("{}: \"{}\" groups its settings by layer type (\"{}\": {{...}}), which transformers does not read for "
                 "{} models (llama and mistral: it warns and builds the default RoPE; qwen2 and qwen3: it fails); "
                 "write them at the top level of \"{}\"",
                 r.path(), where, k, r.get<std::string>("model_type"), where);
  auto key = [&](const std::string& k) { return where + "." + k; };
  auto number = [&](const char* k) {
    const double v = r.value<double>(params.at(k), key(k));
    if (!std::isfinite(v)) user_error("{}: \"{}\" must be a finite number, got {}", r.path(), key(k), v);
    return v;
  };
  auto positive = [&](const char* k) {
    const double v = number(k);
    if (!(v > 0)) user_error("{}: \"{}\" must be positive, got {}", r.path(), key(k), v);
    return v;
  };
  auto need = [&](const char* k) {
    if (!params.contains(k) || params.at(k).is_null())
      user_error("{}: \"{}\" is missing (rope_type \"{}\" needs it)", r.path(), key(k), name_of(m.rope_type));
  };
  auto has = [&](const char* k) { return params.contains(k) && !params.at(k).is_null(); };

  // Both places may hold a theta (our exports write both): transformers 5 takes the dict's, 4.x the
  // top-level one, so two different values would be two different models.
  const double top_theta = r.get_or<double>("rope_theta", 10000.0);
  m.rope_theta = has("rope_theta") ? number("rope_theta") : top_theta;
  if (has("rope_theta") && r.has("rope_theta") && m.rope_theta != top_theta)
    user_error("{}: \"{}\" ({}) and \"rope_theta\" ({}) disagree (transformers 5 reads the first, 4.x the second)",
               r.path(), key("rope_theta"), m.rope_theta, top_theta);
  std::string type = "default";
  if (has("rope_type")) type = r.value<std::string>(params.at("rope_type"), key("rope_type"));
  else if (has("type")) type = r.value<std::string>(params.at("type"), key("type"));
  const std::optional<RopeType> t = parse_choice<RopeType>(type);
  if (!t)
    user_error("{}: \"{}\" = \"{}\" is not supported (expected {})", r.path(), key("rope_type"), type,
               choice_list<RopeType>());
  m.rope_type = *t;
  // partial_rotary_factor: the rotated share of each head; only all of it is implemented.
  const double partial = has("partial_rotary_factor") ? number("partial_rotary_factor")
                                                      : r.get_or<double>("partial_rotary_factor", 1.0);
  if (partial != 1.0)
    user_error("{}: \"partial_rotary_factor\" = {} is not supported (expected 1: the whole head rotates)", r.path(),
               partial);

  std::set<std::string> allowed = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
  // transformers 5 prefers a top-level original_max_position_embeddings (standardize_rope_params).
  auto original_max = [&]() -> int64_t {
    int64_t n = m.max_seq_len;
    if (r.has("original_max_position_embeddings")) n = r.get<int64_t>("original_max_position_embeddings");
    else if (has("original_max_position_embeddings"))
      n = r.value<int64_t>(params.at("original_max_position_embeddings"), key("original_max_position_embeddings"));
    if (n <= 0) user_error("{}: original_max_position_embeddings must be positive, got {}", r.path(), n);
    return n;
  };
  switch (m.rope_type) {
    case RopeType::kDefault:
      allowed.insert("factor");  // transformers ignores it for the default type
      break;
    case RopeType::kLinear:
      need("factor");
      m.rope_factor = positive("factor");
      allowed.insert("factor");
      break;
    case RopeType::kLlama3:
      for (const char* k : {"factor", "low_freq_factor", "high_freq_factor"}) need(k);
      m.rope_factor = positive("factor");
      m.rope_low_freq_factor = positive("low_freq_factor");
      m.rope_high_freq_factor = positive("high_freq_factor");
      if (!(m.rope_high_freq_factor > m.rope_low_freq_factor))
        user_error("{}: \"{}\" ({}) must be greater than \"{}\" ({})", r.path(), key("high_freq_factor"),
                   m.rope_high_freq_factor, key("low_freq_factor"), m.rope_low_freq_factor);
      m.rope_original_max_len = original_max();
      allowed.insert({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
      break;
    case RopeType::kYarn: {
      m.rope_original_max_len = original_max();
      // No factor: the ratio of the context to the original one (transformers 5, DeepSeek-style).
      m.rope_factor = has("factor") ? positive("factor")
                                    : static_cast<double>(m.max_seq_len) / static_cast<double>(m.rope_original_max_len);
      if (has("attention_factor")) {
        m.rope_attention_factor = positive("attention_factor");
      } else if (has("mscale") && has("mscale_all_dim") && number("mscale") != 0 && number("mscale_all_dim") != 0) {
        auto mscale = [&](double s) { return m.rope_factor <= 1 ? 1.0 : 0.1 * s * std::log(m.rope_factor) + 1.0; };
        m.rope_attention_factor = mscale(number("mscale")) / mscale(number("mscale_all_dim"));
      }
      // beta_fast / beta_slow: transformers takes 32 and 1 for a missing or zero value ("or 32").
      if (has("beta_fast") && number("beta_fast") != 0) m.rope_beta_fast = positive("beta_fast");
      if (has("beta_slow") && number("beta_slow") != 0) m.rope_beta_slow = positive("beta_slow");
      if (has("truncate")) m.rope_truncate = r.value<bool>(params.at("truncate"), key("truncate"));
      allowed.insert({"factor", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                      "original_max_position_embeddings", "truncate"});
      break;
    }
  }
  for (const auto& [k, v] : params.items())
    if (!allowed.count(k) && !v.is_null())
      user_error("{}: \"{}\" is not a parameter of rope_type \"{}\" that bcdtrain implements (it reads {})", r.path(),
                 key(k), name_of(m.rope_type), fmt::join(allowed, ", "));
  if (m.rope_original_max_len == m.max_seq_len) m.rope_original_max_len = 0;  // stored as "the context"
}

// Sliding-window attention below the context, per layer or for all: refused (full attention only).
void check_attention_kinds(HfReader& r, const Family& fam, const ModelConfig& m) {
  int64_t window = fam.default_window;
  const bool switched_on = fam.window_switch ? r.get_or<bool>("use_sliding_window", false) : true;
  if (r.has("sliding_window")) window = r.get<int64_t>("sliding_window");
  else if (r.present("sliding_window")) window = 0;  // null: none
  // 0 and -1 are no "none" (that is null): transformers fails to build such a model.
  if (window <= 0 && r.has("sliding_window") && switched_on)
    user_error("{}: sliding_window {}: expected a positive window, or null for none", r.path(), window);
  if (fam.window_switch && !switched_on) window = 0;
  // Qwen: layers from max_window_layers up slide (transformers' layer_types default).
  int64_t first_sliding = 0;
  if (fam.window_switch) first_sliding = r.get_or<int64_t>("max_window_layers", 28);
  auto refuse_window = [&](int64_t layer) {
    if (window > 0 && window < m.max_seq_len)
      user_error("{}: sliding_window {} < max_position_embeddings {} is not supported (layer {} is "
                 "sliding_attention; bcdtrain implements full attention only)",
                 r.path(), window, m.max_seq_len, layer);
  };
  if (!r.has("layer_types")) {
    // transformers' default: every layer slides (Mistral), or those from max_window_layers up (Qwen)
    const int64_t first = fam.window_switch ? std::max<int64_t>(first_sliding, 0) : 0;
    if (window > 0 && first < m.n_layers) refuse_window(first);
    return;
  }
  const json& lt = r.at("layer_types");
  if (!lt.is_array()) user_error("{}: \"layer_types\" must be a list, got {}", r.path(), lt.type_name());
  if (static_cast<int64_t>(lt.size()) != m.n_layers)
    user_error("{}: \"layer_types\" lists {} layers, num_hidden_layers is {}", r.path(), lt.size(), m.n_layers);
  for (size_t i = 0; i < lt.size(); ++i) {
    const std::string kind = r.value<std::string>(lt[i], "layer_types");
    if (kind == "full_attention") continue;
    if (kind != "sliding_attention")
      user_error("{}: \"layer_types\" names \"{}\" for layer {} (bcdtrain implements full_attention only)", r.path(),
                 kind, i);
    if (fam.family == HfFamily::kLlama)
      user_error("{}: \"layer_types\" makes layer {} sliding_attention, which llama models do not have "
                 "(transformers fails on it; bcdtrain implements full attention only)",
                 r.path(), i);
    if (window <= 0)
      user_error("{}: \"layer_types\" makes layer {} sliding_attention with no sliding_window set (transformers fails "
                 "on it; bcdtrain implements full attention only)",
                 r.path(), i);
    refuse_window(static_cast<int64_t>(i));
  }
}

}  // namespace

ModelConfig model_config_from_hf(const std::string& path, const ModelConfig& base) {
  json j;
  try {
    j = read_json_file(path, kJsonConfig, "HF config ([model] hf_config, or the config.json of init_from)");
  } catch (const json::parse_error& e) {
    user_error("{}: invalid JSON: {}", path, e.what());
  }
  if (!j.is_object()) user_error("{}: expected a JSON object", path);
  HfReader r(j, path);
  const std::string type = r.get<std::string>("model_type");
  const std::optional<HfFamily> family = parse_choice<HfFamily>(type);
  const Family* fam = nullptr;
  for (const Family& f : kFamilies)
    if (family == f.family) fam = &f;
  if (!fam)
    user_error("{}: unsupported model_type \"{}\" (expected llama, mistral, qwen2 or qwen3; Gemma, Phi-3, OLMo and "
               "others have layers of another shape)", path, type);
  const std::string act = r.get_or<std::string>("hidden_act", "silu");
  if (act != "silu") user_error("{}: hidden_act \"{}\" is not supported (expected silu)", path, act);

  ModelConfig m = base;
  m.hf_config = path;
  m.vocab_size = r.get<int64_t>("vocab_size");
  m.d_model = r.get<int64_t>("hidden_size");
  m.n_layers = r.get<int64_t>("num_hidden_layers");
  m.n_heads = r.get<int64_t>("num_attention_heads");
  // Absent: the family's default; null: as many as the query heads (transformers' __post_init__).
  m.n_kv_heads = r.present("num_key_value_heads") ? r.get_or<int64_t>("num_key_value_heads", m.n_heads)
                                                   : (fam->default_kv_heads > 0 ? fam->default_kv_heads : m.n_heads);
  m.d_ff = r.get<int64_t>("intermediate_size");
  m.max_seq_len = r.get_or<int64_t>("max_position_embeddings", fam->default_max_pos);
  m.norm_eps = r.get_or<double>("rms_norm_eps", 1e-6);
  m.tie_embeddings = r.get_or<bool>("tie_word_embeddings", false);
  for (const auto& [key, size] : {std::pair<const char*, int64_t>{"hidden_size", m.d_model}, {"num_hidden_layers", m.n_layers},
                                  {"num_attention_heads", m.n_heads}, {"vocab_size", m.vocab_size},
                                  {"intermediate_size", m.d_ff}})
    if (size <= 0) user_error("{}: {} must be positive, got {}", path, key, size);
  if (m.max_seq_len <= 0) user_error("{}: max_position_embeddings must be positive, got {}", path, m.max_seq_len);
  if (m.max_seq_len > kMaxPositions)
    user_error("{}: max_position_embeddings {} is beyond any model's context (the longest released is 10M "
               "positions); bcdtrain reads at most {}",
               path, m.max_seq_len, kMaxPositions);

  // The head dimension: explicit (Mistral-Nemo, Qwen3), else hidden_size / num_attention_heads.
  const int64_t implied = m.d_model / m.n_heads;
  const int64_t head_dim =
      r.get_or<int64_t>("head_dim", fam->default_head_dim > 0 ? fam->default_head_dim : implied);
  constexpr int64_t kMaxHeadDim = 1 << 16;
  if (head_dim <= 0 || head_dim > kMaxHeadDim)
    user_error("{}: head_dim must be in [1, {}], got {}", path, kMaxHeadDim, head_dim);
  if (head_dim % 2 != 0) user_error("{}: head_dim {} must be even for rotary embeddings", path, head_dim);
  // The attention's width, bounded before anything is sized by it (a head count from a hostile
  // file would overflow the parameter count).
  constexpr int64_t kMaxWidth = int64_t{1} << 24;
  if (m.n_heads > kMaxWidth / head_dim)
    user_error("{}: num_attention_heads ({}) x head_dim ({}) is beyond any model (at most {})", path, m.n_heads,
               head_dim, kMaxWidth);
  const bool divides = m.d_model % m.n_heads == 0;
  m.d_head = divides && head_dim == implied ? 0 : head_dim;  // 0: "d_model / n_heads", as configs without it
  if (m.n_kv_heads <= 0 || m.n_heads % m.n_kv_heads != 0)
    user_error("{}: num_attention_heads ({}) must be divisible by num_key_value_heads ({})", path, m.n_heads,
               m.n_kv_heads);

  read_rope(r, m);
  if (!rope_theta_ok(m.rope_theta))
    user_error("{}: rope_theta must be a number above 1 that fp32 holds (the frequencies are computed in fp32, "
               "as transformers computes them), got {}", path, m.rope_theta);
  if (!(m.norm_eps > 0) || !std::isfinite(m.norm_eps))
    user_error("{}: rms_norm_eps must be a positive number, got {}", path, m.norm_eps);

  // Biases: Qwen2 has them on q/k/v (always); attention_bias elsewhere also puts one on o_proj.
  m.qkv_bias = fam->qkv_bias;
  m.qk_norm = fam->qk_norm;
  if (!fam->qkv_bias && r.get_or<bool>("attention_bias", false))
    user_error("{}: attention_bias = true (biases on q, k, v and o_proj) is not supported (expected false)", path);
  if (r.get_or<bool>("mlp_bias", false)) user_error("{}: mlp_bias = true is not supported (expected false)", path);
  // Dropout changes what training computes; inference-only configs keep it at 0.
  if (const double p = r.get_or<double>("attention_dropout", 0.0); p != 0)
    user_error("{}: attention_dropout = {} is not supported (expected 0)", path, p);
  check_attention_kinds(r, *fam, m);
  warn_unknown(path, r.check_rest());
  return m;
}

std::string hf_init_dir(const std::string& init_from) {
  return init_from.rfind("hf:", 0) == 0 ? init_from.substr(3) : "";
}

}  // namespace bcd
