// Hostile JSON (base/json_read.h): every bound of the reader, then each kind of file the program
// reads, nested 200,000 deep or grown past its size, refused with one line naming the file, the
// place and the bound (exit 2 from the binary), never a crash of the recursive code behind it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_read.h"
#include "data/chat.h"
#include "data/hf_tokenizer.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace bcd {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using test::error_of;

constexpr int kDeep = 200000;  // the hostile probe's depth: far past any stack

// `inner` inside n arrays.
std::string nested(int n, const std::string& inner = "1") { return std::string(n, '[') + inner + std::string(n, ']'); }

void expect_has(const std::string& msg, const std::vector<std::string>& needles) {
  ASSERT_FALSE(msg.empty()) << "no error";
  for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
}

void expect_exit2(const test::RunResult& r, const std::vector<std::string>& needles) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bcdtrain: error: "), std::string::npos) << r.output;
  for (const std::string& n : needles) EXPECT_NE(r.output.find(n), std::string::npos) << "missing '" << n << "' in: " << r.output;
}

// bytes read by this process so far (/proc/self/io rchar: every read(), cache hits included)
uint64_t bytes_read_so_far() {
  std::ifstream in("/proc/self/io");
  std::string key;
  uint64_t v = 0;
  while (in >> key >> v)
    if (key == "rchar:") return v;
  return 0;
}

// A file of `size` bytes holding no data (a hole): sizes past any bound cost nothing.
void write_sparse(const std::string& path, uint64_t size) {
  { std::ofstream(path, std::ios::binary) << ' '; }
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size)), 0) << path;
}

// A BPE tokenizer.json over "a", "b", "ab" with `edit` applied.
std::string tokenizer_json(const std::function<void(json&)>& edit = nullptr) {
  json j = json::parse(R"({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})");
  if (edit) edit(j);
  return j.dump();
}

// tokenizer_json() with the value of top-level `key` replaced by the JSON text `raw`: text no
// json value can hold (200,000 levels would crash its own dump()).
std::string tokenizer_json_with(const std::string& key, const std::string& raw) {
  std::string s = tokenizer_json([&](json& j) { j[key] = "@raw@"; });
  return s.replace(s.find("\"@raw@\""), 7, raw);
}

// ---- The reader's bounds ----

TEST(JsonRead, DepthIsRefusedAtTheFirstBracketPastTheBound) {
  const std::string ok = nested(kJsonMaxDepth);
  EXPECT_EQ(parse_json(ok, kJsonConfig, "c.json").dump(), ok);
  const std::string deep = "{\"a\":\n  " + nested(kDeep) + "}";
  // The object is level 1; the 128th array is level 129, at column 3 + 127 of line 2.
  expect_has(error_of([&] { parse_json(deep, kJsonConfig, "c.json"); }),
             {"c.json: line 2, column 130: arrays and objects nested 129 deep", "JSON config file is 128 levels"});
  // A one-line kind names columns only: its source names the line.
  expect_has(error_of([&] { parse_json(nested(kDeep), kJsonlRecord, "d.jsonl:7"); }),
             {"d.jsonl:7: column 129: arrays and objects nested 129 deep", "JSONL record is 128 levels"});
  // Past the bound is refused with or without exceptions for syntax errors.
  EXPECT_NE(error_of([&] { parse_json(nested(kDeep), kJsonlRecord, "d", /*allow_exceptions=*/false); }), "");
}

TEST(JsonRead, BracketsInsideStringsAreText) {
  const std::string text = "[\"" + std::string(1000, '[') + "\\\"{{\", \"]]]\"]";
  const json j = parse_json(text, kJsonConfig, "s.json");
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j[0].get<std::string>().size(), 1003u);
}

TEST(JsonRead, StringsAndValueCountsAreBounded) {
  const JsonLimits lim{"test kind", 1 << 20, 8, 10, 6, false};
  EXPECT_EQ(parse_json(R"(["0123456789", {"k": null}])", lim, "t").size(), 2u);  // 5 values
  expect_has(error_of([&] { parse_json(R"(["0123456789a"])", lim, "t"); }),
             {"t: line 1, column 2: a string of 11 bytes", "test kind is 10 bytes"});
  // escapes count as written
  expect_has(error_of([&] { parse_json(R"(["01234\"6789"])", lim, "t"); }), {"a string of 11 bytes"});
  expect_has(error_of([&] { parse_json(R"({"0123456789ab": 1})", lim, "t"); }), {"column 2: a string of 12 bytes"});
  expect_has(error_of([&] { parse_json("[1, 2.5e3, true, null, -4, false]", lim, "t"); }),
             {"t: line 1, column 28: value number 7", "test kind is 6 values"});
  expect_has(error_of([&] { parse_json(std::string(2 << 20, ' '), lim, "t"); }), {"t: 2097152 bytes", "1 MiB"});
}

TEST(JsonRead, InvalidJsonIsLeftToTheParserAndItsCallersWording) {
  EXPECT_THROW(parse_json("{\"a\": ", kJsonConfig, "x"), json::parse_error);
  EXPECT_TRUE(parse_json("{\"a\": ", kJsonConfig, "x", /*allow_exceptions=*/false).is_discarded());
  EXPECT_TRUE(parse_json("]]]]", kJsonConfig, "x", /*allow_exceptions=*/false).is_discarded());
}

// Found by fuzz_hf_config and fuzz_tokenizer_json: nlohmann throws out_of_range (not a
// parse_error) for a number past a double, which escaped the callers as an internal failure.
TEST(JsonRead, ANumberPastADoubleIsAUserError) {
  expect_has(error_of([] { parse_json("{\"a\": 1e4336}", kJsonConfig, "c.json"); }),
             {"c.json: number overflow parsing '1e4336'", "limit for a JSON config file"});
  EXPECT_TRUE(parse_json("[1e4336]", kJsonConfig, "c.json", /*allow_exceptions=*/false).is_discarded());
  expect_has(error_of([] { parse_json("[-" + std::string(500, '9') + "e999]", kJsonConfig, "c.json"); }),
             {"c.json: number overflow parsing '-999", "...;"});
}

TEST(JsonRead, AFileTooBigIsRefusedBeforeItIsRead) {
  test::TempDir tmp("json-big");
  const std::string path = tmp.file("tokenizer.json");
  write_sparse(path, (uint64_t{1} << 30) + 1);
  const uint64_t before = bytes_read_so_far();
  expect_has(error_of([&] { read_json_file(path, kJsonTokenizer, "tokenizer file"); }),
             {path, "1 GiB (1073741825 bytes)", "the limit for a tokenizer.json is 512 MiB", "not read"});
  EXPECT_LT(bytes_read_so_far() - before, uint64_t{1} << 20) << "the file was read before it was judged";
  // A device or pipe has no size to judge: it is read up to the bound, no further.
  const JsonLimits small{"small kind", 4096, 8, 4096, 4096, false};
  expect_has(error_of([&] { read_json_file("/dev/zero", small, "zeros"); }), {"/dev/zero: more than 4096 bytes"});
  expect_has(error_of([&] { read_json_file(tmp.path(), small, "a dir"); }), {"cannot read a dir", "a directory"});
}

TEST(JsonRead, LinesAreBoundedAsTheyAreRead) {
  const JsonLimits lim{"short line", 8, 8, 8, 8, true};
  std::istringstream in("12345678\n123456789\nlast");
  std::string line;
  ASSERT_TRUE(read_json_line(in, &line, lim, "f.jsonl", 1));
  EXPECT_EQ(line, "12345678");
  expect_has(error_of([&] { read_json_line(in, &line, lim, "f.jsonl", 2); }),
             {"f.jsonl:2: a line of more than 8 bytes; the limit for a short line is 8 bytes"});
  std::istringstream tail("a\n\nb");
  std::vector<std::string> lines;
  for (int64_t n = 1; read_json_line(tail, &line, lim, "t", n); ++n) lines.push_back(line);
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "", "b"}));
}

// ---- Each kind of file ----

TEST(JsonRead, DeepSafetensorsHeaderIsRefused) {
  EXPECT_EQ(st::kMaxHeaderBytes, kJsonSafetensorsHeader.max_bytes);
  const std::string header = "{\"__metadata__\": " + nested(kDeep, "\"x\"") + "}";
  expect_has(error_of([&] { st::parse_header_json(header.data(), header.size(), 0, "m.safetensors"); }),
             {"m.safetensors: line 1, column", "safetensors header is 128 levels"});
}

TEST(JsonRead, DeepJsonlRecordIsRefusedNamingItsLine) {
  const std::string line = "{\"messages\": " + nested(kDeep, "{}") + "}";
  expect_has(error_of([&] { parse_chat_record(line, "chat.jsonl", 3, nullptr); }),
             {"chat.jsonl:3: column", "JSONL record is 128 levels"});
}

TEST(JsonRead, DeepHfConfigIsRefused) {
  test::TempDir tmp("json-config");
  const std::string path = tmp.file("config.json");
  test::write_text(path, R"({"model_type": "llama", "rope_scaling": )" + nested(kDeep) + "}");
  expect_has(error_of([&] { model_config_from_hf(path, ModelConfig{}); }), {path, "JSON config file is 128 levels"});
}

// ---- tokenizer.json: the JSON and the Sequences in it ----

// Sequences of normalizers `n` deep, the innermost a Lowercase.
json nested_normalizers(int n) {
  json j = {{"type", "Lowercase"}};
  for (int i = 0; i < n; ++i) j = {{"type", "Sequence"}, {"normalizers", json::array({j})}};
  return j;
}

TEST(JsonRead, TokenizerSequencesNestAtMost16Deep) {
  test::TempDir tmp("json-seq");
  const std::string path = tmp.file("tokenizer.json");
  test::write_text(path, tokenizer_json([](json& j) { j["normalizer"] = nested_normalizers(16); }));
  EXPECT_EQ(HfTokenizer::load(path).encode("AB", false), (std::vector<int32_t>{2}));
  test::write_text(path, tokenizer_json([](json& j) { j["normalizer"] = nested_normalizers(17); }));
  expect_has(error_of([&] { HfTokenizer::load(path); }),
             {path, "a Sequence inside 16 others; the limit for a tokenizer.json is 16 levels of Sequence"});
  // decoders and pre-tokenizers alike
  test::write_text(path, tokenizer_json([](json& j) {
                     json d = {{"type", "Fuse"}};
                     for (int i = 0; i < 17; ++i) d = {{"type", "Sequence"}, {"decoders", json::array({d})}};
                     j["decoder"] = d;
                   }));
  expect_has(error_of([&] { HfTokenizer::load(path); }), {path, "decoder (Sequence)", "16 levels of Sequence"});
  // 5,000 Sequences deep: three JSON levels each, refused by the JSON bound before any is built
  std::string deep = "{\"type\": \"Lowercase\"}";
  for (int i = 0; i < 5000; ++i) deep = "{\"type\": \"Sequence\", \"normalizers\": [" + deep + "]}";
  test::write_text(path, tokenizer_json_with("normalizer", deep));
  expect_has(error_of([&] { HfTokenizer::load(path); }), {path, "tokenizer.json is 128 levels"});
}

// ---- The binary: exit 2 and one line, where the probe got a segmentation fault ----

class HostileFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_text(tmp_.file("tokenizer.json"), tokenizer_json());
    test::write_text(tmp_.file("text.txt"), "ab\n");
  }
  test::RunResult tokenize(const std::string& tokenizer, const std::string& input, const std::string& flags = "") {
    return test::run_bcdtrain("tokenize " + flags + " --tokenizer " + tokenizer + " --input " + input);
  }
  test::TempDir tmp_{"json-cli"};
};

TEST_F(HostileFiles, TokenizerOptionNested200000Deep) {
  const std::string tok = tmp_.file("deep.json");
  test::write_text(tok, tokenizer_json_with("version", nested(kDeep)));
  expect_exit2(tokenize(tok, tmp_.file("text.txt")), {tok + ": line 1, column", "tokenizer.json is 128 levels"});
}

TEST_F(HostileFiles, GenerationConfigEosNested200000Deep) {
  fs::create_directory(tmp_.file("gen"));
  fs::copy_file(tmp_.file("tokenizer.json"), tmp_.file("gen/tokenizer.json"));
  test::write_text(tmp_.file("gen/generation_config.json"), "{\"eos_token_id\": " + nested(kDeep) + "}");
  expect_exit2(tokenize(tmp_.file("gen"), tmp_.file("text.txt")),
               {tmp_.file("gen/generation_config.json") + ": line 1, column", "JSON metadata file is 128 levels"});
}

TEST_F(HostileFiles, HfConfigNested200000DeepWritesNothing) {
  fs::create_directory(tmp_.file("hf"));
  test::write_text(tmp_.file("hf/config.json"), "{\"model_type\": " + nested(kDeep, "\"llama\"") + "}");
  expect_exit2(test::run_bcdtrain("import --hf " + tmp_.file("hf") + " --out " + tmp_.file("out.h5")),
               {tmp_.file("hf/config.json"), "JSON config file is 128 levels"});
  EXPECT_FALSE(fs::exists(tmp_.file("out.h5")));
}

TEST_F(HostileFiles, DecodeLineNested200000Deep) {
  test::write_text(tmp_.file("ids.txt"), "[0, 1]\n" + nested(kDeep) + "\n");
  expect_exit2(tokenize(tmp_.file("tokenizer.json"), tmp_.file("ids.txt"), "--decode"),
               {tmp_.file("ids.txt") + ":2: column 129", "--decode line is 128 levels"});
}

TEST_F(HostileFiles, JsonlRecordNested200000Deep) {
  test::write_text(tmp_.file("in.jsonl"), "{\"text\": \"ab\"}\n{\"text\": \"ab\", \"meta\": " + nested(kDeep) + "}\n");
  expect_exit2(tokenize(tmp_.file("tokenizer.json"), tmp_.file("in.jsonl")),
               {tmp_.file("in.jsonl") + ":2: column", "JSONL record is 128 levels"});
}

TEST_F(HostileFiles, NumbersPastADoubleExit2) {
  fs::create_directory(tmp_.file("hf"));
  test::write_text(tmp_.file("hf/config.json"), R"({"model_type": "mistral", "intermediate_size": 1e4336})");
  expect_exit2(test::run_bcdtrain("import --hf " + tmp_.file("hf") + " --out " + tmp_.file("out.h5")),
               {tmp_.file("hf/config.json") + ": number overflow parsing '1e4336'"});
  const std::string tok = tmp_.file("num.json");
  test::write_text(tok, tokenizer_json_with("padding", "21e308"));
  expect_exit2(tokenize(tok, tmp_.file("text.txt")), {tok + ": number overflow parsing '21e308'"});
}

TEST_F(HostileFiles, TokenizerOf1GiBIsRefusedUnread) {
  fs::create_directory(tmp_.file("big"));
  write_sparse(tmp_.file("big/tokenizer.json"), (uint64_t{1} << 30) + 1);
  expect_exit2(tokenize(tmp_.file("big"), tmp_.file("text.txt")),
               {tmp_.file("big/tokenizer.json") + ": 1 GiB", "the limit for a tokenizer.json is 512 MiB"});
  // sentencepiece reads its model whole: judged by size first too
  fs::create_directory(tmp_.file("spm"));
  write_sparse(tmp_.file("spm/tokenizer.model"), (uint64_t{1} << 30) + 1);
  expect_exit2(tokenize(tmp_.file("spm"), tmp_.file("text.txt")),
               {tmp_.file("spm/tokenizer.model") + ": 1 GiB", "the limit for a sentencepiece model is 256 MiB"});
}

}  // namespace
}  // namespace bcd
