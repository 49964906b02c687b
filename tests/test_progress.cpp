// Progress of set-up phases (base/progress.h): the lines a terminal, a log and a quiet run get.
// Time is the test's own clock, stepped by hand: nothing here depends on how fast it runs.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "base/progress.h"

namespace bcd {
namespace {

// A stream in memory standing in for stdout, and a clock the test moves.
class Captured {
 public:
  Captured() { out_ = ::open_memstream(&buf_, &len_); }
  ~Captured() {
    std::fclose(out_);
    std::free(buf_);
  }
  ProgressOutput output(int tty) {
    ProgressOutput o;
    o.out = out_;
    o.tty = tty;
    o.clock = [this] { return now; };
    o.tick = false;  // every line comes from the test's own calls
    return o;
  }
  std::string text() {
    std::fflush(out_);
    return std::string(buf_, len_);
  }
  double now = 100;

 private:
  std::FILE* out_ = nullptr;
  char* buf_ = nullptr;
  size_t len_ = 0;
};

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

// In a log: the start and the end, nothing in between for a phase shorter than log_every_s.
TEST(Progress, InALogAShortPhaseIsTwoPlainLines) {
  Captured c;
  const ProgressScope scope(c.output(0));
  {
    Progress p("tokenizing", 100, "documents");
    for (int i = 0; i < 100; ++i) c.now += 0.05, p.add();
  }
  EXPECT_EQ(c.text(), "tokenizing: 100 documents ...\ntokenizing: 100 documents in 5.00s (20 documents/s)\n");
}

// A long phase in a log: one line per log_every_s with percent, rate and ETA.
TEST(Progress, InALogALongPhaseSaysHowFarItGotEveryTenSeconds) {
  Captured c;
  const ProgressScope scope(c.output(0));
  Progress p("reading checkpoint", 100, "parts");
  for (int i = 0; i < 25; ++i) c.now += 1, p.add(2);  // 2 parts a second for 25 s
  p.finish();
  p.finish();  // once
  EXPECT_EQ(c.text(),
            "reading checkpoint: 100 parts ...\n"
            "reading checkpoint: 20% (20/100 parts, 2.0 parts/s, ETA 40s)\n"
            "reading checkpoint: 40% (40/100 parts, 2.0 parts/s, ETA 30s)\n"
            "reading checkpoint: 50 parts in 25.0s (2.0 parts/s)\n");
}

// On a terminal: one line redrawn in place, at most once per redraw_s (0.1 s), and the closing
// line in its place, ended. The clock moves 1/64 s per document (exact in binary).
TEST(Progress, OnATerminalOneLineIsRedrawnAtMostTenTimesASecond) {
  Captured c;
  const ProgressScope scope(c.output(1));
  {
    Progress p("tokenizing", 64, "documents");
    for (int i = 0; i < 64; ++i) c.now += 1.0 / 64, p.add();  // 1 s in all
  }
  const std::string out = c.text(), redraw = "\r\033[K";
  EXPECT_EQ(out.rfind(redraw + "tokenizing   0% 0/64 documents | - | ETA ?", 0), 0u) << out;
  EXPECT_NE(out.find(redraw + "tokenizing  10% 7/64 documents | 64 documents/s | ETA 1s"), std::string::npos) << out;
  // the start, a redraw every 7/64 s (the first tick 0.1 s after the last), the closing line
  EXPECT_EQ(count(out, redraw), 1 + 9 + 1u) << out;
  EXPECT_EQ(count(out, "\n"), 1u) << out;
  const std::string closing = redraw + "tokenizing: 64 documents in 1.00s (64 documents/s)\n";
  ASSERT_GE(out.size(), closing.size());
  EXPECT_EQ(out.substr(out.size() - closing.size()), closing);
}

// Encoding counts documents from tbb's threads: every one is counted.
TEST(Progress, ThreadsAddUp) {
  Captured c;
  const ProgressScope scope(c.output(0));
  {
    Progress p("tokenizing", 4000, "documents");
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&p] {
        for (int i = 0; i < 1000; ++i) p.add();
      });
    for (auto& t : threads) t.join();
  }
  EXPECT_NE(c.text().find("tokenizing: 4000 documents in "), std::string::npos) << c.text();
}

// Bytes are shown in binary units; a phase with nothing to count says only its time.
TEST(Progress, BytesAndUncountedPhases) {
  Captured c;
  const ProgressScope scope(c.output(0));
  {
    Progress p("writing tokens.h5", 3 << 20, "B");
    c.now += 0.5;
    p.set(3 << 20);
  }
  {
    Progress p("training the tokenizer");
    c.now += 12.5;
  }
  EXPECT_EQ(c.text(),
            "writing tokens.h5: 3 MiB ...\n"
            "writing tokens.h5: 3 MiB in 0.50s (6 MiB/s)\n"
            "training the tokenizer ...\n"
            "training the tokenizer: done in 12.5s\n");
}

// A phase an exception leaves does not claim to be done; on a terminal its line is ended so the
// error gets a line of its own.
TEST(Progress, AFailedPhaseIsNotDone) {
  for (int tty : {0, 1}) {
    Captured c;
    const ProgressScope scope(c.output(tty));
    try {
      Progress p("importing hf", 10, "B");
      p.add(5);
      throw std::runtime_error("bad file");
    } catch (const std::runtime_error&) {
    }
    const std::string out = c.text();
    EXPECT_EQ(out.find(" in "), std::string::npos) << "tty " << tty << ": " << out;
    EXPECT_EQ(out.back(), '\n') << "tty " << tty;
  }
}

// Nested phases: the inner one redraws while it runs, the outer one again once it is done; both
// close with their own line.
TEST(Progress, OnlyTheInnermostPhaseRedraws) {
  Captured c;
  const ProgressScope scope(c.output(1));
  Progress outer("setting up the run", 2, "parts");
  {
    Progress inner("reading checkpoint", 4, "parts");
    c.now += 0.5;
    outer.add();  // not redrawn: the inner phase has the line
    inner.add(2);
  }
  c.now += 0.5;
  outer.add();
  outer.finish();
  EXPECT_EQ(c.text(),
            "\r\033[Ksetting up the run   0% 0/2 parts | - | ETA ?"
            "\r\033[Kreading checkpoint   0% 0/4 parts | - | ETA ?"
            "\r\033[Kreading checkpoint  50% 2/4 parts | 4.0 parts/s | ETA 1s"
            "\r\033[Kreading checkpoint: 2 parts in 0.50s (4.0 parts/s)\n"
            "\r\033[Ksetting up the run 100% 2/2 parts | 2.0 parts/s | ETA 0s"
            "\r\033[Ksetting up the run: 2 parts in 1.00s (2.0 parts/s)\n");
}

// The ticker thread of a phase (ProgressOutput::tick) reports only what is due, and stops with
// the phase: on a clock that stands still it adds nothing to the start and the closing line.
TEST(Progress, TheTickerStopsWithThePhase) {
  Captured c;
  ProgressOutput o = c.output(1);
  o.tick = true;
  const ProgressScope scope(o);
  {
    Progress p("training the tokenizer");
  }
  EXPECT_EQ(c.text(), "\r\033[Ktraining the tokenizer ... 0.00s\r\033[Ktraining the tokenizer: done in 0.00s\n");
}

// Quiet (tests, benchmarks, ranks other than 0): nothing; the scope puts the output back.
TEST(Progress, QuietSaysNothingAndTheScopeRestores) {
  Captured c;
  const ProgressOutput terminal = c.output(1);
  const ProgressScope scope(terminal);
  {
    const ProgressScope quiet(true);
    EXPECT_TRUE(progress_output().quiet);
    Progress p("tokenizing", 10, "documents");
    p.add(10);
  }
  EXPECT_FALSE(progress_output().quiet);
  {
    const ProgressScope not_quiet(false);  // keeps the output as it is
    EXPECT_EQ(progress_output().out, terminal.out);
    EXPECT_FALSE(progress_output().quiet);
  }
  EXPECT_EQ(c.text(), "");
}

}  // namespace
}  // namespace bcd
