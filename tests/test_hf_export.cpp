// Hugging Face export tests: import -> export reproduces every tensor byte, name and shape;
// export's config.json and directory rules; init_from and weights files; the CLI.
#include "hf_test_helpers.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace bcd {
namespace {

using namespace hf_test;
using test::error_of;

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
  EXPECT_EQ(s.tokenizer, dir.file("run/tokenizer.json"));
  EXPECT_EQ(test::read_text(dir.file("run/tokenizer.json")), test::read_text(dir.file("in/tokenizer.json")));

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

// ---- Streaming: weights files, imports and exports a piece at a time ----

// A dataset longer than a piece: written by pieces (each whole chunks, in order) and in one
// call, both read back whole and by ranges that start and end inside chunks and pieces.
TEST(StreamedWeights, PiecesAndRangesCrossChunkAndPieceBoundaries) {
  test::TempDir dir("bcd-stream");
  const uint64_t n = kStatePieceElems + 12345;
  std::vector<float> src(n);
  for (uint64_t i = 0; i < n; ++i) src[i] = static_cast<float>(i % 1000003) * 0.5f - 7.0f;
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  {
    StateFileWriter w(dir.file("s.h5"), "test", 1, "test file");
    w.floats("/a/one_call", src.data(), n);
    w.floats("/a/pieces", n, [&](uint64_t first, float* out, uint64_t count) {
      calls.emplace_back(first, count);
      std::memcpy(out, src.data() + first, count * sizeof(float));
    });
    w.commit();
  }
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], std::make_pair(uint64_t{0}, kStatePieceElems));
  EXPECT_EQ(calls[1], std::make_pair(kStatePieceElems, uint64_t{12345}));
  const StateFileReader r(dir.file("s.h5"), "test file");
  for (const char* name : {"/a/one_call", "/a/pieces"}) {
    SCOPED_TRACE(name);
    std::vector<float> whole(n);
    r.floats(name, whole.data(), n);
    EXPECT_TRUE(whole == src);
    std::vector<float> ranged(n, -1.0f);
    const uint64_t span = 3 * (uint64_t{1} << 20) + 7;  // not a chunk multiple: ranges cut chunks
    for (uint64_t first = 0; first < n; first += span) r.floats(name, first, ranged.data() + first, std::min(span, n - first));
    EXPECT_TRUE(ranged == src);
  }
  float x = 0;
  EXPECT_NO_THROW(r.floats("/a/pieces", n - 1, &x, 1));
  EXPECT_EQ(x, src[n - 1]);
  expect_has(error_of([&] { r.floats("/a/pieces", n - 1, &x, 2); }), {"s.h5", "/a/pieces", "past its end"});
}

// A file of many pieces (an 8B model's weights, a checkpoint's state) leaves the page cache a
// piece behind its writer: after the commit, at most the last pieces' pages are resident, not
// the whole file. (A tmpfs keeps every page: there the hint cannot show.)
TEST(StreamedWeights, AWrittenFileLeavesThePageCacheBehindTheWriter) {
  test::TempDir dir("bcd-cache");
  struct statfs fs {};
  ASSERT_EQ(::statfs(dir.path().c_str(), &fs), 0);
  if (fs.f_type == TMPFS_MAGIC) GTEST_SKIP() << dir.path() << " is a tmpfs: its pages are the file";
  const uint64_t n = 4 * kStatePieceElems;  // 256 MiB of floats
  {
    StateFileWriter w(dir.file("big.h5"), "test", 1, "test file");
    w.floats("/big", n, [&](uint64_t first, float* out, uint64_t count) {
      for (uint64_t i = 0; i < count; ++i) out[i] = static_cast<float>((first + i) % 65521);
    });
    w.commit();
  }
  const UniqueFd fd(::open(dir.file("big.h5").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd);
  struct stat st {};
  ASSERT_EQ(::fstat(fd.get(), &st), 0);
  const auto bytes = static_cast<uint64_t>(st.st_size);
  ASSERT_GE(bytes, n * sizeof(float));
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd.get(), 0);
  ASSERT_NE(map, MAP_FAILED);
  const uint64_t resident = test::resident_pages(map, bytes) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  ::munmap(map, bytes);
  EXPECT_LE(resident, 2 * kStatePieceElems * sizeof(float))
      << (resident >> 20) << " MiB of the " << (bytes >> 20) << " MiB file stayed in the page cache";
}

// A model whose embedding and LM head are longer than a piece (2^24 elements): the import
// writes the same weights file the model itself would, and the export gives back the imported
// bytes, though every piece ends inside a tensor and a tensor starts inside a piece.
TEST(StreamedWeights, TensorsLongerThanAPieceImportAndExportUnchanged) {
  ModelConfig cfg = tiny({"llama", "llama", false});
  cfg.d_model = 64, cfg.n_heads = 4, cfg.n_kv_heads = 2, cfg.d_ff = 96;
  cfg.vocab_size = static_cast<int64_t>(kStatePieceElems / 64) + 5;  // 16.8M-element matrices
  auto src = source_model(cfg, 7);
  test::TempDir dir("bcd-stream-hf");
  write_hf_dir(*src, "llama", dir.file("in"), stored_as(torch::kBFloat16, 2));
  import_hf_to_file(dir.file("in"), dir.file("run/model.h5"));

  LlamaModel direct(cfg);  // the same directory imported into a model
  import_hf_weights(direct, dir.file("in"));
  LlamaModel streamed(cfg);
  load_weights(streamed, dir.file("run/model.h5"));
  for (int b = 0; b < direct.n_blocks(); ++b) {
    EXPECT_TRUE(torch::equal(direct.block(b).data(), streamed.block(b).data())) << direct.block(b).name();
    // the source's values, rounded to bf16 as stored
    EXPECT_TRUE(torch::equal(direct.block(b).data(), src->block(b).data().to(torch::kBFloat16).to(torch::kFloat32)))
        << direct.block(b).name();
  }

  HfExportOptions xo;
  xo.checkpoint = dir.file("run/model.h5");
  xo.out_dir = dir.file("out");
  xo.shard_bytes = 40'000'000;  // the embedding, the layers with the head, ...
  export_hf(xo);
  const auto in = read_hf_dir(dir.file("in")), out = read_hf_dir(dir.file("out"));
  ASSERT_EQ(in.size(), out.size());
  for (const auto& [name, t] : in) {
    ASSERT_TRUE(out.count(name)) << name;
    EXPECT_TRUE(out.at(name).bytes == t.bytes) << name << " bytes differ";
  }
  // and the model's own export writes the same files
  export_hf_model(direct, dir.file("out2"), st::Dtype::kBF16, 40'000'000, "");
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"})
    EXPECT_EQ(test::read_text(dir.file(std::string("out/") + f)), test::read_text(dir.file(std::string("out2/") + f))) << f;
}

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
  fs::remove(hf + "/tokenizer.json");
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
  // An edited file fails the attributes' checksum; without one (a file from before checksums)
  // its format is what counts.
  {
    H5::H5File f(path, H5F_ACC_RDWR);
    f.removeAttr("format");
    H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
    f.createAttribute("format", t, H5::DataSpace(H5S_SCALAR)).write(t, std::string("bcdtrain-checkpoint"));
  }
  LlamaModel edited(cfg);
  expect_has(error_of([&] { load_weights(edited, path); }), {path, "fail their checksum"});
  {
    H5::H5File f(path, H5F_ACC_RDWR);
    f.removeAttr("attributes_xxh3");
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
  expect_has(r.output, {"imported", "llama", "bf16", "2 safetensors files", "copied tokenizer.json to " + dir_.file("run") + "\n"});
  // one phase, as plain lines in a pipe: the tensors stream from the safetensors into the
  // weights file (bytes read), closing with its rate
  const std::string phase = "importing " + dir_.file("in") + " into " + dir_.file("run/model.h5") + ": ";
  expect_has(r.output, {phase, " ...\n"});
  EXPECT_NE(r.output.find("/s)\nimported "), std::string::npos) << "importing closes with its rate:\n" << r.output;
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << r.output;
  // an existing output is replaced only with --force (as prepare)
  const std::string before = test::read_text(dir_.file("run/model.h5"));
  expect_exit2("import --hf " + dir_.file("in") + " --out " + dir_.file("run/model.h5"),
               {dir_.file("run/model.h5"), "already exists (pass --force to replace it)"});
  EXPECT_EQ(test::read_text(dir_.file("run/model.h5")), before);
  r = test::run_bcdtrain("import --hf " + dir_.file("in") + " --out " + dir_.file("run/model.h5") + " --force");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_bcdtrain("export --checkpoint " + dir_.file("run/model.h5") + " --hf " + dir_.file("out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    EXPECT_TRUE(fs::exists(dir_.file(std::string("out/") + f))) << f << "\n" << r.output;
  EXPECT_EQ(read_hf_dir(dir_.file("out")).size(), read_hf_dir(dir_.file("in")).size());
  r = test::run_bcdtrain("export --checkpoint " + dir_.file("run/model.h5") + " --hf " + dir_.file("out") +
                         " --dtype fp32 --max-shard-size 4KB");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_.file("out/model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(dir_.file("out/model.safetensors")));
  EXPECT_EQ(r.output.find("no tokenizer beside"), std::string::npos) << r.output;
  // Without a tokenizer beside the weights the export says it has none (it used to say nothing).
  fs::create_directories(dir_.file("bare"));
  fs::copy_file(dir_.file("run/model.h5"), dir_.file("bare/model.h5"));
  r = test::run_bcdtrain("export --checkpoint " + dir_.file("bare/model.h5") + " --hf " + dir_.file("out2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no tokenizer beside " + dir_.file("bare/model.h5") + " (nor in its run directory): the "
                          "export has none"),
            std::string::npos) << r.output;
}

// Whether process `pid` has a handler for `sig` (SigCgt of /proc/PID/status): bcdtrain's stop
// handlers are in place once its command runs.
bool catches(pid_t pid, int sig) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1)) & 1;
  return false;
}

// An export stopped by SIGTERM while it reads used to exit 143 without a word: it says it was
// interrupted, and leaves no half-written export. (Held with SIGSTOP as the signal is sent, so
// the export cannot end in between; should it end before it is held, it is tried again.)
TEST_F(HfCli, AnExportStoppedBySigtermSaysSoAndLeavesNoHalfExport) {
  ModelConfig cfg = tiny({"llama", "llama", false});
  cfg.d_model = 64, cfg.n_heads = 4, cfg.n_kv_heads = 2, cfg.d_ff = 96;
  cfg.vocab_size = static_cast<int64_t>(kStatePieceElems / 64) + 5;  // 16.8M-element embedding and head
  auto src = source_model(cfg, 5);
  write_hf_dir(*src, "llama", dir_.file("in"), stored_as(torch::kBFloat16, 2));
  import_hf_to_file(dir_.file("in"), dir_.file("run/model.h5"));
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::string out = dir_.file("out" + std::to_string(attempt)), log = dir_.file("export.log");
    test::Background bg("export --checkpoint " + dir_.file("run/model.h5") + " --hf " + out, log);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!catches(bg.pid, SIGTERM) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (::kill(bg.pid, SIGSTOP) != 0 || !catches(bg.pid, SIGTERM)) {  // ended first: try again
      bg.wait();
      continue;
    }
    ::kill(bg.pid, SIGTERM);
    ::kill(bg.pid, SIGCONT);
    const int code = bg.wait();
    const std::string text = test::read_text(log);
    if (code == 0) continue;  // it had written its last piece: try again
    EXPECT_EQ(code, 128 + SIGTERM) << text;
    EXPECT_NE(text.find("interrupted by SIGTERM: stopped, and nothing half-written was left"), std::string::npos) << text;
    EXPECT_FALSE(fs::exists(out + "/model.safetensors")) << text;
    EXPECT_FALSE(fs::exists(out + "/config.json")) << text;
    return;
  }
  ADD_FAILURE() << "the export ended before it could be stopped, three times";
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
  // a config.json describing far more than the files hold is refused before the model is built
  // (100000 layers of this shape: 0.9 GB allocated before the first tensor was checked)
  o.edit_config = [](json& c) { c["num_hidden_layers"] = 100000; };
  write_hf_dir(*m, "llama", dir_.file("huge"), o);
  expect_exit2("import --hf " + dir_.file("huge") + " --out " + dir_.file("w.h5"),
               {dir_.file("huge") + "/config.json: describes a model of", "100000 layers",
                "config.json does not match the weights"});
  EXPECT_FALSE(fs::exists(dir_.file("w.h5")));
  expect_exit2("export --checkpoint " + dir_.file("nope.h5") + " --hf " + dir_.file("out"), {dir_.file("nope.h5"), "not found"});
  expect_exit2("export --checkpoint " + dir_.file("nope.h5") + " --hf " + dir_.file("out") + " --dtype fp8", {"--dtype", "fp8"});
  expect_exit2("export --checkpoint " + dir_.file("nope.h5") + " --hf " + dir_.file("out") + " --shard-size lots",
               {"lots"});
  expect_exit2("export --hf " + dir_.file("out"), {"--checkpoint"});
}

TEST_F(HfCli, HelpNamesEveryFamilyAndTheShardLimit) {
  const auto imp = test::run_bcdtrain("import --help");
  EXPECT_EQ(imp.exit_code, 0) << imp.output;
  for (const char* family : Choices<HfFamily>::names) EXPECT_NE(imp.output.find(family), std::string::npos) << family;
  const auto exp = test::run_bcdtrain("export --help");
  expect_has(exp.output, {"--max-shard-size", "model.safetensors.index.json", "5GB"});
}

}  // namespace
}  // namespace bcd
