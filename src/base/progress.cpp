// Progress reporting: one process-wide output, and the lines of a phase on it.
#include "base/progress.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <utility>

#include "base/bytes.h"

namespace bcd {

namespace {

std::mutex g_output_mu;
ProgressOutput g_output;
std::atomic<Progress*> g_innermost{nullptr};  // the phase that reports how far it got

void set_progress_output(ProgressOutput out) {
  std::lock_guard<std::mutex> lock(g_output_mu);
  g_output = std::move(out);
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool is_terminal(const ProgressOutput& o) {
  if (o.tty >= 0) return o.tty == 1;
  const int fd = o.out ? ::fileno(o.out) : -1;
  return fd >= 0 && ::isatty(fd);
}

// "0.42s", "12.3s", then format_duration's "2m19s": a phase's own time, short ones exactly.
std::string format_elapsed(double s) {
  if (s < 10) return fmt::format("{:.2f}s", s);
  if (s < 60) return fmt::format("{:.1f}s", s);
  return format_duration(s);
}

// Columns of the terminal on `out`, 0 when it is none (or a test's stream standing in for one).
size_t terminal_width(std::FILE* out) {
  const int fd = out ? ::fileno(out) : -1;
  winsize ws{};
  return fd >= 0 && ::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 ? ws.ws_col - 1 : 0;
}

// "812", "21.5k", "3.41M", "1.20G": a count at a glance
std::string format_count(double n) {
  if (n < 1e4) return fmt::format("{:.0f}", n);
  if (n < 1e6) return fmt::format("{:.1f}k", n / 1e3);
  if (n < 1e9) return fmt::format("{:.2f}M", n / 1e6);
  return fmt::format("{:.2f}G", n / 1e9);
}

}  // namespace

ProgressOutput progress_output() {
  std::lock_guard<std::mutex> lock(g_output_mu);
  return g_output;
}

ProgressScope::ProgressScope(ProgressOutput out) : previous_(progress_output()) { set_progress_output(std::move(out)); }

ProgressScope::ProgressScope(bool quiet) : previous_(progress_output()) {
  ProgressOutput out = previous_;
  out.quiet = out.quiet || quiet;
  set_progress_output(std::move(out));
}

ProgressScope::~ProgressScope() { set_progress_output(std::move(previous_)); }

// ---- A phase ----

namespace {
double now_of(const ProgressOutput& o) { return o.clock ? o.clock() : steady_seconds(); }
}  // namespace

Progress::Progress(std::string phase, uint64_t total, std::string unit, std::string also_unit)
    : phase_(std::move(phase)),
      unit_(std::move(unit)),
      total_(total),
      out_(progress_output()),
      on_(!out_.quiet && out_.out != nullptr),
      tty_(on_ && is_terminal(out_)),
      exceptions_(std::uncaught_exceptions()),
      t0_(now_of(out_)),
      also_unit_(std::move(also_unit)) {
  if (!on_) return;
  outer_ = g_innermost.exchange(this);
  std::lock_guard<std::mutex> lock(mu_);
  next_report_.store(t0_ + (tty_ ? out_.redraw_s : out_.log_every_s));
  if (tty_) {
    report(false);
  } else {
    fmt::print(out_.out, "{}{} ...\n", phase_, total_ > 0 ? ": " + amount(total_) : "");
    std::fflush(out_.out);
  }
  if (out_.tick) ticker_ = std::thread([this] { tick(); });  // on_: not when quiet
}

Progress::~Progress() {
  if (std::uncaught_exceptions() <= exceptions_) {
    finish();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (live_) fmt::print(out_.out, "\n"), std::fflush(out_.out);
    live_ = false, finished_ = true;
  }
  stop_ticking();
  leave();
}

void Progress::add(uint64_t n) {
  done_.fetch_add(n, std::memory_order_relaxed);
  if (!on_ || now_of(out_) < next_report_.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (lock && !finished_) report(false);
}

void Progress::set(uint64_t done) {
  done_.store(done, std::memory_order_relaxed);
  add(0);
}

void Progress::finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    if (on_) report(true);
  }
  stop_ticking();
  leave();
}

void Progress::leave() {
  Progress* self = this;
  if (on_) g_innermost.compare_exchange_strong(self, outer_);
}

// Wakes often enough for the terminal's redraws (a log's lines are far apart), and reports what
// is due: report() itself checks the time.
void Progress::tick() {
  const auto period = std::chrono::duration<double>(tty_ ? out_.redraw_s : 1.0);
  std::unique_lock<std::mutex> lock(mu_);
  while (!finished_) {
    finished_cv_.wait_for(lock, period);
    if (!finished_) report(false);
  }
}

void Progress::stop_ticking() {
  finished_cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

// With mu_ held: the closing line, or (when due) a redraw or a plain line of how far it got.
void Progress::report(bool closing) {
  const double now = now_of(out_), elapsed = std::max(0.0, now - t0_);
  const uint64_t done = done_.load(std::memory_order_relaxed);
  const double per_s = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
  const bool counted = !unit_.empty() && (done > 0 || total_ > 0);
  std::string line;
  if (closing) {
    line = counted ? fmt::format("{}: {} in {}{}", phase_, amount(done), format_elapsed(elapsed),
                                 per_s > 0 ? " (" + rate(per_s) + ")" : "")
                   : fmt::format("{}: done in {}", phase_, format_elapsed(elapsed));
  } else {
    if (g_innermost.load() != this) return;  // a phase inside this one reports
    if (now < next_report_.load(std::memory_order_relaxed) && !(tty_ && !live_)) return;
    next_report_.store(now + (tty_ ? out_.redraw_s : out_.log_every_s), std::memory_order_relaxed);
    const double left = total_ > done ? static_cast<double>(total_ - done) : 0;
    const std::string eta = per_s > 0 ? format_duration(left / per_s) : std::string("?");
    const std::string speed = per_s > 0 ? rate(per_s) : std::string("-");
    const int pct = total_ > 0 ? static_cast<int>(std::min<uint64_t>(100, done * 100 / total_)) : 0;
    const std::string so_far = total_ > 0 ? fmt::format("{}/{}", unit_ == "B" ? format_bytes(done) : std::to_string(done),
                                                        amount(total_))
                                          : amount(done);
    if (tty_)
      line = total_ > 0 ? fmt::format("{} {:>3}% {} | {} | ETA {}", phase_, pct, so_far, speed, eta)
             : counted  ? fmt::format("{} {} | {} | {}", phase_, so_far, speed, format_elapsed(elapsed))
                        : fmt::format("{} ... {}", phase_, format_elapsed(elapsed));
    else
      line = total_ > 0 ? fmt::format("{}: {}% ({}, {}, ETA {})", phase_, pct, so_far, speed, eta)
             : counted  ? fmt::format("{}: {} so far ({}), {}", phase_, so_far, speed, format_elapsed(elapsed))
                        : fmt::format("{}: still running ({})", phase_, format_elapsed(elapsed));
  }
  if (!also_unit_.empty()) {
    const auto also = static_cast<double>(also_.load(std::memory_order_relaxed));
    line += fmt::format(" | {} {}, {} {}/s", format_count(also), also_unit_, format_count(elapsed > 0 ? also / elapsed : 0),
                        also_unit_);
  }
  if (tty_) {
    const size_t width = closing ? 0 : terminal_width(out_.out);
    fmt::print(out_.out, "\r\033[K{}{}", width > 0 ? line.substr(0, width) : line, closing ? "\n" : "");
    live_ = !closing;
  } else {
    fmt::print(out_.out, "{}\n", line);
  }
  std::fflush(out_.out);
}

// "15302 documents", "1 document", "3.2 MiB"
std::string Progress::amount(uint64_t n) const {
  if (unit_ == "B") return format_bytes(n);
  if (unit_.empty()) return std::to_string(n);
  const bool one = n == 1 && unit_.size() > 1 && unit_.back() == 's';
  return fmt::format("{} {}", n, one ? unit_.substr(0, unit_.size() - 1) : unit_);
}

// "1234 documents/s", "0.5 files/s", "640 MiB/s"
std::string Progress::rate(double per_s) const {
  if (unit_ == "B") return format_bytes(static_cast<uint64_t>(per_s)) + "/s";
  return fmt::format(per_s < 10 ? "{:.1f} {}/s" : "{:.0f} {}/s", per_s, unit_.empty() ? "items" : unit_);
}

std::string format_duration(double s) {
  if (s < 0 || !std::isfinite(s)) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

}  // namespace bcd
