// The tokenizer.json tokenizer (data/hf_tokenizer.h) against the reference: three shipped
// families (Llama 3, Qwen3, Llama 2) over 2,119 texts whose encodings the Hugging Face
// `tokenizers` library wrote (shared/data/tokenizers/*/expected.jsonl), and small hand-written
// files for the components those three do not use, their expected ids taken from
// `tokenizers` 0.23.3 (Python bindings) on the same JSON.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "data/hf_tokenizer.h"
#include "test_util.h"

namespace bcd {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string data_dir() { return test::source_path("../shared/data/tokenizers"); }

std::vector<json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

// The shipped families, each loaded once for all the tests here.
const HfTokenizer& shipped(const std::string& family) {
  static std::map<std::string, HfTokenizer> loaded;
  auto it = loaded.find(family);
  if (it == loaded.end())
    it = loaded.emplace(family, HfTokenizer::load(data_dir() + "/" + family + "/tokenizer.json")).first;
  return it->second;
}

std::string show(const std::vector<int32_t>& v, size_t max = 24) {
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < max; ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + (v.size() > max ? ",...]" : "]");
}

// ---- The three shipped families, every line of expected.jsonl ----

class Family : public ::testing::TestWithParam<std::string> {};

TEST_P(Family, ReproducesEveryExpectedLine) {
  const std::string dir = data_dir() + "/" + GetParam();
  if (!fs::is_regular_file(dir + "/tokenizer.json") || !fs::is_regular_file(data_dir() + "/texts.jsonl"))
    GTEST_SKIP() << "no reference data at " << dir << " (shared/data/tokenizers is not checked out here)";
  const HfTokenizer& tok = shipped(GetParam());
  const std::vector<json> texts = read_jsonl(data_dir() + "/texts.jsonl");
  const std::vector<json> expected = read_jsonl(dir + "/expected.jsonl");
  ASSERT_EQ(texts.size(), expected.size());
  ASSERT_GT(texts.size(), 2000u);
  const bool byte_level = GetParam() != "llama2";
  size_t bad_ids = 0, bad_special = 0, bad_decoded = 0, bad_round_trip = 0, not_nfc = 0, shown = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].is_string() ? texts[i].get<std::string>() : texts[i].at("text").get<std::string>();
    const auto want_ids = expected[i].at("ids").get<std::vector<int32_t>>();
    const auto want_special = expected[i].at("ids_special").get<std::vector<int32_t>>();
    const auto want_decoded = expected[i].at("decoded").get<std::string>();
    const std::vector<int32_t> ids = tok.encode(text, false);
    const std::vector<int32_t> special = tok.encode(text, true);
    const std::string decoded = tok.decode(want_ids);
    const bool ok_ids = ids == want_ids, ok_special = special == want_special, ok_decoded = decoded == want_decoded;
    // Qwen3 normalizes to NFC: a text not in NFC comes back as the reference decodes it.
    const std::string back = byte_level ? tok.decode(ids) : text;
    const bool ok_round_trip = back == text || (GetParam() == "qwen3" && want_decoded != text && back == want_decoded);
    not_nfc += back != text;
    bad_ids += !ok_ids;
    bad_special += !ok_special;
    bad_decoded += !ok_decoded;
    bad_round_trip += !ok_round_trip;
    if ((!ok_ids || !ok_special || !ok_decoded || !ok_round_trip) && shown++ < 5) {
      ADD_FAILURE() << GetParam() << " line " << i + 1 << ": text " << json(text.substr(0, 120)).dump()
                    << "\n  ids " << (ok_ids ? "ok" : show(ids) + " want " + show(want_ids))
                    << "\n  ids_special " << (ok_special ? "ok" : show(special) + " want " + show(want_special))
                    << "\n  decoded " << (ok_decoded ? "ok" : json(decoded).dump() + " want " + json(want_decoded).dump())
                    << "\n  round trip " << (ok_round_trip ? "ok" : "differs");
    }
  }
  EXPECT_EQ(bad_ids, 0u) << "lines whose ids differ, of " << texts.size();
  EXPECT_EQ(bad_special, 0u) << "lines whose ids_special differ";
  EXPECT_EQ(bad_decoded, 0u) << "lines whose decoded text differs";
  EXPECT_EQ(bad_round_trip, 0u) << "lines where decode(encode(x)) != x";
  if (not_nfc > 0) std::printf("%s: %zu texts not in NFC round-trip to their NFC form\n", GetParam().c_str(), not_nfc);
}

INSTANTIATE_TEST_SUITE_P(Shipped, Family, ::testing::Values("llama3", "qwen3", "llama2"),
                         [](const auto& info) { return info.param; });

// ---- Every line, from several threads at once: one tokenizer shared read-only ----

TEST(HfTokenizer, SharedAcrossThreads) {
  const std::string dir = data_dir() + "/llama3";
  if (!fs::is_regular_file(dir + "/tokenizer.json")) GTEST_SKIP() << "no reference data at " << dir;
  const HfTokenizer& tok = shipped("llama3");
  const std::vector<json> texts = read_jsonl(data_dir() + "/texts.jsonl");
  const std::vector<json> expected = read_jsonl(dir + "/expected.jsonl");
  std::vector<size_t> bad(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < bad.size(); ++t) {
    threads.emplace_back([&, t] {
      // Each thread walks the texts from its own starting point, so the cache sees mixed orders.
      for (size_t k = 0; k < texts.size(); ++k) {
        const size_t i = (k + t * texts.size() / bad.size()) % texts.size();
        bad[t] += tok.encode(texts[i].at("text").get<std::string>(), false) !=
                  expected[i].at("ids").get<std::vector<int32_t>>();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < bad.size(); ++t) EXPECT_EQ(bad[t], 0u) << "thread " << t;
}

// Load time and single-thread speed over texts.jsonl (printed; not a pass/fail criterion).
// ---- Components the shipped files do not use: small files, the reference's encodings ----

TEST(HfTokenizer, HandMadeFilesMatchTheReference) {
  const json fixture = json::parse(test::read_text(test::source_path("tests/fixtures/hf_tokenizer/cases.json")));
  test::TempDir tmp("hf-cases");
  size_t checked = 0;
  for (const json& c : fixture.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    const std::string path = tmp.file(name + ".json");
    test::write_text(path, c.at("tokenizer").dump());
    const HfTokenizer tok = HfTokenizer::load(path);
    for (const json& t : c.at("texts")) {
      const std::string text = t.at("text").get<std::string>();
      const auto ids = t.at("ids").get<std::vector<int32_t>>();
      const std::string where = name + ", text " + json(text).dump();
      EXPECT_EQ(tok.encode(text, false), ids) << where;
      EXPECT_EQ(tok.encode(text, true), t.at("ids_special").get<std::vector<int32_t>>()) << where;
      // null: the reference panics there (its Strip decoder on an empty string); we give "".
      if (!t.at("decoded").is_null()) {
        EXPECT_EQ(tok.decode(ids), t.at("decoded").get<std::string>()) << where;
      }
      if (!t.at("decoded_skip").is_null()) {
        EXPECT_EQ(tok.decode(ids, true), t.at("decoded_skip").get<std::string>()) << where << " (skip special)";
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 500u);
}

// ---- Refusals: one error naming the component and the file ----

json minimal_tokenizer() {
  return json::parse(R"({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})");
}

struct Refusal {
  const char* what;
  std::function<void(json&)> edit;
  std::vector<std::string> said;  // what the message must name
};

TEST(HfTokenizer, RefusesWhatItDoesNotImplement) {
  const json split = json::parse(R"({"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated", "invert": false})");
  const std::vector<Refusal> cases = {
      {"model", [](json& j) { j["model"]["type"] = "WordPiece"; }, {"model", "WordPiece"}},
      {"model option", [](json& j) { j["model"]["dropout"] = 0.1; }, {"model (BPE)", "dropout"}},
      {"normalizer", [](json& j) { j["normalizer"] = {{"type", "Nmt"}}; }, {"normalizer", "Nmt"}},
      {"pre-tokenizer in a sequence",
       [](json& j) { j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "UnicodeScripts"}}}}}; },
       {"pre_tokenizer (Sequence).pretokenizers[0]", "UnicodeScripts"}},
      {"decoder", [](json& j) { j["decoder"] = {{"type", "CTC"}}; }, {"decoder", "CTC"}},
      {"post-processor", [](json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; },
       {"post_processor", "RobertaProcessing"}},
      {"option value", [&](json& j) { j["pre_tokenizer"] = split, j["pre_tokenizer"]["behavior"] = "Sideways"; },
       {"pre_tokenizer (Split)", "Sideways"}},
      {"unknown option", [&](json& j) { j["pre_tokenizer"] = split, j["pre_tokenizer"]["flavour"] = 1; },
       {"pre_tokenizer (Split)", "flavour"}},
      {"regex PCRE2 cannot take", [&](json& j) { j["pre_tokenizer"] = split, j["pre_tokenizer"]["pattern"]["Regex"] = "[a&&b]"; },
       {"pre_tokenizer (Split)", "&&"}},
      {"invalid regex", [&](json& j) { j["pre_tokenizer"] = split, j["pre_tokenizer"]["pattern"]["Regex"] = "(a"; },
       {"pre_tokenizer (Split)", "(a"}},
      {"metaspace scheme",
       [](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}}; },
       {"pre_tokenizer (Metaspace)", "sometimes"}},
      {"merge outside the vocab", [](json& j) { j["model"]["merges"] = {"a c"}; }, {"model (BPE)", "\"c\""}},
      {"version", [](json& j) { j["version"] = "2.0"; }, {"version"}},
      // A file's own size sets the memory it may ask for: an id far past the pieces, or no piece.
      {"sparse ids", [](json& j) { j["model"]["vocab"]["x"] = 50000000; },
       {"model (BPE)", "has 4 pieces but the id 50000000", "gaps are a few ids"}},
      {"empty vocab", [](json& j) { j["model"]["vocab"] = json::object(), j["model"]["merges"] = json::array(); },
       {"model (BPE)", "\"vocab\" is empty"}},
  };
  test::TempDir tmp("hf-refuse");
  const std::string path = tmp.file("tokenizer.json");
  test::write_text(path, minimal_tokenizer().dump());
  EXPECT_EQ(HfTokenizer::load(path).encode("abab", false), (std::vector<int32_t>{2, 2}));
  for (const Refusal& r : cases) {
    json j = minimal_tokenizer();
    r.edit(j);
    test::write_text(path, j.dump());
    const std::string msg = test::error_of([&] { HfTokenizer::load(path); });
    ASSERT_FALSE(msg.empty()) << r.what << ": loaded without an error";
    EXPECT_NE(msg.find(path), std::string::npos) << r.what << ": " << msg;
    for (const std::string& s : r.said) EXPECT_NE(msg.find(s), std::string::npos) << r.what << ": " << msg;
  }
}

// A pattern that searches the rest of the text again from every position is quadratic in the
// text: it gets a time budget per text (1 s plus 2 us a byte) and is refused past it, naming the
// pattern (a megabyte of "a" ran for minutes).
TEST(HfTokenizer, AQuadraticPatternIsRefusedWithinItsBudget) {
  test::TempDir tmp("hf-budget");
  json j = minimal_tokenizer();
  j["pre_tokenizer"] = json::parse(R"({"type": "Split", "pattern": {"Regex": "[ab]*c|a"}, "behavior": "Isolated", "invert": false})");
  const std::string path = tmp.file("tokenizer.json");
  test::write_text(path, j.dump());
  const HfTokenizer tok = HfTokenizer::load(path);
  EXPECT_EQ(tok.encode("aab", false).size(), 3u);  // a, a, b: the pattern works on ordinary text
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = test::error_of([&] { tok.encode(std::string(300000, 'a'), false); });
  EXPECT_NE(msg.find("the tokenizer's pattern \"[ab]*c|a\" took more than 1.6 s on a text of 300000 bytes"),
            std::string::npos) << msg;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30)) << "refused, but not within its budget";
  // A pattern that forbids PCRE2's JIT is matched by the interpreter (every encode failed).
  j["pre_tokenizer"]["pattern"]["Regex"] = "(*NO_JIT)a";
  test::write_text(path, j.dump());
  EXPECT_EQ(HfTokenizer::load(path).encode("aab", false).size(), 3u);
}

// Normalization stays linear: a run of combining marks longer than any text holds (1024) is
// refused, naming the run (utf8proc orders a run of k marks in k^2 steps: 240 KB took a minute).
TEST(HfTokenizer, ALongRunOfCombiningMarksIsRefusedNotNormalizedForAMinute) {
  test::TempDir tmp("hf-nfc");
  json j = minimal_tokenizer();
  j["normalizer"] = {{"type", "NFC"}};
  const std::string path = tmp.file("tokenizer.json");
  test::write_text(path, j.dump());
  const HfTokenizer tok = HfTokenizer::load(path);
  std::string few = "a";
  for (int i = 0; i < 30; ++i) few += "\xCC\x81";  // U+0301 COMBINING ACUTE ACCENT
  EXPECT_EQ(test::error_of([&] { tok.encode(few, false); }).find("combining marks"), std::string::npos);
  std::string many = "ab a";
  for (int i = 0; i < 100000; ++i) many += "\xCC\x81";
  const std::string msg = test::error_of([&] { tok.encode(many, false); });
  EXPECT_NE(msg.find("a run of more than 1024 combining marks (at byte 2052 of 200004)"), std::string::npos) << msg;
}

TEST(HfTokenizer, RefusesInvalidInput) {
  test::TempDir tmp("hf-input");
  const std::string path = tmp.file("tokenizer.json");
  test::write_text(path, minimal_tokenizer().dump());
  const HfTokenizer tok = HfTokenizer::load(path);
  EXPECT_NE(test::error_of([&] { tok.encode(std::string("ab\xC3(", 4), false); }).find("not valid UTF-8"), std::string::npos);
  EXPECT_NE(test::error_of([&] { tok.decode({0, 3}); }).find("outside the vocabulary"), std::string::npos);
  EXPECT_EQ(tok.vocab_size(), 3);
  EXPECT_EQ(tok.id_of("ab"), 2);
  EXPECT_EQ(tok.piece(1), "b");
}

}  // namespace
}  // namespace bcd
