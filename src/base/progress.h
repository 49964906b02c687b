// Progress of long set-up phases (dataset preparation, reading a checkpoint, importing an HF
// model): on a terminal one line redrawn in place, at most ~10 times a second, with percent,
// rate and ETA; in a log file or pipe a plain line when a phase starts and one when it ends (and
// one every ~10 s of a long phase), so logs stay short; nothing when quiet.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace bcd {

// Where phases report, process-wide: stdout unless a ProgressScope says otherwise.
struct ProgressOutput {
  std::FILE* out = stdout;
  bool quiet = false;             // report nothing (tests, benchmarks, ranks other than 0)
  int tty = -1;                   // 1: redraw in place, 0: plain lines, -1: isatty(out)
  std::function<double()> clock;  // seconds, monotonic; empty = steady_clock (tests step their own)
  double redraw_s = 0.1;          // terminal: least time between redraws
  double log_every_s = 10;        // file or pipe: a line every this many seconds of a long phase
  // A thread per phase keeps its line going while the work reports nothing (training the
  // tokenizer, one long write): the terminal's elapsed time, the log's line every log_every_s.
  // Tests that step their own clock turn it off.
  bool tick = true;
};

// The output phases started from now on report to.
ProgressOutput progress_output();

// Sets the progress output for its lifetime, then puts the previous one back.
class ProgressScope {
 public:
  explicit ProgressScope(ProgressOutput out);
  // The current output, silenced when `quiet` (a quiet output stays quiet).
  explicit ProgressScope(bool quiet);
  ~ProgressScope();
  ProgressScope(const ProgressScope&) = delete;
  ProgressScope& operator=(const ProgressScope&) = delete;

 private:
  ProgressOutput previous_;
};

// One phase, from construction to finish() (or the end of its scope), e.g.
//   Progress p("tokenizing", docs.size(), "documents");  ...  p.add();  // from any thread
// Terminal:     "tokenizing  45% 6886/15302 documents | 1234 documents/s | ETA 7s" (redrawn),
//               then the closing line in its place.
// File or pipe: "tokenizing: 15302 documents ...", every log_every_s "tokenizing: 45% (6886/15302
//               documents, 1234 documents/s, ETA 7s)", closing "tokenizing: 15302 documents in
//               12.4s (1234 documents/s)"; a phase that counts nothing says "... done in 7.3s".
// Unit "B" counts bytes (shown as MiB, GiB); total 0 = unknown (no percent or ETA). Phases nest
// (reading a checkpoint while setting up a run): only the innermost one redraws or logs how far
// it got; each one's start and closing lines are printed.
class Progress {
 public:
  // also_unit: a second count shown beside the first with its own rate, e.g. tokens beside bytes
  // read: "tokenizing 45% 90 MiB/200 MiB | 12.3 MiB/s | ETA 9s | 21.5M tokens, 2.9M tokens/s".
  Progress(std::string phase, uint64_t total = 0, std::string unit = "", std::string also_unit = "");
  // finish(), unless an exception is leaving the phase: then a live line is only ended, so the
  // error is printed on a line of its own and the phase does not claim to be done.
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(uint64_t n = 1);  // n more done (thread-safe)
  // The second count (also_unit), thread-safe.
  void add_also(uint64_t n) { also_.fetch_add(n, std::memory_order_relaxed); }
  void set(uint64_t done);   // done so far (thread-safe)
  void finish();             // the closing line, once

 private:
  void report(bool closing);
  void tick();          // the ticker thread's loop
  void stop_ticking();
  void leave();         // the outer phase is the innermost one again
  std::string amount(uint64_t n) const;
  std::string rate(double per_s) const;

  const std::string phase_, unit_;
  const uint64_t total_;
  const ProgressOutput out_;
  const bool on_, tty_;
  const int exceptions_;  // std::uncaught_exceptions() at the start
  const double t0_;
  Progress* outer_ = nullptr;           // the phase this one started inside, if any
  std::atomic<uint64_t> done_{0};
  const std::string also_unit_;
  std::atomic<uint64_t> also_{0};
  std::atomic<double> next_report_{0};  // clock time of the next redraw (terminal) or line
  std::mutex mu_;                       // one report at a time
  bool live_ = false;                   // a redrawn line is on the terminal, not yet ended
  bool finished_ = false;
  std::condition_variable finished_cv_;
  std::thread ticker_;                  // last: started once the rest is set
};

// "45s", "2m19s", "1h05m"; "?" for a negative or infinite time.
std::string format_duration(double seconds);

}  // namespace bcd
