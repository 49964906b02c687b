// Tests of the streaming `prepare`: the output does not depend on how the inputs were cut into
// chunks or on the thread count, over-long documents and lines are cut within the memory limit,
// JSONL text records, and the peak memory of a corpus far larger than the limit given to it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "data/documents.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "base/error.h"
#include "base/progress.h"
#include "test_util.h"

namespace bcd {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

constexpr const char* kFortuneDir = "/usr/share/games/fortunes";

struct Read {
  std::vector<int32_t> tokens[2];
  std::vector<uint64_t> offsets[2];
};

Read read_all(const std::string& dir) {
  TokenDataset ds = TokenDataset::open(dir);
  Read r;
  for (Split s : {Split::kTrain, Split::kVal}) {
    r.tokens[static_cast<int>(s)] = ds.read_tokens(s);
    r.offsets[static_cast<int>(s)] = ds.read_doc_offsets(s);
  }
  return r;
}

// The documents of split s, decoded (without their EOS).
std::vector<std::string> decode_docs(const std::string& dir, Split s) {
  TokenDataset ds = TokenDataset::open(dir);
  Tokenizer tok = Tokenizer::load(ds.tokenizer_path());
  const std::vector<int32_t> t = ds.read_tokens(s);
  const std::vector<uint64_t> off = ds.read_doc_offsets(s);
  std::vector<std::string> docs;
  for (size_t i = 0; i + 1 < off.size(); ++i) docs.push_back(tok.decode(std::vector<int>(t.begin() + off[i], t.begin() + off[i + 1] - 1)));
  return docs;
}

// The demo corpus prepared in ~160 chunks on two threads (16 MiB: 64 KiB chunks) equals the same
// prepared in one chunk on one thread: every token and every document boundary. And a tokenizer
// trained within 32 MiB (an 8 MiB sample, which holds every sentence of this corpus) is the one
// trained without a limit.
TEST(StreamingPrepare, ChunksAndThreadsDoNotChangeTheDataset) {
  if (!fs::is_directory(kFortuneDir)) GTEST_SKIP() << kFortuneDir << " is missing (Debian package fortunes-min)";
  ProgressScope quiet(true);
  TempDir tmp("bcd-stream");
  PrepareOptions opt;
  opt.inputs = {kFortuneDir};
  opt.vocab_size = 600;
  opt.val_fraction = 0.1;
  opt.out_dir = tmp.file("one");
  opt.memory_mb = 4096;
  opt.threads = 1;
  const PrepareReport one = prepare_dataset(opt);
  opt.out_dir = tmp.file("limited");
  opt.memory_mb = 32;
  opt.threads = 2;
  const PrepareReport limited = prepare_dataset(opt);
  opt.out_dir = tmp.file("chunked");
  opt.memory_mb = 16;
  opt.tokenizer_model = tmp.file("one/tokenizer.model");
  const PrepareReport chunked = prepare_dataset(opt);

  EXPECT_GT(one.bytes_read, uint64_t{2} << 20) << "the corpus must span many 64 KiB chunks";
  EXPECT_EQ(one.n_docs_cut, 0);
  EXPECT_EQ(limited.tokenizer_sentences, one.tokenizer_sentences);
  EXPECT_TRUE(test::read_text(tmp.file("limited/tokenizer.model")) == test::read_text(tmp.file("one/tokenizer.model")));
  const Read r1 = read_all(tmp.file("one"));
  for (const auto& [name, r] : {std::pair{"limited", limited}, std::pair{"chunked", chunked}}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(r.n_tokens_train, one.n_tokens_train);
    EXPECT_EQ(r.n_docs_val, one.n_docs_val);
    EXPECT_EQ(r.unigram_val_loss, one.unigram_val_loss);
    const Read rx = read_all(tmp.file(name));
    for (int s : {0, 1}) {
      EXPECT_TRUE(rx.tokens[s] == r1.tokens[s]) << "split " << s;
      EXPECT_TRUE(rx.offsets[s] == r1.offsets[s]) << "split " << s;
    }
  }
}

// With 16 MiB a document may hold 256 KiB: a longer paragraph is cut at lines, a longer line at
// characters (never inside a UTF-8 sequence), and nothing is lost.
TEST(StreamingPrepare, OverLongDocumentsAreCutWithinTheLimit) {
  ProgressScope quiet(true);
  TempDir tmp("bcd-stream");
  std::string paragraph;
  for (int i = 0; i < 6000; ++i) paragraph += "line " + std::to_string(i) + " of a paragraph that goes on and on\n";
  std::string line;
  while (line.size() < 600'000) line += "é" + std::to_string(line.size() % 97) + "ü";  // no spaces to trim at cuts
  test::write_text(tmp.file("long.txt"), "short one\n\n" + paragraph + "\n" + line + "\n\nshort two\n");
  PrepareOptions opt;
  opt.inputs = {tmp.file("long.txt")};
  opt.out_dir = tmp.file("ds");
  opt.vocab_size = 300;
  opt.val_fraction = 0.0;  // every document but one (the lowest key) in train
  opt.memory_mb = 16;
  const PrepareReport r = prepare_dataset(opt);
  EXPECT_GE(r.n_docs_cut, 3) << "a 330 KiB paragraph and a 600 KiB line, in 256 KiB pieces";
  std::vector<std::string> docs = decode_docs(opt.out_dir, Split::kTrain);
  for (const std::string& d : decode_docs(opt.out_dir, Split::kVal)) docs.push_back(d);
  std::string lines, chars;
  int n_short = 0;
  for (const std::string& d : docs) {
    EXPECT_LE(d.size(), size_t{256} << 10);
    if (d.rfind("short", 0) == 0) ++n_short;
    else if (d.rfind("line", 0) == 0) lines += (lines.empty() ? "" : "\n") + d;
    else chars += d;
  }
  EXPECT_EQ(n_short, 2);
  // val holds the one lowest-key document, so the pieces may come back in another order
  EXPECT_EQ(lines.size() + 1, paragraph.size());
  EXPECT_EQ(chars.size(), line.size());
}

TEST(StreamingPrepare, JsonlTextRecordsAreDocuments) {
  ProgressScope quiet(true);
  TempDir tmp("bcd-stream");
  std::string jsonl;
  for (int i = 0; i < 40; ++i) jsonl += "{\"text\": \"  record " + std::to_string(i) + " says hello\\nworld  \", \"id\": 7}\n";
  jsonl += "\n{\"text\": \"   \"}\n";  // blank line and blank text: no document
  test::write_text(tmp.file("a.jsonl"), jsonl);
  PrepareOptions opt;
  opt.inputs = {tmp.file("a.jsonl")};
  opt.out_dir = tmp.file("ds");
  opt.vocab_size = 300;
  opt.val_fraction = 0.2;
  const PrepareReport r = prepare_dataset(opt);
  EXPECT_FALSE(r.instruct);
  EXPECT_EQ(r.n_docs_train + r.n_docs_val, 40);
  EXPECT_FALSE(TokenDataset::open(opt.out_dir).masked());
  std::vector<std::string> docs = decode_docs(opt.out_dir, Split::kTrain);
  ASSERT_FALSE(docs.empty());
  EXPECT_EQ(docs[0].substr(0, 7), "record ");
  EXPECT_NE(docs[0].find(" says hello\nworld"), std::string::npos) << docs[0];

  // A bad record names the file and line; --skip-bad counts it instead.
  test::write_text(tmp.file("a.jsonl"), jsonl + "{\"txt\": \"typo\"}\n");
  opt.out_dir = tmp.file("ds2");
  std::string msg = test::error_of([&] { prepare_dataset(opt); });
  EXPECT_NE(msg.find(tmp.file("a.jsonl") + ":43"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"text\" string"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(opt.out_dir));
  opt.skip_bad = true;
  EXPECT_EQ(prepare_dataset(opt).n_bad_records, 1);

  // When what --skip-bad leaves cannot be split, the refusal counts what it skipped.
  test::write_text(tmp.file("b.jsonl"), "{\"text\": \"the one good record\"}\n{\"txt\": 1}\n{\"txt\": 2}\n");
  opt.inputs = {tmp.file("b.jsonl")};
  opt.out_dir = tmp.file("ds3");
  msg = test::error_of([&] { prepare_dataset(opt); });
  EXPECT_NE(msg.find("hold 1 non-empty document(s)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--skip-bad skipped 2 bad record(s)"), std::string::npos) << msg;
}

// An interrupted prepare's temporary directory is pointed out, not deleted, and a new prepare runs.
TEST(StreamingPrepare, ALeftoverOfAnInterruptedPrepareIsPointedOut) {
  if (!fs::is_directory(kFortuneDir)) GTEST_SKIP() << kFortuneDir << " is missing (Debian package fortunes-min)";
  TempDir tmp("bcd-stream");
  const std::string stale = tmp.file("ds.tmp-999999999");  // above any pid_max: no such process
  fs::create_directories(stale);
  test::write_text(stale + "/train.tokens", "half written");
  auto r = test::run_bcdtrain("prepare --input " + std::string(kFortuneDir) + "/science --out " + tmp.file("ds") +
                              " --vocab-size 400");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(stale + " is left from an interrupted prepare"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(stale + "/train.tokens"));
  EXPECT_TRUE(fs::exists(tmp.file("ds/tokens.h5")));
}

// SIGTERM while a prepare tokenizes: it stops at its next chunk, removes its staging directory and
// exits 128 + 15 (it used to die at once and leave OUT.tmp-PID behind).
TEST(StreamingPrepare, SigtermStopsAndLeavesNoStagingDirectory) {
  TempDir tmp("bcd-stop");
  std::string text;
  for (int i = 0; i < 200000; ++i)
    text += "Line " + std::to_string(i) + " of a corpus long enough to take a while to tokenize.\n\n";
  test::write_text(tmp.file("big.txt"), text);  // 16 MB
  const std::string out = tmp.file("ds");
  test::Background bg("prepare --input " + tmp.file("big.txt") + " --out " + out + " --tokenizer " +
                          test::source_path("../shared/data/tokenizers/llama2/tokenizer.json") + " --threads 1",
                      tmp.file("log"));
  auto staging = [&] {
    for (const auto& e : fs::directory_iterator(tmp.path()))
      if (e.path().filename().string().rfind("ds.tmp-", 0) == 0) return true;
    return false;
  };
  for (int i = 0; i < 3000 && !staging(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(staging()) << "prepare never started tokenizing: " << test::read_text(tmp.file("log"));
  ASSERT_EQ(kill(bg.pid, SIGTERM), 0);
  EXPECT_EQ(bg.wait(), 128 + SIGTERM) << test::read_text(tmp.file("log"));
  EXPECT_NE(test::read_text(tmp.file("log")).find("interrupted by SIGTERM"), std::string::npos)
      << test::read_text(tmp.file("log"));
  EXPECT_FALSE(staging()) << "a staging directory was left behind";
  EXPECT_FALSE(fs::exists(out));
}

// A document the tokenizer refuses (here its pattern's time budget) is named by its input file
// and line, and the tokenizer by its file: the message used to name neither.
TEST(StreamingPrepare, ATokenizingErrorNamesTheInputAndTheTokenizer) {
  TempDir tmp("bcd-tokerr");
  const std::string src = test::source_path("../shared/data/tokenizers/llama2");
  fs::create_directories(tmp.file("tok"));
  nlohmann::json j = nlohmann::json::parse(test::read_text(src + "/tokenizer.json"));
  j["pre_tokenizer"] = nlohmann::json::parse(
      R"({"type": "Split", "pattern": {"Regex": "[ab]*c|a"}, "behavior": "Isolated", "invert": false})");
  test::write_text(tmp.file("tok/tokenizer.json"), j.dump());
  fs::copy_file(src + "/tokenizer_config.json", tmp.file("tok/tokenizer_config.json"));
  std::string text;
  for (int i = 0; i < 20; ++i) text += "A short paragraph number " + std::to_string(i) + ".\n\n";
  text += std::string(300000, 'a') + "\n";
  test::write_text(tmp.file("in.txt"), text);
  auto r = test::run_bcdtrain("prepare --input " + tmp.file("in.txt") + " --out " + tmp.file("ds") + " --tokenizer " +
                              tmp.file("tok/tokenizer.json"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(tmp.file("in.txt") + ":41: the document ending there cannot be tokenized with " +
                          tmp.file("tok/tokenizer.json") + ": the tokenizer's pattern"),
            std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(tmp.file("ds")));
}

// A file saved on Windows: its byte-order mark and "\r\n" line ends are not text (they became
// tokens); a lone surrogate in a .jsonl's first record names that line instead of turning the
// whole file into plain text.
TEST(StreamingPrepare, ByteOrderMarkAndCarriageReturnsAreNotText) {
  TempDir tmp("bcd-crlf");
  test::write_text(tmp.file("win.txt"), "\xEF\xBB\xBF" "First line\r\nof one paragraph\r\n\r\nSecond\r\n");
  const std::vector<Input> win = list_inputs({tmp.file("win.txt")});  // the stream reads them as it goes
  DocumentStream docs(win, ChatTemplate::kPlain, false, 1 << 20);
  Document d;
  ASSERT_TRUE(docs.next(&d));
  EXPECT_EQ(d.text, "First line\nof one paragraph");
  ASSERT_TRUE(docs.next(&d));
  EXPECT_EQ(d.text, "Second");
  EXPECT_FALSE(docs.next(&d));
  test::write_text(tmp.file("bad.jsonl"), "{\"text\": \"\\ud800\"}\n{\"text\": \"fine\"}\n");
  const std::string err = test::error_of([&] {
    const std::vector<Input> bad = list_inputs({tmp.file("bad.jsonl")});
    DocumentStream j(bad, ChatTemplate::kPlain, false, 1 << 20);
    Document x;
    while (j.next(&x)) {
    }
  });
  EXPECT_NE(err.find(tmp.file("bad.jsonl") + ":1"), std::string::npos) << err;
}

// A given tokenizer without the chat template's markers as single pieces splits them into
// ordinary tokens: said once per marker (it used to pass without a word).
TEST(StreamingPrepare, ATemplatesMarkersSplitByTheTokenizerAreNamed) {
  TempDir tmp("bcd-markers");
  std::string lines;
  for (int i = 0; i < 20; ++i)
    lines += "{\"prompt\": \"Question " + std::to_string(i) + "?\", \"response\": \"Answer " + std::to_string(i) + ".\"}\n";
  test::write_text(tmp.file("chat.jsonl"), lines);
  auto r = test::run_bcdtrain("prepare --input " + tmp.file("chat.jsonl") + " --out " + tmp.file("ds") +
                              " --chat-template chatml --tokenizer " +
                              test::source_path("../shared/data/tokenizers/llama2/tokenizer.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("has no single piece for the chatml marker <|im_start|> (it becomes"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("marker <|im_end|>"), std::string::npos) << r.output;
  auto q = test::run_bcdtrain("prepare --input " + tmp.file("chat.jsonl") + " --out " + tmp.file("ds3") +
                              " --chat-template chatml --tokenizer " +
                              test::source_path("../shared/data/tokenizers/qwen3/tokenizer.json"));
  ASSERT_EQ(q.exit_code, 0) << q.output;
  EXPECT_EQ(q.output.find("has no single piece"), std::string::npos) << q.output;
}

TEST(StreamingPrepare, MemoryLimitIsChecked) {
  PrepareOptions opt;
  opt.inputs = {"x"};
  opt.out_dir = "/nonexistent/ds";
  opt.memory_mb = 8;
  EXPECT_NE(test::error_of([&] { prepare_dataset(opt); }).find("memory_mb"), std::string::npos);
}

// Peak resident memory of `bcdtrain ARGS` (KiB); fails the test on a non-zero exit.
long peak_rss_kib(const std::string& args, const std::string& log) {
  test::Background child(args, log);
  int status = 0;
  rusage ru{};
  if (::wait4(child.pid, &status, 0, &ru) != child.pid) return -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << args << "\n" << test::read_text(log);
  return ru.ru_maxrss;
}

// A 96 MiB corpus prepared with --memory-mb 32 peaks at most 32 MiB above a 160 KiB one: memory
// does not grow with the corpus. (Measured as the process's peak RSS, since the binary's own
// libraries take more than 64 MiB before prepare starts.)
TEST(StreamingPrepare, ACorpusFarLargerThanTheLimitPreparesInIt) {
  if (!fs::is_directory(kFortuneDir)) GTEST_SKIP() << kFortuneDir << " is missing (Debian package fortunes-min)";
  TempDir tmp("bcd-stream");
  std::string text;
  for (const auto& e : fs::directory_iterator(kFortuneDir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.find('.') == std::string::npos) text += test::read_text(e.path().string()) + "\n%\n";
  }
  ASSERT_GT(text.size(), size_t{1} << 20);
  test::write_text(tmp.file("small.txt"), text.substr(0, 160 << 10));
  {
    std::FILE* f = std::fopen(tmp.file("big.txt").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    uint64_t written = 0;
    for (int round = 0; written < (uint64_t{96} << 20); ++round) {
      const std::string tag = "% round " + std::to_string(round) + "\n";  // a record of its own
      written += std::fwrite(tag.data(), 1, tag.size(), f) + std::fwrite(text.data(), 1, text.size(), f);
    }
    std::fclose(f);
  }
  ASSERT_EQ(test::prepare_fortunes(tmp.file("demo")).exit_code, 0);
  const std::string common = " --tokenizer " + tmp.file("demo/tokenizer.model") + " --memory-mb 32";
  const long small = peak_rss_kib("prepare --input " + tmp.file("small.txt") + " --out " + tmp.file("s") + common, tmp.file("s.log"));
  const long big = peak_rss_kib("prepare --input " + tmp.file("big.txt") + " --out " + tmp.file("b") + common, tmp.file("b.log"));
  ASSERT_GT(small, 0);
  const auto ds = TokenDataset::open(tmp.file("b"));
  EXPECT_GT(ds.n_tokens(Split::kTrain), 18'000'000) << "the corpus was prepared whole";
  EXPECT_LT(big - small, 32 << 10) << "peak RSS " << small / 1024 << " MiB for 160 KiB of text, " << big / 1024
                                   << " MiB for 96 MiB";
  std::printf("peak RSS: %ld MiB (160 KiB corpus), %ld MiB (96 MiB corpus), --memory-mb 32\n", small / 1024,
              big / 1024);
}

}  // namespace
}  // namespace bcd
