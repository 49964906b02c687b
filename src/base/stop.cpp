// Stopping long work on SIGINT/SIGTERM (stop.h).
#include "base/stop.h"

#include <atomic>
#include <csignal>
#include <string>

namespace bcd {

namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_interrupts{false};  // the innermost scope's mode

extern "C" void on_signal(int sig) {
  g_signal.store(sig);
  std::signal(sig, SIG_DFL);  // a second one ends the process
}

}  // namespace

Interrupted::Interrupted(int sig)
    : std::runtime_error(std::string("interrupted by ") + (sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal") +
                         ": stopped, and nothing half-written was left"),
      sig_(sig) {}

StopScope::StopScope(Mode mode) : old_interrupts_(g_interrupts.load()) {
  g_signal.store(0);
  g_interrupts.store(mode == Mode::kInterrupt);
  old_int_ = std::signal(SIGINT, on_signal);
  old_term_ = std::signal(SIGTERM, on_signal);
}

StopScope::~StopScope() {
  std::signal(SIGINT, old_int_);
  std::signal(SIGTERM, old_term_);
  g_interrupts.store(old_interrupts_);
}

void check_stop() {
  if (!g_interrupts.load(std::memory_order_relaxed)) return;
  if (const int sig = g_signal.load(std::memory_order_relaxed)) throw Interrupted(sig);
}

int stop_signal() { return g_signal.load(); }

}  // namespace bcd
