// Our blocks -> an HF model directory: shard plan, safetensors files, index and config.json.
#include "model/hf_export.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <filesystem>
#include <regex>
#include <optional>
#include <set>

#include "model/hf_config.h"
#include "model/weights.h"
#include "model/hf_weights.h"
#include "model/rope.h"
#include "base/config.h"
#include "base/error.h"
#include "base/files.h"
#include "base/json_read.h"
#include "base/stop.h"
#include "data/tokenizer.h"

namespace bcd {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kProducer = "bcdtrain";  // safetensors metadata "producer": marks our exports

// Names an export writes (and their temporary names while writing).
bool is_export_name(const std::string& name) {
  static const std::regex re(
      R"(^(config\.json|tokenizer\.model|tokenizer\.json|tokenizer_config\.json|special_tokens_map\.json|)"
      R"(generation_config\.json|chat_template\.jinja|model\.safetensors|model\.safetensors\.index\.json|)"
      R"(model-[0-9]{5}-of-[0-9]{5}\.safetensors)(\.tmp(-[0-9]+)?)?$)");
  return std::regex_match(name, re);
}

bool is_temp_name(const std::string& name) { return name.find(".tmp") != std::string::npos; }

// OUT absent: created (true). Present: must be empty or hold only a previous export of ours.
bool prepare_out_dir(const std::string& out) {
  std::error_code ec;
  if (!fs::exists(out, ec)) {
    if (!fs::create_directories(out, ec) && ec)
      user_error("{}: cannot create the output directory ({})", out, ec.message());
    return true;
  }
  if (!fs::is_directory(out)) user_error("{}: exists and is not a directory", out);
  bool any = false, ours = false;
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    any = true;
    if (!e.is_regular_file() || !is_export_name(name))
      user_error("{}: not empty and not a previous bcdtrain export (found {}); choose a new or empty directory", out,
                 name);
    if (is_temp_name(name) || name.size() < 12 || name.compare(name.size() - 12, 12, ".safetensors") != 0) continue;
    bool marked = false;
    try {
      st::SafetensorsFile f(e.path().string());
      auto it = f.header().metadata.find("producer");
      marked = it != f.header().metadata.end() && it->second == kProducer;
    } catch (const UserError&) {
    }
    if (!marked)
      user_error("{}: not empty and not a previous bcdtrain export ({} was not written by bcdtrain); choose a new or "
                 "empty directory", out, name);
    ours = true;
  }
  if (any && !ours)
    user_error("{}: not empty and not a previous bcdtrain export (no bcdtrain safetensors file in it); choose a new "
               "or empty directory", out);
  return false;
}

const char* architecture_of(HfFamily f) {
  switch (f) {
    case HfFamily::kQwen3: return "Qwen3ForCausalLM";
    case HfFamily::kQwen2: return "Qwen2ForCausalLM";
    case HfFamily::kMistral: return "MistralForCausalLM";
    case HfFamily::kLlama: break;
  }
  return "LlamaForCausalLM";
}

// The RoPE parameters of `m` as transformers names them, without rope_theta; {} for the default.
json rope_scaling_json(const ModelConfig& m) {
  json r = {{"rope_type", name_of(m.rope_type)}};
  const int64_t original = rope_original_max_len(m);
  switch (m.rope_type) {
    case RopeType::kDefault: return json();
    case RopeType::kLinear: r["factor"] = m.rope_factor; break;
    case RopeType::kLlama3:
      r["factor"] = m.rope_factor;
      r["low_freq_factor"] = m.rope_low_freq_factor;
      r["high_freq_factor"] = m.rope_high_freq_factor;
      r["original_max_position_embeddings"] = original;
      break;
    case RopeType::kYarn:
      r["factor"] = m.rope_factor;
      r["original_max_position_embeddings"] = original;
      r["attention_factor"] = rope_attention_scale(m);
      r["beta_fast"] = m.rope_beta_fast;
      r["beta_slow"] = m.rope_beta_slow;
      r["truncate"] = m.rope_truncate;
      break;
  }
  return r;
}

}  // namespace

std::string hf_config_json(const ModelConfig& m, const std::string& base_config_json, st::Dtype dtype) {
  json j = json::object();
  if (!base_config_json.empty()) {
    try {
      j = parse_json(base_config_json, kJsonConfig, "the base config.json");
    } catch (const json::exception&) {
      j = json::object();
    }
    if (!j.is_object()) j = json::object();
  }
  std::optional<HfFamily> family;
  if (j.contains("model_type") && j["model_type"].is_string())
    family = parse_choice<HfFamily>(j["model_type"].get<std::string>());
  // Qwen2 always has q/k/v biases, Qwen3 always q/k norms, and Llama/Mistral neither (as we map
  // them): a base of another kind describes a different architecture, so start afresh.
  const bool base_fits =
      family && (*family == HfFamily::kQwen2) == m.qkv_bias && (*family == HfFamily::kQwen3) == m.qk_norm;
  if (!base_fits) {
    j = json::object();
    family = m.qk_norm ? HfFamily::kQwen3 : m.qkv_bias ? HfFamily::kQwen2 : HfFamily::kLlama;
  }
  const HfFamily type = *family;
  if (!j.contains("architectures")) j["architectures"] = {architecture_of(type)};
  j["model_type"] = name_of(type);
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.d_model;
  j["intermediate_size"] = m.ff_dim();
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = m.kv_heads();
  j["head_dim"] = m.head_dim();  // always: Qwen3's default (128) is not hidden_size / heads
  j["max_position_embeddings"] = m.max_seq_len;
  j["rms_norm_eps"] = m.norm_eps;
  // RoPE in both forms: transformers 4.x reads rope_theta + rope_scaling (and keeps an unknown
  // rope_parameters as an inert attribute); 5.x reads rope_parameters, or rope_scaling first when
  // it is set, which then holds the same parameters.
  const json scaling = rope_scaling_json(m);
  j["rope_theta"] = m.rope_theta;
  j["rope_scaling"] = scaling;
  json params = scaling.is_null() ? json{{"rope_type", "default"}} : scaling;
  params["rope_theta"] = m.rope_theta;
  j["rope_parameters"] = params;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["torch_dtype"] = hf_torch_dtype_name(dtype);
  if (j.contains("dtype")) j["dtype"] = hf_torch_dtype_name(dtype);  // newer transformers' name for it
  if (!j.contains("hidden_act")) j["hidden_act"] = "silu";
  if (!j.contains("initializer_range")) j["initializer_range"] = m.init_std;
  if (type == HfFamily::kLlama || type == HfFamily::kQwen3) {
    if (!j.contains("attention_bias")) j["attention_bias"] = false;
  }
  if (type == HfFamily::kLlama) {
    if (!j.contains("mlp_bias")) j["mlp_bias"] = false;
  } else if (type == HfFamily::kQwen2 || type == HfFamily::kQwen3) {
    if (!j.contains("use_sliding_window")) j["use_sliding_window"] = false;
  } else if (type == HfFamily::kMistral) {
    if (!j.contains("sliding_window")) j["sliding_window"] = nullptr;
  }
  return j.dump(2) + "\n";
}

namespace {

// Elements [first, first + count) of a block's flat buffer as fp32, wherever the weights are.
using BlockRead = std::function<void(int block, uint64_t first, float* out, uint64_t count)>;

// The files of an export into the prepared `out_dir`: the shards, their index and config.json; a
// previous export's other files are removed last. Tensors travel a piece at a time (read as
// fp32, converted, written): an export holds a piece, never a tensor or the model.
HfExportReport write_hf_files(const ModelConfig& mc, const BlockRead& read, const std::string& out_dir,
                              st::Dtype dtype, uint64_t shard_bytes, const std::string& base_config_json) {
  const std::vector<HfTensor> tensors = hf_tensor_map(mc);
  const uint64_t es = st::dtype_size(dtype);

  // ---- Shard plan: in state_dict order, a new shard when the next tensor would overflow ----
  // (as transformers' save_pretrained; a tensor larger than the limit gets a shard of its own)
  std::vector<std::vector<const HfTensor*>> shards;
  uint64_t cur = 0;
  HfExportReport r;
  for (const HfTensor& t : tensors) {
    uint64_t bytes = es;
    for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
    if (shards.empty() || (!shards.back().empty() && cur + bytes > shard_bytes)) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(&t);
    cur += bytes;
    r.tensor_bytes += bytes;
  }
  const size_t n = shards.size();
  auto shard_name = [&](size_t i) {
    return n == 1 ? std::string("model.safetensors") : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n);
  };

  // ---- Files ----
  r.dtype = short_dtype_name(dtype);
  const std::string config_text = hf_config_json(mc, base_config_json, dtype);
  r.model_type = parse_json(config_text, kJsonConfig, out_dir + "/config.json")["model_type"].get<std::string>();
  std::set<std::string> written = {"config.json"};
  r.files.push_back(out_dir + "/config.json");
  json weight_map = json::object();
  torch::NoGradGuard ng;
  std::vector<float> piece;
  std::vector<uint8_t> converted;
  for (size_t i = 0; i < n; ++i) {
    std::vector<st::TensorSpec> specs;
    for (const HfTensor* t : shards[i]) specs.push_back({t->name, dtype, t->shape});
    const std::string path = out_dir + "/" + shard_name(i);
    st::SafetensorsWriter w(path, std::move(specs), {{"format", "pt"}, {"producer", kProducer}});
    for (const HfTensor* t : shards[i]) {
      const auto numel = static_cast<uint64_t>(t->numel());
      piece.resize(std::max<uint64_t>(piece.size(), std::min<uint64_t>(numel, kStatePieceElems)));
      for (uint64_t first = 0; first < numel; first += piece.size()) {
        check_stop();  // the shard's writer removes its temporary file
        const uint64_t count = std::min<uint64_t>(piece.size(), numel - first);
        read(t->block, static_cast<uint64_t>(t->offset) + first, piece.data(), count);
        if (dtype == st::Dtype::kF32) {
          w.write_part(piece.data(), count * sizeof(float));
          continue;
        }
        converted.resize(std::max<uint64_t>(converted.size(), count * es));
        const auto c = static_cast<int64_t>(count);
        torch::from_blob(converted.data(), {c}, torch_dtype_of(dtype))
            .copy_(torch::from_blob(piece.data(), {c}, torch::kFloat32));
        w.write_part(converted.data(), count * es);
      }
      weight_map[t->name] = shard_name(i);
    }
    w.commit();
    written.insert(shard_name(i));
    r.files.push_back(path);
  }
  if (n > 1) {
    json index = {{"metadata", {{"total_size", r.tensor_bytes}}}, {"weight_map", weight_map}};
    write_file_atomic(out_dir + "/model.safetensors.index.json", index.dump(2) + "\n", "export");
    written.insert("model.safetensors.index.json");
    r.files.push_back(out_dir + "/model.safetensors.index.json");
  }
  write_file_atomic(out_dir + "/config.json", config_text, "export");

  // ---- A previous export's other files would shadow or contradict this one ----
  for (const auto& e : fs::directory_iterator(out_dir)) {
    const std::string name = e.path().filename().string();
    if (written.count(name) || !is_export_name(name)) continue;
    std::error_code ec;
    fs::remove(e.path(), ec);
  }
  return r;
}

// The export into out_dir, prepared here. One that fails goes with the directory it created: no
// empty or half-written OUT stays. (An earlier export's directory is left as the failure found
// it: its files are ours to replace on the next try, as prepare_out_dir allows.)
HfExportReport export_into(const ModelConfig& mc, const BlockRead& read, const std::string& out_dir, st::Dtype dtype,
                           uint64_t shard_bytes, const std::string& base_config_json) {
  BCD_CHECK(hf_float_dtype(dtype), "export dtype {}", st::dtype_name(dtype));
  const bool created = prepare_out_dir(out_dir);
  try {
    return write_hf_files(mc, read, out_dir, dtype, shard_bytes, base_config_json);
  } catch (...) {
    std::error_code ec;
    if (created) fs::remove_all(out_dir, ec);
    throw;
  }
}

}  // namespace

HfExportReport export_hf_model(const LlamaModel& model, const std::string& out_dir, st::Dtype dtype,
                               uint64_t shard_bytes, const std::string& base_config_json) {
  // Tensors come block by block (ModelPieces holds a block open until the next).
  const BlockRead read = ModelPieces(model);
  return export_into(model.config(), read, out_dir, dtype, shard_bytes, base_config_json);
}

HfExportReport export_hf(const HfExportOptions& opt) {
  Config cfg;
  apply_config_text(cfg, read_weights_config(opt.checkpoint), opt.checkpoint);
  const ModelConfig& mc = cfg.model;
  if (mc.vocab_size <= 0)
    user_error("{}: the stored config has vocab_size {} (expected the resolved vocabulary size)", opt.checkpoint,
               mc.vocab_size);
  // The config.json exported over: the one imported with the weights, else [model] hf_config;
  // judged here, where its source is known, before the model is built.
  std::string base = read_weights_attr(opt.checkpoint, "hf_config_json");
  std::string base_source = opt.checkpoint + ": attribute hf_config_json";
  if (base.empty() && !mc.hf_config.empty() && fs::is_regular_file(mc.hf_config)) {
    base = read_json_text(mc.hf_config, kJsonConfig, "HF config");
    base_source = mc.hf_config;
  }
  const json base_json = base.empty() ? json() : parse_json(base, kJsonConfig, base_source, /*allow_exceptions=*/false);
  st::Dtype dtype = st::Dtype::kBF16;
  if (!opt.dtype.empty()) {
    dtype = parse_short_dtype(opt.dtype, "--dtype");
  } else if (const std::string d = read_weights_attr(opt.checkpoint, "hf_dtype"); !d.empty()) {
    dtype = parse_short_dtype(d, opt.checkpoint + ": attribute hf_dtype");
  } else if (base_json.is_object() && base_json.contains("torch_dtype") && base_json["torch_dtype"].is_string()) {
    dtype_from_hf_torch_dtype(base_json["torch_dtype"].get<std::string>(), dtype);
  }
  // The tokenizer beside the weights (a run's model.h5, an imported file), or in the run
  // directory of a checkpoints/step-N.h5: checked against the model before anything is written.
  const fs::path ckpt(opt.checkpoint);
  const fs::path dir = ckpt.has_parent_path() ? ckpt.parent_path() : fs::path(".");
  std::string tok = find_tokenizer(dir.string());
  if (tok.empty() && dir.filename() == "checkpoints") tok = find_tokenizer(dir.parent_path().string());
  if (!tok.empty()) check_model_tokenizer(tok, mc.vocab_size, opt.checkpoint);

  // Straight from the weights file into the safetensors, a piece at a time: the model is never
  // built, so an 8B model exports in the memory of a few pieces.
  const WeightsReader weights(opt.checkpoint, block_shapes(mc));
  HfExportReport r = export_into(
      mc, [&](int block, uint64_t first, float* out, uint64_t count) { weights.read(block, first, out, count); },
      opt.out_dir, dtype, opt.shard_bytes, base);
  if (!tok.empty()) {
    const std::vector<std::string> copied = copy_tokenizer_files(tok, opt.out_dir, /*both_forms=*/true);
    r.tokenizer = copied.front();
    r.files.insert(r.files.end(), copied.begin(), copied.end());
  }
  return r;
}

}  // namespace bcd
