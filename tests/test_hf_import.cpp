// Hugging Face import tests: a tiny HF-format model written by the test loads with the source
// model's exact logits; bad directories are rejected naming file and tensor, the model untouched.
#include <sys/stat.h>

#include "hf_test_helpers.h"

namespace bcd {
namespace {

using namespace hf_test;
using test::error_of;

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

// The tokenizer beside the model is checked before anything is written: one this program cannot
// read (WordPiece) and one of more pieces than the model has rows are refused, naming both.
TEST_F(HfImportErrors, ATokenizerThatCannotServeTheModelIsRefusedBeforeWriting) {
  write_hf_dir(*src_, "llama", dir_.path());
  const std::string out = dir_.file("out/model.h5");
  test::write_text(dir_.file("tokenizer.json"), R"({"version": "1.0", "model": {"type": "WordPiece", "vocab": {"a": 0}}})");
  expect_has(error_of([&] { import_hf_to_file(dir_.path(), out); }),
             {dir_.path(), "the tokenizer that comes with it cannot be used", "WordPiece", "nothing was written"});
  EXPECT_FALSE(fs::exists(out));
  json big = {{"version", "1.0"}, {"added_tokens", json::array()}, {"normalizer", nullptr}, {"pre_tokenizer", nullptr},
              {"post_processor", nullptr}, {"decoder", nullptr},
              {"model", {{"type", "BPE"}, {"vocab", json::object()}, {"merges", json::array()}}}};
  for (int i = 0; i < cfg_.vocab_size + 10; ++i) big["model"]["vocab"]["p" + std::to_string(i)] = i;
  test::write_text(dir_.file("tokenizer.json"), big.dump());
  expect_has(error_of([&] { import_hf_to_file(dir_.path(), out); }),
             {"has " + std::to_string(cfg_.vocab_size + 10) + " pieces but the model has " +
                  std::to_string(cfg_.vocab_size) + " embedding rows"});
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(HfImportErrors, NoWeights) {
  write_hf_dir(*src_, "llama", dir_.path());
  fs::remove(dir_.file("model.safetensors"));
  expect_has(import_error(dir_.path()), {dir_.path(), "no model.safetensors or model.safetensors.index.json"});
  expect_has(import_error(dir_.file("nope")), {dir_.file("nope"), "not a directory"});
}

// A pipe where config.json should be blocked `import` in its open until killed; a weights file
// that is a device would be read without end. Both are refused by name, at once.
TEST_F(HfImportErrors, APipeOrADeviceInsteadOfAFileIsRefusedWithoutBlocking) {
  write_hf_dir(*src_, "llama", dir_.path());
  const std::string config = dir_.file("config.json"), weights = dir_.file("model.safetensors");
  fs::remove(config);
  ASSERT_EQ(::mkfifo(config.c_str(), 0644), 0);
  auto r = test::run_shell("timeout 60 " + std::string(BCD_BINARY) + " import --hf " + dir_.path() + " --out " +
                           dir_.file("out/model.h5") + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  expect_has(r.output, {config + ": not a regular file"});
  fs::remove(config);
  write_hf_dir(*src_, "llama", dir_.path());
  fs::remove(weights);
  fs::create_symlink("/dev/zero", weights);
  r = test::run_shell("timeout 60 " + std::string(BCD_BINARY) + " import --hf " + dir_.path() + " --out " +
                      dir_.file("out/model.h5") + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  expect_has(r.output, {weights + ": not a regular file"});
  EXPECT_FALSE(fs::exists(dir_.file("out/model.h5")));
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

}  // namespace
}  // namespace bcd
