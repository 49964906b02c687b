// Hugging Face interop tests: a tiny HF-format model written here (names and layouts spelled out
// independently of src/model/hf_weights.cpp) loads with the source model's exact logits; import
// -> export reproduces every tensor byte; bad directories are rejected naming file and tensor.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <H5Cpp.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "io/weights.h"
#include "model/hf_config.h"
#include "model/hf_export.h"
#include "model/hf_import.h"
#include "model/llama.h"
#include "model/safetensors.h"
#include "runtime/config.h"
#include "runtime/error.h"
#include "test_util.h"

namespace bcd {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

void expect_has(const std::string& text, const std::vector<std::string>& needles) {
  EXPECT_FALSE(text.empty()) << "no error";
  for (const auto& n : needles) EXPECT_NE(text.find(n), std::string::npos) << "missing '" << n << "' in: " << text;
}

// ---- Tiny models of each supported kind ----

struct Variant {
  std::string name, model_type;
  bool tie = false;
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

ModelConfig tiny(const Variant& v) {
  ModelConfig m;
  m.vocab_size = 37;
  m.d_model = 16;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.d_ff = 24;
  m.max_seq_len = 32;
  m.norm_eps = 1e-6;
  m.rope_theta = v.model_type == "qwen2" ? 1e6 : 10000.0;
  m.qkv_bias = v.model_type == "qwen2";
  m.tie_embeddings = v.tie;
  m.init_std = 0.2;
  return m;
}

// A source model with every parameter (norms and biases too) away from its init value.
std::unique_ptr<LlamaModel> source_model(const ModelConfig& cfg, uint64_t seed) {
  auto m = std::make_unique<LlamaModel>(cfg);
  m->init_weights(seed);
  torch::NoGradGuard ng;
  torch::manual_seed(seed + 1);
  for (Block& b : m->blocks()) b.data().add_(torch::randn_like(b.data()) * 0.1);
  return m;
}

// ---- An independent minimal HF writer ----

// transformers' state_dict of the model, by hand: HF name -> our parameter.
std::vector<std::pair<std::string, torch::Tensor>> hf_state_dict(const LlamaModel& m) {
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

const char* st_name(torch::ScalarType t) {
  switch (t) {
    case torch::kBFloat16: return "BF16";
    case torch::kFloat16: return "F16";
    case torch::kFloat32: return "F32";
    case torch::kInt64: return "I64";
    default: throw std::runtime_error("dtype");
  }
}

// One safetensors file, written byte by byte from the spec (no shared code with the module).
void write_st(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& ts) {
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

json hf_config(const ModelConfig& m, const std::string& model_type) {
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

HfDirOptions stored_as(torch::ScalarType dtype, int shards = 1) {
  HfDirOptions o;
  o.dtype = dtype;
  o.shards = shards;
  return o;
}

// A HF model directory for `m` (config.json, weights, tokenizer.model).
void write_hf_dir(const LlamaModel& m, const std::string& model_type, const std::string& dir, const HfDirOptions& o = {}) {
  fs::create_directories(dir);
  auto sd = hf_state_dict(m);
  for (auto& [name, t] : sd) t = t.detach().to(o.dtype);
  if (o.edit_tensors) o.edit_tensors(sd);
  json cfg = hf_config(m.config(), model_type);
  cfg["torch_dtype"] = o.dtype == torch::kBFloat16 ? "bfloat16" : o.dtype == torch::kFloat16 ? "float16" : "float32";
  if (o.edit_config) o.edit_config(cfg);
  test::write_text(dir + "/config.json", cfg.dump(2));
  test::write_text(dir + "/tokenizer.model", "not really a sentencepiece model");
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

torch::Tensor logits_of(const LlamaModel& m) {
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
std::map<std::string, RawTensor> read_hf_dir(const std::string& dir) {
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

// ---- Import: logits of the imported model equal the source model's ----

class HfImportLogits : public ::testing::TestWithParam<std::tuple<Variant, int>> {};

TEST_P(HfImportLogits, EqualTheSourceModel) {
  const auto& [v, shards] = GetParam();
  const ModelConfig cfg = tiny(v);
  auto src = source_model(cfg, 11);
  test::TempDir dir("bcd-hf");
  write_hf_dir(*src, v.model_type, dir.path(), stored_as(torch::kFloat32, shards));

  // Shape from config.json through init_from, as the trainer does.
  ModelConfig base;
  base.init_from = "hf:" + dir.path();
  const ModelConfig mc = resolve_model_config(base);
  EXPECT_EQ(mc.hf_config, dir.file("config.json"));
  EXPECT_EQ(mc.d_model, cfg.d_model);
  EXPECT_EQ(mc.ff_dim(), cfg.ff_dim());
  EXPECT_EQ(mc.kv_heads(), cfg.kv_heads());
  EXPECT_EQ(mc.qkv_bias, cfg.qkv_bias);
  EXPECT_EQ(mc.tie_embeddings, cfg.tie_embeddings);
  EXPECT_DOUBLE_EQ(mc.rope_theta, cfg.rope_theta);
  EXPECT_DOUBLE_EQ(mc.norm_eps, cfg.norm_eps);

  LlamaModel dst(mc);
  dst.init_weights(99);
  const torch::Tensor want = logits_of(*src);
  ASSERT_FALSE(torch::allclose(logits_of(dst), want)) << "the check below could not fail";
  load_initial_weights(dst, mc.init_from);
  const torch::Tensor got = logits_of(dst);
  EXPECT_TRUE(torch::equal(got, want)) << "max |diff| " << (got - want).abs().max().item<double>();
  for (int i = 0; i < src->n_blocks(); ++i)
    for (const auto& s : src->block(i).slots())
      EXPECT_TRUE(torch::equal(dst.block(i).param(s.name), src->block(i).param(s.name))) << src->block(i).name() << "." << s.name;
}

const Variant kVariants[] = {{"llama", "llama", false}, {"llama_tied", "llama", true}, {"qwen2", "qwen2", false},
                             {"mistral", "mistral", false}};

INSTANTIATE_TEST_SUITE_P(Variants, HfImportLogits, ::testing::Combine(::testing::ValuesIn(kVariants), ::testing::Values(1, 3)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + (std::get<1>(info.param) == 1 ? "_single" : "_sharded");
                         });

TEST(HfImport, HalfPrecisionConvertsExactlyIntoFp32AndBf16Blocks) {
  const ModelConfig cfg = tiny({"qwen2", "qwen2", true});
  auto src = source_model(cfg, 21);
  for (torch::ScalarType dt : {torch::kBFloat16, torch::kFloat16}) {
    test::TempDir dir("bcd-hf");
    write_hf_dir(*src, "qwen2", dir.path(), stored_as(dt));
    for (torch::ScalarType work : {torch::kFloat32, torch::kBFloat16}) {
      LlamaModel dst(cfg, work);
      HfImportInfo info = import_hf_weights(dst, dir.path());
      EXPECT_EQ(info.dtype, dt == torch::kBFloat16 ? "bf16" : "fp16");
      for (int i = 0; i < src->n_blocks(); ++i)
        for (const auto& s : src->block(i).slots()) {
          torch::Tensor want = src->block(i).param(s.name).to(dt).to(work);
          EXPECT_TRUE(torch::equal(dst.block(i).param(s.name), want)) << s.name << " " << dt << " -> " << work;
        }
    }
  }
}

// ---- Import errors ----

class HfImportErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = tiny({"llama", "llama", false});
    src_ = source_model(cfg_, 31);
  }
  // Imports into a fresh model; expects a UserError and the model untouched.
  std::string import_error(const std::string& dir) {
    LlamaModel dst(cfg_);
    dst.init_weights(7);
    std::vector<torch::Tensor> before;
    for (const Block& b : dst.blocks()) before.push_back(b.data().clone());
    std::string e = error_of([&] { import_hf_weights(dst, dir); });
    for (int i = 0; i < dst.n_blocks(); ++i)
      EXPECT_TRUE(torch::equal(dst.block(i).data(), before[i])) << "block " << dst.block(i).name() << " was written";
    return e;
  }
  ModelConfig cfg_;
  std::unique_ptr<LlamaModel> src_;
  test::TempDir dir_{"bcd-hf"};
};

TEST_F(HfImportErrors, MissingShard) {
  write_hf_dir(*src_, "llama", dir_.path(), stored_as(torch::kFloat32, 2));
  fs::remove(dir_.file("model-00002-of-00002.safetensors"));
  expect_has(import_error(dir_.path()),
             {dir_.file("model-00002-of-00002.safetensors"), "shard not found", "model.safetensors.index.json", "for tensor "});
}

TEST_F(HfImportErrors, TensorMissingFromIndex) {
  HfDirOptions o = stored_as(torch::kFloat32, 2);
  o.edit_index = [](json& idx) { idx["weight_map"].erase("model.norm.weight"); };
  write_hf_dir(*src_, "llama", dir_.path(), o);
  expect_has(import_error(dir_.path()), {dir_.file("model.safetensors.index.json"), "model.norm.weight", "missing from weight_map"});
}

TEST_F(HfImportErrors, TensorMissingFromShardItIsListedFor) {
  HfDirOptions o = stored_as(torch::kFloat32, 2);
  o.edit_index = [](json& idx) { idx["weight_map"]["model.embed_tokens.weight"] = "model-00002-of-00002.safetensors"; };
  write_hf_dir(*src_, "llama", dir_.path(), o);
  expect_has(import_error(dir_.path()),
             {dir_.file("model-00002-of-00002.safetensors"), "model.embed_tokens.weight", "missing"});
}

TEST_F(HfImportErrors, EmptyWeightMap) {
  HfDirOptions o = stored_as(torch::kFloat32, 2);
  o.edit_index = [](json& idx) { idx["weight_map"] = json::object(); };
  write_hf_dir(*src_, "llama", dir_.path(), o);
  expect_has(import_error(dir_.path()), {dir_.file("model.safetensors.index.json"), "weight_map lists no tensors"});
}

TEST_F(HfImportErrors, ShardNameLeavingTheDirectory) {
  HfDirOptions o = stored_as(torch::kFloat32, 2);
  o.edit_index = [](json& idx) { idx["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors"; };
  write_hf_dir(*src_, "llama", dir_.path(), o);
  expect_has(import_error(dir_.path()), {"model.norm.weight", "../elsewhere.safetensors", "same directory"});
}

TEST_F(HfImportErrors, TensorMissingFromSingleFile) {
  HfDirOptions o;
  o.edit_tensors = [](auto& sd) {
    sd.erase(std::remove_if(sd.begin(), sd.end(), [](auto& p) { return p.first == "model.layers.1.mlp.up_proj.weight"; }),
             sd.end());
  };
  write_hf_dir(*src_, "llama", dir_.path(), o);
  expect_has(import_error(dir_.path()), {dir_.file("model.safetensors"), "model.layers.1.mlp.up_proj.weight", "missing", "[24, 16]"});
}

TEST_F(HfImportErrors, UnexpectedTensor) {
  HfDirOptions o;
  o.edit_tensors = [](auto& sd) { sd.emplace_back("model.layers.0.self_attn.o_proj.bias", torch::zeros({16})); };
  write_hf_dir(*src_, "llama", dir_.path(), o);
  expect_has(import_error(dir_.path()), {dir_.file("model.safetensors"), "unexpected tensor model.layers.0.self_attn.o_proj.bias"});
}

TEST_F(HfImportErrors, RotaryInvFreqIsIgnored) {
  HfDirOptions o;
  o.edit_tensors = [](auto& sd) { sd.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", torch::ones({2})); };
  write_hf_dir(*src_, "llama", dir_.path(), o);
  LlamaModel dst(cfg_);
  EXPECT_NO_THROW(import_hf_weights(dst, dir_.path()));
  EXPECT_TRUE(torch::equal(logits_of(dst), logits_of(*src_)));
}

TEST_F(HfImportErrors, UnsupportedDtype) {
  HfDirOptions o;
  o.edit_tensors = [](auto& sd) {
    for (auto& [n, t] : sd)
      if (n == "model.norm.weight") t = t.to(torch::kInt64);
  };
  write_hf_dir(*src_, "llama", dir_.path(), o);
  expect_has(import_error(dir_.path()), {"model.norm.weight", "dtype I64 is not supported"});
}

TEST_F(HfImportErrors, ShapeDisagreesWithTheModelConfig) {
  // config.json says intermediate_size 32; the tensors are 24 wide.
  HfDirOptions o;
  o.edit_config = [](json& c) { c["intermediate_size"] = 32; };
  write_hf_dir(*src_, "llama", dir_.path(), o);
  const std::string e = error_of([&] { import_hf_to_file(dir_.path(), dir_.file("out/model.h5")); });
  expect_has(e, {dir_.file("model.safetensors"), "model.layers.0.mlp.gate_proj.weight", "shape [24, 16]", "expected [32, 16]",
                 dir_.file("config.json")});
  EXPECT_FALSE(fs::exists(dir_.file("out/model.h5")));
}

TEST_F(HfImportErrors, UnknownModelType) {
  HfDirOptions o;
  o.edit_config = [](json& c) { c["model_type"] = "gpt_neox"; };
  write_hf_dir(*src_, "llama", dir_.path(), o);
  expect_has(error_of([&] { import_hf_to_file(dir_.path(), dir_.file("out/model.h5")); }),
             {dir_.file("config.json"), "unsupported model_type \"gpt_neox\""});
}

TEST_F(HfImportErrors, LlamaAttentionBiasIsRefused) {
  HfDirOptions o;
  o.edit_config = [](json& c) { c["attention_bias"] = true; };
  write_hf_dir(*src_, "llama", dir_.path(), o);
  expect_has(error_of([&] { import_hf_to_file(dir_.path(), dir_.file("out/model.h5")); }), {"attention_bias"});
}

TEST_F(HfImportErrors, NoWeights) {
  write_hf_dir(*src_, "llama", dir_.path());
  fs::remove(dir_.file("model.safetensors"));
  expect_has(import_error(dir_.path()), {dir_.path(), "no model.safetensors or model.safetensors.index.json"});
  expect_has(import_error(dir_.file("nope")), {dir_.file("nope"), "not a directory"});
}

TEST_F(HfImportErrors, TiedHeadStoredAnywayMustEqualTheEmbedding) {
  const ModelConfig tcfg = tiny({"llama_tied", "llama", true});
  auto tsrc = source_model(tcfg, 41);
  HfDirOptions o;
  torch::Tensor emb = tsrc->block(0).param("tok_embeddings").detach().clone();
  o.edit_tensors = [&](auto& sd) { sd.emplace_back("lm_head.weight", emb); };
  write_hf_dir(*tsrc, "llama", dir_.path(), o);
  LlamaModel dst(tcfg);
  EXPECT_NO_THROW(import_hf_weights(dst, dir_.path()));
  EXPECT_TRUE(torch::equal(logits_of(dst), logits_of(*tsrc)));

  test::TempDir other("bcd-hf");
  o.edit_tensors = [&](auto& sd) { sd.emplace_back("lm_head.weight", emb + 1); };
  write_hf_dir(*tsrc, "llama", other.path(), o);
  LlamaModel dst2(tcfg);
  expect_has(error_of([&] { import_hf_weights(dst2, other.path()); }), {"lm_head.weight differs", "tie_word_embeddings"});
}

// ---- Import -> export round trip: every tensor byte, name and shape ----

class HfRoundTrip : public ::testing::TestWithParam<std::tuple<torch::ScalarType, bool>> {};

TEST_P(HfRoundTrip, ExportReproducesTheImportedTensorsByteForByte) {
  const auto& [dt, sharded] = GetParam();
  const ModelConfig cfg = tiny({"qwen2", "qwen2", false});
  auto src = source_model(cfg, 51);
  test::TempDir dir("bcd-hf");
  write_hf_dir(*src, "qwen2", dir.file("in"), stored_as(dt, sharded ? 2 : 1));

  const HfImportSummary s = import_hf_to_file(dir.file("in"), dir.file("run/model.h5"));
  EXPECT_EQ(s.model_type, "qwen2");
  EXPECT_EQ(s.tokenizer, dir.file("run/tokenizer.model"));
  EXPECT_EQ(test::read_text(dir.file("run/tokenizer.model")), test::read_text(dir.file("in/tokenizer.model")));

  HfExportOptions xo;
  xo.checkpoint = dir.file("run/model.h5");
  xo.out_dir = dir.file("out");
  xo.shard_bytes = sharded ? 3000 : 5'000'000'000;  // the tiny model's tensors: 64 B to 2.4 KB
  const HfExportReport r = export_hf(xo);
  EXPECT_EQ(r.dtype, dt == torch::kBFloat16 ? "bf16" : dt == torch::kFloat16 ? "fp16" : "fp32");

  const auto in = read_hf_dir(dir.file("in")), out = read_hf_dir(dir.file("out"));
  ASSERT_EQ(in.size(), out.size());
  for (const auto& [name, t] : in) {
    ASSERT_TRUE(out.count(name)) << name << " not exported";
    EXPECT_EQ(out.at(name).dtype, t.dtype) << name;
    EXPECT_EQ(out.at(name).shape, t.shape) << name;
    EXPECT_TRUE(out.at(name).bytes == t.bytes) << name << " bytes differ";
  }

  // config.json: every field of the imported one survives.
  const json cin = json::parse(test::read_text(dir.file("in/config.json")));
  const json cout = json::parse(test::read_text(dir.file("out/config.json")));
  for (auto& [k, v] : cin.items()) EXPECT_EQ(cout.value(k, json()), v) << k;

  if (sharded) {
    EXPECT_FALSE(fs::exists(dir.file("out/model.safetensors")));
    const json idx = json::parse(test::read_text(dir.file("out/model.safetensors.index.json")));
    uint64_t total = 0;
    for (const auto& [n, t] : out) total += t.bytes.size();
    EXPECT_EQ(idx["metadata"]["total_size"].get<uint64_t>(), total);
    EXPECT_EQ(idx["weight_map"].size(), out.size());
    std::set<std::string> shards;
    for (auto& [k, v] : idx["weight_map"].items()) shards.insert(v.get<std::string>());
    EXPECT_GT(shards.size(), 2u);
    for (const auto& sh : shards) {
      EXPECT_LE(fs::file_size(dir.file("out/" + sh)), 3000u + 2048u) << sh;  // data <= limit (one tensor each max) + header
      st::SafetensorsFile f(dir.file("out/" + sh));
      EXPECT_EQ(f.header().metadata.at("format"), "pt") << "transformers requires format=pt";
      char want[64];
      std::snprintf(want, sizeof want, "model-%05d-of-%05d.safetensors",
                    static_cast<int>(std::distance(shards.begin(), shards.find(sh))) + 1, static_cast<int>(shards.size()));
      EXPECT_EQ(sh, want);
    }
  } else {
    EXPECT_FALSE(fs::exists(dir.file("out/model.safetensors.index.json")));
    st::SafetensorsFile f(dir.file("out/model.safetensors"));
    EXPECT_EQ(f.header().metadata.at("format"), "pt");
  }
  // The export imports again into the same model.
  ModelConfig back = model_config_from_hf(dir.file("out/config.json"), ModelConfig{});
  LlamaModel again(back);
  import_hf_weights(again, dir.file("out"));
  LlamaModel imported(back);
  load_weights(imported, dir.file("run/model.h5"));
  EXPECT_TRUE(torch::equal(logits_of(again), logits_of(imported)));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HfRoundTrip,
                         ::testing::Combine(::testing::Values(torch::kBFloat16, torch::kFloat16, torch::kFloat32),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           const auto dt = std::get<0>(info.param);
                           return std::string(dt == torch::kBFloat16 ? "bf16" : dt == torch::kFloat16 ? "fp16" : "fp32") +
                                  (std::get<1>(info.param) ? "_sharded" : "_single");
                         });

// ---- Export ----

TEST(HfExport, ConfigJsonWithoutAnImportedOne) {
  for (const Variant& v : kVariants) {
    if (v.model_type == "mistral") continue;  // without a base, only llama or qwen2 come out
    const ModelConfig m = tiny(v);
    const json j = json::parse(hf_config_json(m, "", st::Dtype::kBF16));
    EXPECT_EQ(j["model_type"], v.model_type) << v.name;
    EXPECT_EQ(j["architectures"][0], v.model_type == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
    EXPECT_EQ(j["hidden_size"], 16);
    EXPECT_EQ(j["intermediate_size"], 24);
    EXPECT_EQ(j["num_attention_heads"], 4);
    EXPECT_EQ(j["num_key_value_heads"], 2);
    EXPECT_EQ(j["num_hidden_layers"], 2);
    EXPECT_EQ(j["vocab_size"], 37);
    EXPECT_EQ(j["max_position_embeddings"], 32);
    EXPECT_EQ(j["tie_word_embeddings"], v.tie);
    EXPECT_EQ(j["torch_dtype"], "bfloat16");
    EXPECT_DOUBLE_EQ(j["rms_norm_eps"].get<double>(), 1e-6);
    EXPECT_DOUBLE_EQ(j["rope_theta"].get<double>(), m.rope_theta);
    if (v.model_type == "llama") {
      EXPECT_EQ(j["attention_bias"], false);
    }
    // And it maps back onto the same shape.
    test::TempDir dir;
    test::write_text(dir.file("config.json"), j.dump());
    const ModelConfig b = model_config_from_hf(dir.file("config.json"), ModelConfig{});
    EXPECT_EQ(b.ff_dim(), m.ff_dim());
    EXPECT_EQ(b.qkv_bias, m.qkv_bias);
    EXPECT_EQ(b.tie_embeddings, m.tie_embeddings);
    EXPECT_EQ(b.kv_heads(), m.kv_heads());
  }
  // A llama base cannot describe q/k/v biases: the export says qwen2.
  ModelConfig q = tiny({"qwen2", "qwen2", false});
  const json j = json::parse(hf_config_json(q, R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})", st::Dtype::kF32));
  EXPECT_EQ(j["model_type"], "qwen2");
  EXPECT_EQ(j["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(j["torch_dtype"], "float32");
}

TEST(HfExport, ReexportReplacesAPreviousExportAndRefusesOtherDirectories) {
  const ModelConfig cfg = tiny({"llama", "llama", false});
  auto m = source_model(cfg, 61);
  test::TempDir dir("bcd-hf");
  const std::string out = dir.file("out");
  export_hf_model(*m, out, st::Dtype::kBF16, 2000, "");
  EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  // Into the previous export, unsharded: the shards and the index go.
  export_hf_model(*m, out, st::Dtype::kBF16, 5'000'000'000, "");
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"config.json", "model.safetensors"}));

  // A directory with anything else is left alone.
  const std::string foreign = dir.file("foreign");
  fs::create_directories(foreign);
  test::write_text(foreign + "/notes.txt", "mine");
  expect_has(error_of([&] { export_hf_model(*m, foreign, st::Dtype::kBF16, 5'000'000'000, ""); }),
             {foreign, "not a previous bcdtrain export", "notes.txt"});
  EXPECT_EQ(test::read_text(foreign + "/notes.txt"), "mine");
  // Nor is a HF directory someone else wrote, even with only export-like names.
  const std::string hf = dir.file("hf");
  write_hf_dir(*m, "llama", hf);
  fs::remove(hf + "/tokenizer.model");
  const std::string before = test::read_text(hf + "/model.safetensors");
  expect_has(error_of([&] { export_hf_model(*m, hf, st::Dtype::kBF16, 5'000'000'000, ""); }),
             {hf, "model.safetensors was not written by bcdtrain"});
  EXPECT_EQ(test::read_text(hf + "/model.safetensors"), before);
  // A file where the directory should be.
  test::write_text(dir.file("file"), "x");
  expect_has(error_of([&] { export_hf_model(*m, dir.file("file"), st::Dtype::kBF16, 5'000'000'000, ""); }),
             {"not a directory"});
}

// ---- init_from and weights files ----

TEST(InitFrom, WeightsFileGivesTheShapeAndMustMatchTheModel) {
  const ModelConfig cfg = tiny({"llama", "llama", false});
  auto src = source_model(cfg, 71);
  test::TempDir dir;
  const std::string path = dir.file("w.h5");
  Config c;
  c.model = cfg;
  save_weights(*src, path, config_to_toml(c));

  ModelConfig base;  // defaults: d_model 256 ...
  base.init_from = path;
  base.init_std = 0.5;
  const ModelConfig mc = resolve_model_config(base);
  EXPECT_EQ(mc.d_model, 16);
  EXPECT_EQ(mc.ff_dim(), 24);
  EXPECT_EQ(mc.vocab_size, 37);
  EXPECT_DOUBLE_EQ(mc.init_std, 0.5) << "bcdtrain-only fields stay";
  LlamaModel dst(mc);
  load_initial_weights(dst, path);
  EXPECT_TRUE(torch::equal(logits_of(dst), logits_of(*src)));

  // Same element counts, other head split: load_weights alone would take it silently.
  ModelConfig heads = cfg;
  heads.n_heads = 2;
  heads.n_kv_heads = 2;
  LlamaModel wrong(heads);
  expect_has(error_of([&] { load_initial_weights(wrong, path); }), {path, "n_heads = 4", "model config has 2"});
  ModelConfig ff = cfg;
  ff.d_ff = 32;
  LlamaModel wrong_ff(ff);
  expect_has(error_of([&] { load_initial_weights(wrong_ff, path); }), {path, "d_ff = 24"});

  // hf_config, when set, wins over the file for the shape.
  test::write_text(dir.file("config.json"), hf_config(cfg, "llama").dump());
  base.hf_config = dir.file("config.json");
  base.init_from = "hf:" + dir.file("elsewhere");
  EXPECT_EQ(resolve_model_config(base).hf_config, dir.file("config.json"));
}

TEST(InitFrom, ConfigValidation) {
  EXPECT_NO_THROW(load_config("", {"--model.init_from=hf:/some/dir"}));
  EXPECT_NO_THROW(load_config("", {"--model.init_from=runs/x/model.h5"}));
  // The shape comes from the file: d_model = 30 is not checked against n_heads here.
  EXPECT_NO_THROW(load_config("", {"--model.init_from=hf:/d", "--model.d_model=30"}));
  expect_has(error_of([] { load_config("", {"--model.init_from=weights.bin"}); }), {"init_from", "weights.bin", "hf:DIR"});
  expect_has(error_of([] { load_config("", {"--model.init_from=hf:"}); }), {"init_from"});
  ModelConfig m = tiny({"llama", "llama", false});
  LlamaModel model(m);
  EXPECT_NO_THROW(load_initial_weights(model, ""));
  expect_has(error_of([&] { load_initial_weights(model, "hf:/no/such/dir"); }), {"/no/such/dir", "not a directory"});
  expect_has(error_of([&] { load_initial_weights(model, "/no/such/w.h5"); }), {"/no/such/w.h5", "not found"});
}

TEST(Weights, ReaderAcceptsCheckpointsAndKeepsExtraAttributes) {
  const ModelConfig cfg = tiny({"llama", "llama", false});
  auto src = source_model(cfg, 81);
  test::TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  Config c;
  c.model = cfg;
  save_weights(*src, path, config_to_toml(c), {{"hf_dtype", "fp16"}});
  EXPECT_EQ(read_weights_attr(path, "hf_dtype"), "fp16");
  EXPECT_EQ(read_weights_attr(path, "absent"), "");
  {
    H5::H5File f(path, H5F_ACC_RDWR);
    f.removeAttr("format");
    H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
    f.createAttribute("format", t, H5::DataSpace(H5S_SCALAR)).write(t, std::string("bcdtrain-checkpoint"));
  }
  LlamaModel dst(cfg);
  EXPECT_NO_THROW(load_weights(dst, path));
  EXPECT_TRUE(torch::equal(logits_of(dst), logits_of(*src)));
  {
    H5::H5File f(path, H5F_ACC_RDWR);
    f.removeAttr("format");
    H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
    f.createAttribute("format", t, H5::DataSpace(H5S_SCALAR)).write(t, std::string("something-else"));
  }
  expect_has(error_of([&] { load_weights(dst, path); }), {path, "not a bcdtrain weights file"});
}

// ---- Through the binary ----

class HfCli : public ::testing::Test {
 protected:
  void expect_exit2(const std::string& args, const std::vector<std::string>& needles) {
    auto r = test::run_bcdtrain(args);
    EXPECT_EQ(r.exit_code, 2) << "bcdtrain " << args << "\n" << r.output;
    expect_has(r.output, needles);
  }
  test::TempDir dir_{"bcd-hf-cli"};
};

TEST_F(HfCli, ImportThenExport) {
  auto m = source_model(tiny({"llama", "llama", false}), 91);
  write_hf_dir(*m, "llama", dir_.file("in"), stored_as(torch::kBFloat16, 2));
  auto r = test::run_bcdtrain("import --hf " + dir_.file("in") + " --out " + dir_.file("run/model.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_has(r.output, {"imported", "llama", "bf16", "2 safetensors files", "copied tokenizer.model to " + dir_.file("run/tokenizer.model")});
  r = test::run_bcdtrain("export --checkpoint " + dir_.file("run/model.h5") + " --hf " + dir_.file("out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.model"})
    EXPECT_TRUE(fs::exists(dir_.file(std::string("out/") + f))) << f << "\n" << r.output;
  EXPECT_EQ(read_hf_dir(dir_.file("out")).size(), read_hf_dir(dir_.file("in")).size());
  r = test::run_bcdtrain("export --checkpoint " + dir_.file("run/model.h5") + " --hf " + dir_.file("out") +
                         " --dtype fp32 --shard-size 4KB");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_.file("out/model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(dir_.file("out/model.safetensors")));
}

TEST_F(HfCli, BadInputExitsWith2) {
  expect_exit2("import --hf " + dir_.file("missing") + " --out " + dir_.file("w.h5"), {dir_.file("missing"), "not a directory"});
  auto m = source_model(tiny({"llama", "llama", false}), 92);
  HfDirOptions o;
  o.edit_config = [](json& c) { c["num_key_value_heads"] = 4; };
  write_hf_dir(*m, "llama", dir_.file("in"), o);
  expect_exit2("import --hf " + dir_.file("in") + " --out " + dir_.file("w.h5"),
               {"model.layers.0.self_attn.k_proj.weight", "shape [8, 16]", "expected [16, 16]"});
  EXPECT_FALSE(fs::exists(dir_.file("w.h5")));
  expect_exit2("export --checkpoint " + dir_.file("nope.h5") + " --hf " + dir_.file("out"), {dir_.file("nope.h5"), "not found"});
  expect_exit2("export --checkpoint " + dir_.file("nope.h5") + " --hf " + dir_.file("out") + " --dtype fp8", {"--dtype", "fp8"});
  expect_exit2("export --checkpoint " + dir_.file("nope.h5") + " --hf " + dir_.file("out") + " --shard-size lots",
               {"lots"});
  expect_exit2("export --hf " + dir_.file("out"), {"--checkpoint"});
}

}  // namespace
}  // namespace bcd
