// CLI tests: bad input of every kind exits 2 with one line naming the file/key; nothing is damaged.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "base/config.h"
#include "base/printable.h"
#include "data/chat.h"
#include "data/tokenizer.h"
#include "model/llama.h"
#include "model/weights.h"
#include "runtime/run_setup.h"
#include "runtime/sampler.h"
#include "test_util.h"

namespace bcd {
namespace {

namespace fs = std::filesystem;

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("bcd-cli");
    // A small real corpus: two fortune files.
    auto r = test::run_bcdtrain("prepare --input /usr/share/games/fortunes/computers /usr/share/games/fortunes/science"
                                " --out " + dir_->file("data") + " --vocab-size 512");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static test::TempDir* dir_;

  // Runs bcdtrain and expects exit code 2 with every needle in the output.
  void expect_exit2(const std::string& args, const std::vector<std::string>& needles) {
    auto r = test::run_bcdtrain(args);
    EXPECT_EQ(r.exit_code, 2) << "bcdtrain " << args << "\n" << r.output;
    for (const auto& n : needles) EXPECT_NE(r.output.find(n), std::string::npos) << "missing '" << n << "' in:\n" << r.output;
  }
  std::string train_args(const std::string& extra) {
    return "train --config " + test::source_path("configs/tiny.toml") + " --data.path=" + dir_->file("data") +
           " --train.steps=1 --train.run_dir=" + dir_->file("run") + " --sample.prompts='[]' " + extra;
  }
};
test::TempDir* Cli::dir_ = nullptr;

TEST_F(Cli, UnknownConfigKey) { expect_exit2(train_args("--train.stepz=3"), {"stepz", "--train.stepz=3"}); }

TEST_F(Cli, WrongType) { expect_exit2(train_args("--train.batch_size=big"), {"[train] batch_size", "expected an integer"}); }

TEST_F(Cli, BadDevice) {
  expect_exit2(train_args("--train.device=tpu"), {"[train] device", "\"cpu\", \"cuda\" or \"auto\"", "tpu"});
}

// Tokenizer, dataset and model vocabularies are checked against each other before any step:
// a swapped tokenizer.model, or a run evaluated on data of another tokenizer.
TEST_F(Cli, VocabulariesThatDisagreeAreRefusedUpFront) {
  auto p = test::run_bcdtrain("prepare --input /usr/share/games/fortunes/science --out " + dir_->file("data400") +
                              " --vocab-size 400");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  fs::copy(dir_->file("data"), dir_->file("swapped"), fs::copy_options::recursive);
  fs::copy_file(dir_->file("data400/tokenizer.model"), dir_->file("swapped/tokenizer.model"),
                fs::copy_options::overwrite_existing);
  expect_exit2(train_args("--data.path=" + dir_->file("swapped")),
               {dir_->file("swapped") + "/tokenizer.model: has 400 pieces", "tokenized with vocab_size 512"});
  const std::string run = dir_->file("vocab-run");
  auto t = test::run_bcdtrain("train --quiet --config " + test::source_path("configs/tiny.toml") + " --data.path=" +
                              dir_->file("data") + " --train.steps=1 --train.run_dir=" + run +
                              " --sample.prompts='[]' --train.val_batches=1 --model.d_model=64 --model.d_ff=128");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  expect_exit2("eval --run " + run + " --data " + dir_->file("data400"),
               {dir_->file("data400") + " was tokenized with", "not with the run's " + run + "/tokenizer.model"});
  // Weights to start from come with their tokenizer (the run's here): the data must use it.
  expect_exit2(train_args("--data.path=" + dir_->file("data400") + " --model.init_from=" + run + "/model.h5"),
               {"init_from " + run + "/model.h5 comes with the tokenizer " + run + "/tokenizer.model",
                "--tokenizer " + run + "/tokenizer.model"});
  auto same = test::run_bcdtrain(train_args("--model.init_from=" + run + "/model.h5 --train.run_dir=" +
                                            dir_->file("vocab-run2")));
  EXPECT_EQ(same.exit_code, 0) << same.output;

  // Flags at the edges of their ranges: nan is no number, a vanishing temperature samples the
  // argmax, a batch beyond memory is refused before it is allocated.
  expect_exit2("generate --run " + run + " --prompt A --temperature nan", {"--temperature: expected a number >= 0, got nan"});
  expect_exit2("generate --run " + run + " --prompt A --top-p nan", {"--top-p: expected a number from 1e-06 to 1, got nan"});
  auto tiny_t = test::run_bcdtrain("generate --run " + run + " --prompt A --max-new-tokens 4 --temperature 1e-300");
  EXPECT_EQ(tiny_t.exit_code, 0) << tiny_t.output;
  expect_exit2("eval --run " + run + " --batch-size 100000000", {"eval: a batch of 100000000 sequences", "--batch-size"});
  // Another sequence length: within the model's max_seq_len (256), and a loss of its own.
  expect_exit2("eval --run " + run + " --seq-len 257", {"sequences of 257 tokens", "max_seq_len 256", "--seq-len 256"});
  auto e64 = test::run_bcdtrain("eval --run " + run + " --seq-len 64 --batches 2");
  auto e128 = test::run_bcdtrain("eval --run " + run + " --batches 2");
  ASSERT_EQ(e64.exit_code, 0) << e64.output;
  ASSERT_EQ(e128.exit_code, 0) << e128.output;
  EXPECT_NE(e64.output.substr(e64.output.find('{')), e128.output.substr(e128.output.find('{')));
}

// A thread count that would exhaust the machine is refused before any thread starts.
TEST_F(Cli, ThreadsBeyondTheMachineAreRefused) {
  expect_exit2(train_args("--train.threads=100000"), {"[train] threads = 100000", "at most 4 per core"});
}

// Without a usable GPU, device = "cuda" is refused up front with the reason; auto falls back.
TEST_F(Cli, CudaDeviceWithoutGpuSaysWhy) {
  auto probe = test::run_bcdtrain(train_args("--train.device=cuda"));
  if (probe.exit_code == 0) GTEST_SKIP() << "a CUDA device is usable here: nothing to refuse";
  EXPECT_EQ(probe.exit_code, 2) << probe.output;
  EXPECT_NE(probe.output.find("device = \"cuda\" but"), std::string::npos) << probe.output;
  auto r = test::run_bcdtrain(train_args("--train.device=auto"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on cpu"), std::string::npos) << r.output;
}

TEST_F(Cli, UnknownKeyInFile) {
  test::write_text(dir_->file("bad.toml"), "[model]\nd_modle = 64\n");
  expect_exit2("train --config " + dir_->file("bad.toml"), {"bad.toml", "d_modle"});
}

TEST_F(Cli, MissingConfigFile) { expect_exit2("train --config " + dir_->file("nope.toml"), {"nope.toml"}); }

TEST_F(Cli, MissingDataset) {
  expect_exit2(train_args("--data.path=" + dir_->file("no-such-data")), {"no-such-data"});
}

TEST_F(Cli, HeadsNotDivisibleByKvHeads) {
  expect_exit2(train_args("--model.n_heads=4 --model.n_kv_heads=3"), {"n_kv_heads"});
}

TEST_F(Cli, UnsupportedHfArchitecture) {
  test::write_text(dir_->file("config.json"), R"({"model_type": "gpt_neox", "vocab_size": 512})");
  expect_exit2(train_args("--model.hf_config=" + dir_->file("config.json")), {"config.json", "gpt_neox"});
}

TEST_F(Cli, CorpusShorterThanOneWindow) {
  test::write_text(dir_->file("short.txt"), "A very short corpus.\n\nIt has two paragraphs only.\n");
  auto r = test::run_bcdtrain("prepare --input " + dir_->file("short.txt") + " --out " + dir_->file("short") +
                              " --tokenizer " + dir_->file("data/tokenizer.model") + " --val-fraction 0.5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_exit2(train_args("--data.path=" + dir_->file("short") + " --train.seq_len=128"), {"short", "19 tokens", "129"});
}

TEST_F(Cli, OverrideWithoutValue) { expect_exit2(train_args("--train.steps"), {"--train.steps"}); }

// An override given twice takes the last, as before, but says so (it used to be silent).
TEST_F(Cli, OverrideGivenTwiceIsNamed) {
  auto r = test::run_bcdtrain("config --config " + test::source_path("configs/tiny.toml") +
                              " --train.lr=0.1 --train.steps 5 --train.lr 0.2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: --train.lr is given twice (0.1, then 0.2): the last one is used"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("lr = 0.2"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("--train.steps is given twice"), std::string::npos) << r.output;
}

TEST_F(Cli, UnknownFlagAndSubcommand) {
  expect_exit2("train --config " + test::source_path("configs/tiny.toml") + " --bogus", {"bogus"});
  expect_exit2("frobnicate", {"frobnicate"});
}

// In a pipe (a log) prepare says each phase when it starts and when it ends, as plain lines, in
// the order they run; no terminal codes.
TEST_F(Cli, PrepareSaysItsPhasesAsPlainLinesInAPipe) {
  auto r = test::run_bcdtrain("prepare --input /usr/share/games/fortunes/science --out " + dir_->file("phases") +
                              " --vocab-size 400");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("\033["), std::string::npos) << r.output;
  size_t at = 0;
  for (const char* line : {"\nsplitting into train and validation: ", " KiB ...\n", "\nsplitting into train and validation: ",
                           " KiB in ", "\ntraining the tokenizer (BPE, vocabulary 400, ", " sentences) ...\n",
                           "\ntraining the tokenizer (BPE, vocabulary 400, ", " sentences): done in ", "\ntokenizing: ",
                           " KiB ...\n", "\ntokenizing: ", " KiB in ", " tokens, ", " tokens/s\n", "\nwriting tokens.h5 ...\n",
                           "\nwriting tokens.h5: done in ", "\nprepared ", "\ntokenized "}) {
    const size_t found = ("\n" + r.output).find(line, at);
    ASSERT_NE(found, std::string::npos) << "'" << line << "' after offset " << at << " in:\n" << r.output;
    at = found + std::string(line).size() - 1;
  }
}

TEST_F(Cli, PrepareBadInputLeavesNothingBehind) {
  const std::string out = dir_->file("prep-out");
  expect_exit2("prepare --input " + dir_->file("missing.txt") + " --out " + out, {"missing.txt"});
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(dir_->path()))
    EXPECT_EQ(e.path().filename().string().find("prep-out.tmp"), std::string::npos) << e.path();
  // An existing dataset is never overwritten without --force.
  expect_exit2("prepare --input /usr/share/games/fortunes/science --out " + dir_->file("data"), {"--force"});
  EXPECT_TRUE(fs::exists(dir_->file("data/tokens.h5")));
}

TEST_F(Cli, GenerateFromMissingRun) {
  expect_exit2("generate --run " + dir_->file("no-run"), {"--run " + dir_->file("no-run"), "no such directory"});
}

TEST_F(Cli, CorruptDatasetFile) {
  fs::create_directories(dir_->file("corrupt"));
  test::write_text(dir_->file("corrupt/tokens.h5"), "this is not HDF5");
  expect_exit2(train_args("--data.path=" + dir_->file("corrupt")), {"tokens.h5"});
}

TEST_F(Cli, HelpAndConfigReference) {
  auto r = test::run_bcdtrain("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("train"), std::string::npos);
  r = test::run_bcdtrain("config --reference");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("`n_kv_heads`"), std::string::npos);
  r = test::run_bcdtrain("config --config " + test::source_path("configs/tiny.toml") + " --train.steps=7");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("steps = 7"), std::string::npos) << r.output;
}

// ---- generate: text as it comes ----

// A model of random weights on the fixture's tokenizer: a random model draws byte-fallback
// tokens often, so characters split across tokens and bytes that are no UTF-8 come up.
ModelConfig random_model_config(int64_t vocab_size) {
  ModelConfig m;
  m.vocab_size = vocab_size;
  m.d_model = 32;
  m.n_layers = 1;
  m.n_heads = 2;
  m.n_kv_heads = 2;
  m.d_ff = 64;
  m.max_seq_len = 64;
  m.init_std = 0.5;  // logits far apart: greedy picks no near-ties that a thread count could flip
  return m;
}

bool whole_characters(std::string_view piece) { return utf8_complete_prefix(piece) == piece.size(); }

// A character spelt in byte-fallback tokens is handed out once whole; the pieces add up to the
// decode of every id.
TEST_F(Cli, GenerateStreamsWholeCharacters) {
  const Tokenizer tok = Tokenizer::load(dir_->file("data/tokenizer.model"));
  const std::vector<int> ids = tok.encode("na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e ok \xf0\x9f\x99\x82.");
  TextStream stream(tok);
  std::string shown;
  int held = 0;  // tokens after which nothing could be shown yet
  for (int id : ids) {
    const std::string piece = stream.add({id});
    EXPECT_TRUE(whole_characters(piece)) << printable_line(piece);
    EXPECT_EQ(piece.find("\xef\xbf\xbd"), std::string::npos) << "a stand-in U+FFFD was shown: " << printable_line(piece);
    held += piece.empty();
    shown += piece;
  }
  shown += stream.finish();
  EXPECT_EQ(shown, tok.decode(ids));
  EXPECT_EQ(stream.text(), tok.decode(ids));
  EXPECT_GT(held, 0) << "no character of the text was split across tokens: the case tests nothing";
}

// generate_text hands its text to the sink once for the prompt, once per token drawn and once at
// the end, and the pieces add up to what it returns; generate_chat's add up to its answer too.
TEST_F(Cli, GenerateHandsOutEachTokenAsItIsDrawn) {
  const Tokenizer tok = Tokenizer::load(dir_->file("data/tokenizer.model"));
  const LlamaModel model(random_model_config(tok.vocab_size()), torch::kFloat32, /*seed=*/7);
  SampleOptions so;
  so.max_new_tokens = 32;
  so.temperature = 1.0, so.top_k = 0, so.top_p = 1.0;  // every token may come, byte tokens too
  configure_threads(1);  // a tiny model: more threads only wait for each other
  for (uint64_t seed : {1, 2}) {
    std::vector<std::string> pieces;
    const auto sink = [&](std::string_view piece) { pieces.emplace_back(piece); };
    const std::string text = generate_text(model, tok, "The cat", so, seed, sink);
    // The tokens it drew: the same draw without a sink.
    std::vector<int> ctx = {tok.eos_id()};
    for (int id : tok.encode("The cat")) ctx.push_back(id);
    SampleOptions stop = so;
    stop.stop_tokens = {tok.eos_id()};
    const std::vector<int> drawn = generate_tokens(model, ctx, stop, seed);
    EXPECT_EQ(pieces.size(), drawn.size() + 2 - (drawn.back() == tok.eos_id() ? 1 : 0)) << "seed " << seed;
    std::string all;
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (i + 1 < pieces.size()) {
        EXPECT_TRUE(whole_characters(pieces[i])) << printable_line(pieces[i]);
      }
      all += pieces[i];
    }
    EXPECT_EQ(all, text) << "seed " << seed;

    std::string chat_all;
    const std::string chat = generate_chat(model, tok, chat_template_from_name("chatml"), "What is 2 plus 3?", so, seed,
                                           [&](std::string_view piece) { chat_all += piece; });
    EXPECT_EQ(chat_all, chat) << "seed " << seed;
    EXPECT_EQ(chat, generate_chat(model, tok, chat_template_from_name("chatml"), "What is 2 plus 3?", so, seed))
        << "a sink changes nothing";
  }
}

// Generation ends at the first of several stop ids (a model's EOS ids: Llama 3 instruct has three).
TEST_F(Cli, GenerationStopsAtAnyOfItsStopIds) {
  const Tokenizer tok = Tokenizer::load(dir_->file("data/tokenizer.model"));
  const LlamaModel model(random_model_config(tok.vocab_size()), torch::kFloat32, /*seed=*/9);
  SampleOptions so;
  so.max_new_tokens = 12;
  so.temperature = 1.0, so.top_k = 0, so.top_p = 1.0;
  configure_threads(1);
  const std::vector<int> ctx = tok.encode("The cat");
  const std::vector<int> free_run = generate_tokens(model, ctx, so, 3);
  ASSERT_EQ(free_run.size(), 12u);
  const int stop = free_run[5];
  const size_t first = static_cast<size_t>(std::find(free_run.begin(), free_run.end(), stop) - free_run.begin());
  so.stop_tokens = {tok.vocab_size() + 5, stop};
  const std::vector<int> stopped = generate_tokens(model, ctx, so, 3);
  EXPECT_EQ(stopped, std::vector<int>(free_run.begin(), free_run.begin() + static_cast<std::ptrdiff_t>(first) + 1));
}

// The binary prints what generate_text returns, as it comes, escaped: the prompt's terminal
// codes come out written out, and so would any the model writes.
TEST_F(Cli, GeneratePrintsTheTextEscaped) {
  const Tokenizer tok = Tokenizer::load(dir_->file("data/tokenizer.model"));
  Config cfg;
  cfg.model = random_model_config(tok.vocab_size());
  cfg.train.threads = 1;
  const LlamaModel model(cfg.model, torch::kFloat32, /*seed=*/11);
  const std::string run = dir_->file("random-run");
  fs::create_directories(run);
  save_weights(model, run + "/model.h5", config_to_toml(cfg));
  fs::copy_file(dir_->file("data/tokenizer.model"), run + "/tokenizer.model");

  const std::string prompt = "\x1b[31mred\x07 and\ttab";
  auto r = test::run_bcdtrain("generate --run " + run + " --prompt \"$(printf '\\033[31mred\\007 and\\ttab')\""
                              " --max-new-tokens 12 --temperature 0 --seed 1 --chat-template none");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  configure_threads(1);  // as the binary runs it
  SampleOptions so;
  so.max_new_tokens = 12;
  so.temperature = 0;
  const std::string text = generate_text(model, tok, prompt, so, 1);
  EXPECT_EQ(r.output, "--- sample 1 ---\n" + printable(text) + "\n");
  EXPECT_NE(r.output.find("\\x1b[31mred\\x07 and\ttab"), std::string::npos) << r.output;
  EXPECT_EQ(printable(r.output), r.output) << "raw control bytes reached the terminal";
}

}  // namespace
}  // namespace bcd
