// Hugging Face tokenizers in the pipeline: the Tokenizer over a tokenizer.json and the config
// files beside it (special ids, EOS ids, chat template), chat records with single-id markers and
// exact loss masks, `bcdtrain tokenize`, and prepare -> train -> export -> import -> generate on
// a tiny model with the Llama 3 vocabulary. The shipped tokenizers are in
// shared/data/tokenizers (skipped where that is not checked out).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "data/chat.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace bcd {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string family_dir(const std::string& family) {
  return test::source_path("../shared/data/tokenizers/" + family);
}

#define SKIP_WITHOUT(family)                                                     \
  if (!fs::is_regular_file(family_dir(family) + "/tokenizer.json"))              \
  GTEST_SKIP() << "no " << family_dir(family) << " (shared/data is not checked out here)"

const Tokenizer& shipped(const std::string& family) {
  static std::map<std::string, Tokenizer> loaded;
  auto it = loaded.find(family);
  if (it == loaded.end()) it = loaded.emplace(family, Tokenizer::load(family_dir(family))).first;
  return it->second;
}

using test::error_of;

void expect_has(const std::string& text, const std::vector<std::string>& needles) {
  for (const auto& n : needles) EXPECT_NE(text.find(n), std::string::npos) << "missing '" << n << "' in: " << text;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A directory holding the family's tokenizer.json (linked) and the config files given.
std::string tokenizer_dir(const test::TempDir& tmp, const std::string& name, const std::string& family,
                          const std::vector<std::pair<std::string, std::string>>& configs) {
  const std::string dir = tmp.file(name);
  fs::create_directories(dir);
  fs::create_symlink(family_dir(family) + "/tokenizer.json", dir + "/tokenizer.json");
  for (const auto& [file, text] : configs) write(dir + "/" + file, text);
  return dir;
}

// ---- Special ids from the files ----

TEST(JsonTokenizer, SpecialIdsComeFromTheTokenizersOwnFiles) {
  SKIP_WITHOUT("llama3");
  const Tokenizer& l3 = shipped("llama3");
  EXPECT_TRUE(l3.is_json());
  EXPECT_EQ(l3.vocab_size(), 128256);
  EXPECT_EQ(l3.bos_id(), 128000);  // tokenizer_config.json: <|begin_of_text|> (its post-processor adds none)
  EXPECT_EQ(l3.eos_id(), 128001);  // <|end_of_text|>
  EXPECT_EQ(l3.eos_ids(), std::vector<int>{128001});
  EXPECT_EQ(l3.pad_id(), -1);
  EXPECT_EQ(l3.special_id("<|eot_id|>"), 128009);
  EXPECT_EQ(l3.special_id("hello"), -1);
  EXPECT_EQ(l3.encode("a<|eot_id|>b"), (std::vector<int>{64, 128009, 65}));
  // Byte-level BPE has no dummy prefix: a continuation is the text as it is.
  EXPECT_EQ(l3.encode_continuation(" world"), l3.encode(" world"));

  SKIP_WITHOUT("qwen3");
  const Tokenizer& q = shipped("qwen3");
  EXPECT_EQ(q.bos_id(), -1);  // "bos_token": null
  EXPECT_EQ(q.eos_id(), q.special_id("<|im_end|>"));
  EXPECT_EQ(q.pad_id(), q.special_id("<|endoftext|>"));
  EXPECT_GE(q.eos_id(), 0);

  SKIP_WITHOUT("llama2");
  const Tokenizer& l2 = shipped("llama2");
  EXPECT_EQ(l2.bos_id(), 1);
  EXPECT_EQ(l2.eos_id(), 2);
  EXPECT_EQ(l2.encode_special("Hi")[0], 1);
  // Its normalizer prepends "▁": a continuation drops it, so the pieces join back exactly.
  std::vector<int> joined = l2.encode("Hello");
  const std::vector<int> rest = l2.encode_continuation(" world. Hi");
  joined.insert(joined.end(), rest.begin(), rest.end());
  EXPECT_EQ(l2.decode(joined), "Hello world. Hi");
  EXPECT_NE(rest, l2.encode(" world. Hi"));
}

TEST(JsonTokenizer, GenerationConfigAddsEosIdsAndConfigsAreChecked) {
  SKIP_WITHOUT("llama3");
  test::TempDir tmp("bcd-jsontok");
  // Llama 3 instruct: eos <|eot_id|> in tokenizer_config, three EOS ids in generation_config.
  const Tokenizer inst = Tokenizer::load(tokenizer_dir(
      tmp, "inst", "llama3",
      {{"tokenizer_config.json", R"({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>"}})"},
       {"generation_config.json", R"({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]})"}}));
  EXPECT_EQ(inst.eos_id(), 128009);
  EXPECT_EQ(inst.eos_ids(), (std::vector<int>{128009, 128001, 128008}));
  EXPECT_TRUE(inst.is_eos(128008));
  EXPECT_FALSE(inst.is_eos(128000));
  // Without tokenizer_config.json, generation_config.json decides.
  const Tokenizer gen = Tokenizer::load(tokenizer_dir(tmp, "gen", "llama3", {{"generation_config.json", R"({"eos_token_id": 128009})"}}));
  EXPECT_EQ(gen.eos_id(), 128009);
  EXPECT_EQ(gen.bos_id(), -1);  // nothing says one, and the post-processor adds none
  // Bad files: named, with what was expected.
  const std::string nope = tokenizer_dir(tmp, "nope", "llama3", {{"tokenizer_config.json", R"({"eos_token": "<|nope|>"})"}});
  expect_has(error_of([&] { Tokenizer::load(nope); }), {nope + "/tokenizer_config.json", "\"eos_token\"", "<|nope|>"});
  const std::string bad = tokenizer_dir(tmp, "bad", "llama3", {{"tokenizer_config.json", "{\"eos_token\": "}});
  expect_has(error_of([&] { Tokenizer::load(bad); }), {bad + "/tokenizer_config.json", "not valid JSON"});
  const std::string range = tokenizer_dir(tmp, "range", "llama3", {{"generation_config.json", R"({"eos_token_id": [5, 999999]})"}});
  expect_has(error_of([&] { Tokenizer::load(range); }), {range + "/generation_config.json", "999999", "[0, 128256)"});
  expect_has(error_of([&] { Tokenizer::load(tmp.path()); }), {tmp.path(), "no tokenizer.json or tokenizer.model"});
}

// ---- Chat records ----

ChatRecord record() {
  return ChatRecord{{{"system", "Be brief."}, {"user", "What is 2+2?"}, {"assistant", "It is 4."},
                     {"user", "And 3+3?"}, {"assistant", "6, of course."}}};
}

// Each run of trained tokens, decoded.
std::vector<std::string> target_runs(const MaskedTokens& mt, const Tokenizer& tok) {
  std::vector<std::string> runs;
  std::vector<int> run;
  for (size_t i = 0; i <= mt.ids.size(); ++i) {
    if (i < mt.ids.size() && mt.target[i]) {
      run.push_back(mt.ids[i]);
    } else if (!run.empty()) {
      runs.push_back(tok.decode(run));
      run.clear();
    }
  }
  return runs;
}

struct ChatCase {
  std::string family;
  ChatTemplate tmpl;
  std::string whole;                  // the record as the model's own template writes it
  std::vector<std::string> runs;      // each trained run, decoded
  std::vector<std::string> markers;   // special tokens that must be single ids
};

class JsonChat : public ::testing::TestWithParam<ChatCase> {};

// Piece by piece equals the whole text encoded at once: the markers are their single ids, no
// token straddles a prompt/response boundary, and each trained run is a response and its marker.
TEST_P(JsonChat, MarkersAreSingleIdsAndMasksAreExact) {
  const ChatCase& c = GetParam();
  SKIP_WITHOUT(c.family);
  const Tokenizer& tok = shipped(c.family);
  const MaskedTokens mt = tokenize_chat(render_chat(record(), c.tmpl), tok);
  EXPECT_EQ(mt.ids, tok.encode(c.whole)) << tok.decode(mt.ids);
  EXPECT_EQ(target_runs(mt, tok), c.runs);
  for (const std::string& m : c.markers) {
    const int id = tok.special_id(m);
    ASSERT_GE(id, 0) << m;
    EXPECT_NE(std::find(mt.ids.begin(), mt.ids.end(), id), mt.ids.end()) << m;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, JsonChat,
    ::testing::Values(
        ChatCase{"llama3", ChatTemplate::kLlama3,
                 "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nIt is 4.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n6, of course.<|eot_id|><|end_of_text|>",
                 {"It is 4.<|eot_id|>", "6, of course.<|eot_id|><|end_of_text|>"},
                 {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|end_of_text|>"}},
        // Qwen's <|im_end|> is its EOS: the record ends as Qwen's template ends it, with no other.
        ChatCase{"qwen3", ChatTemplate::kChatML,
                 "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                 "<|im_start|>assistant\nIt is 4.<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n"
                 "<|im_start|>assistant\n6, of course.<|im_end|>\n",
                 {"It is 4.<|im_end|>", "6, of course.<|im_end|>"},
                 {"<|im_start|>", "<|im_end|>"}},
        ChatCase{"llama2", ChatTemplate::kLlama2,
                 "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nWhat is 2+2? [/INST] It is 4. </s>"
                 "<s>[INST] And 3+3? [/INST] 6, of course. </s>",
                 {"It is 4. </s>", "6, of course. </s>"},
                 {"<s>", "</s>"}}),
    [](const ::testing::TestParamInfo<ChatCase>& i) { return i.param.family; });

// SmolLM2's tokenizer names ChatML's <|im_start|> as its BOS and its template writes no BOS before
// the first marker: the record starts with one <|im_start|>, not two. (Qwen's files with that BOS.)
TEST(JsonChat, ABosThatIsTheTemplatesFirstMarkerIsWrittenOnce) {
  SKIP_WITHOUT("qwen3");
  test::TempDir tmp("bcd-jsontok");
  const Tokenizer tok = Tokenizer::load(tokenizer_dir(
      tmp, "smol", "qwen3", {{"tokenizer_config.json", R"({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"})"}}));
  const int im_start = tok.special_id("<|im_start|>");
  ASSERT_EQ(tok.bos_id(), im_start);
  const MaskedTokens mt = tokenize_chat(render_chat(record(), ChatTemplate::kChatML), tok);
  EXPECT_EQ(mt.ids, tok.encode("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                               "<|im_start|>assistant\nIt is 4.<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n"
                               "<|im_start|>assistant\n6, of course.<|im_end|>\n"))
      << tok.decode(mt.ids);
  EXPECT_EQ(target_runs(mt, tok), (std::vector<std::string>{"It is 4.<|im_end|>", "6, of course.<|im_end|>"}));
  // A BOS that is not the text's first token stays (Llama 3's <|begin_of_text|>, above); one before
  // text that starts otherwise stays too: the plain layout under this tokenizer.
  const MaskedTokens plain = tokenize_chat(render_chat(record(), ChatTemplate::kPlain), tok);
  ASSERT_GE(plain.ids.size(), 2u);
  EXPECT_EQ(plain.ids[0], im_start);
  EXPECT_NE(plain.ids[1], im_start);
}

TEST(JsonChat, TheTemplateIsRecognizedFromTheTokenizersConfig) {
  SKIP_WITHOUT("llama3");
  SKIP_WITHOUT("qwen3");
  SKIP_WITHOUT("llama2");
  const Tokenizer& l3 = shipped("llama3");
  EXPECT_EQ(recognize_chat_template(l3.chat_template_source(), l3.chat_template_file()), ChatTemplate::kLlama3);
  EXPECT_EQ(l3.chat_template_file(), family_dir("llama3") + "/tokenizer_config.json");
  const Tokenizer& q = shipped("qwen3");
  EXPECT_EQ(recognize_chat_template(q.chat_template_source(), q.chat_template_file()), ChatTemplate::kChatML);
  // Llama 2's shipped config has no template; an unknown one names the choices.
  EXPECT_TRUE(shipped("llama2").chat_template_source().empty());
  expect_has(error_of([] { recognize_chat_template("", "d/tokenizer_config.json"); }),
                   {"d/tokenizer_config.json", "holds no chat_template", "plain, llama2, llama3, chatml"});
  expect_has(error_of([] { recognize_chat_template("{{ messages }}", "d/tokenizer_config.json"); }),
                   {"d/tokenizer_config.json", "none of the families", "plain, llama2, llama3, chatml"});
  // chat_template.jinja beside the tokenizer (newer transformers) wins over tokenizer_config.json.
  test::TempDir tmp("bcd-jsontok");
  const std::string dir = tokenizer_dir(tmp, "jinja", "llama3",
                                        {{"tokenizer_config.json", R"({"chat_template": "{{ '[INST]' }}"})"},
                                         {"chat_template.jinja", "{{ '<|im_start|>' }}"}});
  const Tokenizer j = Tokenizer::load(dir);
  EXPECT_EQ(recognize_chat_template(j.chat_template_source(), j.chat_template_file()), ChatTemplate::kChatML);
  EXPECT_EQ(j.chat_template_file(), dir + "/chat_template.jinja");
}

// ---- bcdtrain tokenize ----

std::vector<json> read_jsonl(const std::string& path, size_t max) {
  std::ifstream in(path);
  std::vector<json> out;
  for (std::string line; out.size() < max && std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

std::vector<json> output_lines(const std::string& out) {
  std::vector<json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) v.push_back(json::parse(line));
  return v;
}

TEST(TokenizeCommand, PrintsTheReferenceIdsAndDecodesThemBack) {
  SKIP_WITHOUT("llama2");
  test::TempDir tmp("bcd-tokenize");
  const std::string texts = test::source_path("../shared/data/tokenizers/texts.jsonl");
  const std::vector<json> expected = read_jsonl(family_dir("llama2") + "/expected.jsonl", 200);
  {
    std::ifstream in(texts);
    std::ofstream out(tmp.file("in.jsonl"));
    std::string line;
    for (size_t i = 0; i < expected.size() && std::getline(in, line); ++i) out << line << "\n";
  }
  auto r = test::run_bcdtrain("tokenize --tokenizer " + family_dir("llama2") + " --input " + tmp.file("in.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<json> ids = output_lines(r.output);
  ASSERT_EQ(ids.size(), expected.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], expected[i]["ids"]) << "line " << i + 1;
  r = test::run_bcdtrain("tokenize --add-special --tokenizer " + family_dir("llama2") + "/tokenizer.json --input " +
                         tmp.file("in.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<json> special = output_lines(r.output);
  ASSERT_EQ(special.size(), expected.size());
  for (size_t i = 0; i < special.size(); ++i) EXPECT_EQ(special[i], expected[i]["ids_special"]) << "line " << i + 1;
  {
    std::ofstream out(tmp.file("ids.jsonl"));
    for (const json& e : expected) out << e["ids"].dump() << "\n";
  }
  r = test::run_bcdtrain("tokenize --decode --tokenizer " + family_dir("llama2") + " --input " + tmp.file("ids.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<json> decoded = output_lines(r.output);
  ASSERT_EQ(decoded.size(), expected.size());
  for (size_t i = 0; i < decoded.size(); ++i) EXPECT_EQ(decoded[i], expected[i]["decoded"]) << "line " << i + 1;
  // Plain text: a document a line, an empty line an empty array.
  write(tmp.file("plain.txt"), "Hello world\n\n{not json\n");
  r = test::run_bcdtrain("tokenize --tokenizer " + family_dir("llama2") + " --input " + tmp.file("plain.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Tokenizer& tok = shipped("llama2");
  const std::vector<json> plain = output_lines(r.output);
  ASSERT_EQ(plain.size(), 3u);
  EXPECT_EQ(plain[0], json(tok.encode("Hello world")));
  EXPECT_EQ(plain[1], json::array());
  EXPECT_EQ(plain[2], json(tok.encode("{not json")));
}

TEST(TokenizeCommand, ABadLineIsNamedAndExits2) {
  SKIP_WITHOUT("llama2");  // the smallest file: each case loads it
  test::TempDir tmp("bcd-tokenize");
  const std::string tok = family_dir("llama2");
  write(tmp.file("a.jsonl"), "{\"text\": \"fine\"}\n{\"txt\": \"no\"}\n");
  auto r = test::run_bcdtrain("tokenize --tokenizer " + tok + " --input " + tmp.file("a.jsonl"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  expect_has(r.output, {tmp.file("a.jsonl") + ":2:", "no \"text\""});
  write(tmp.file("b.jsonl"), "{\"text\": \"fine\"}\nplain words\n");
  r = test::run_bcdtrain("tokenize --tokenizer " + tok + " --input " + tmp.file("b.jsonl"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  expect_has(r.output, {tmp.file("b.jsonl") + ":2:", "not a JSON object"});
  write(tmp.file("c.txt"), "fine\nbad \xff byte\n");
  r = test::run_bcdtrain("tokenize --tokenizer " + tok + " --input " + tmp.file("c.txt"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  expect_has(r.output, {tmp.file("c.txt") + ":2:", "not valid UTF-8"});
  write(tmp.file("d.jsonl"), "[1, 2]\n[1, 32000]\n");
  r = test::run_bcdtrain("tokenize --decode --tokenizer " + tok + " --input " + tmp.file("d.jsonl"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  expect_has(r.output, {tmp.file("d.jsonl") + ":2:", "32000", "from 0 to 31999"});
  r = test::run_bcdtrain("tokenize --tokenizer " + tmp.path() + " --input " + tmp.file("d.jsonl"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  expect_has(r.output, {tmp.path(), "no tokenizer.json or tokenizer.model"});
}

// ---- The whole path on the Llama 3 vocabulary ----

// prepare (LIMA records, the template recognized from tokenizer_config.json) -> train a tiny
// model -> export --hf (the tokenizer files go along, byte for byte) -> import -> generate, which
// lays the prompt out with Llama 3's single-id headers.
TEST(JsonTokenizerRun, PrepareTrainExportImportGenerateOnTheLlama3Vocabulary) {
  SKIP_WITHOUT("llama3");
  const std::string lima = test::source_path("../shared/data/lima-900.jsonl");
  if (!fs::is_regular_file(lima)) GTEST_SKIP() << "no " << lima;
  test::TempDir tmp("bcd-jsonrun");
  {
    std::ifstream in(lima);
    std::ofstream out(tmp.file("lima.jsonl"));
    std::string line;
    for (int i = 0; i < 60 && std::getline(in, line); ++i) out << line << "\n";
  }
  // The model's directory as shipped, with the two config files Meta's also holds.
  const std::string model_dir = tmp.file("Meta-Llama-3-8B");
  fs::create_directories(model_dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(family_dir("llama3") + "/" + f, model_dir + "/" + f);
  write(model_dir + "/generation_config.json", R"({"bos_token_id": 128000, "eos_token_id": [128001, 128009]})");
  write(model_dir + "/special_tokens_map.json", R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"})");
  const std::vector<std::string> files = {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                                          "special_tokens_map.json"};
  auto r = test::run_bcdtrain("prepare --input " + tmp.file("lima.jsonl") + " --out " + tmp.file("data") +
                              " --tokenizer " + model_dir + " --chat-template auto --val-fraction 0.1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_has(r.output, {"vocab 128256", "llama3 template, recognized from the tokenizer's chat_template"});
  for (const std::string& f : files) EXPECT_EQ(test::read_text(tmp.file("data/" + f)), test::read_text(model_dir + "/" + f)) << f;
  EXPECT_EQ(Tokenizer::load(tmp.file("data")).eos_ids(), (std::vector<int>{128001, 128009}));

  r = test::run_bcdtrain("train --quiet --config " + test::source_path("configs/tiny.toml") + " --data.path=" +
                         tmp.file("data") + " --train.run_dir=" + tmp.file("run") +
                         " --model.d_model=32 --model.n_layers=2 --model.n_heads=2 --model.n_kv_heads=1 --model.d_ff=64"
                         " --train.steps=4 --train.batch_size=2 --train.seq_len=64 --train.val_every=4"
                         " --train.val_batches=1 --bcd.switch_every=1 --sample.prompts='[]'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& f : files) EXPECT_EQ(test::read_text(tmp.file("run/" + f)), test::read_text(model_dir + "/" + f)) << f;

  r = test::run_bcdtrain("export --checkpoint " + tmp.file("run/model.h5") + " --hf " + tmp.file("hf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& f : files) EXPECT_EQ(test::read_text(tmp.file("hf/" + f)), test::read_text(model_dir + "/" + f)) << f;
  EXPECT_EQ(json::parse(test::read_text(tmp.file("hf/config.json")))["vocab_size"], 128256);

  r = test::run_bcdtrain("import --hf " + tmp.file("hf") + " --out " + tmp.file("imported/model.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_has(r.output, {"copied tokenizer.json, tokenizer_config.json, special_tokens_map.json, generation_config.json to " +
                        tmp.file("imported")});
  for (const std::string& f : files)
    EXPECT_EQ(test::read_text(tmp.file("imported/" + f)), test::read_text(model_dir + "/" + f)) << f;

  r = test::run_bcdtrain("generate --checkpoint " + tmp.file("imported/model.h5") +
                         " --chat-template llama3 --prompt 'Say hi' --max-new-tokens 3 --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_has(r.output, {"<|start_header_id|>user<|end_header_id|>\n\nSay hi<|eot_id|>"
                         "<|start_header_id|>assistant<|end_header_id|>\n\n"});
  // The imported model is the trained one: the same greedy text from both.
  auto trained = test::run_bcdtrain("generate --run " + tmp.file("run") +
                                    " --chat-template llama3 --prompt 'Say hi' --max-new-tokens 3 --temperature 0");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_EQ(trained.output, r.output);
  // eval takes the dataset: the run's tokenizer and the dataset's are one.
  r = test::run_bcdtrain("eval --run " + tmp.file("run") + " --batches 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace bcd
