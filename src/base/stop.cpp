// Stopping long work on SIGINT/SIGTERM (stop.h).
#include "base/stop.h"

#include <atomic>
#include <csignal>
#include <cstring>
#include <string>

namespace bcd {

namespace {

std::atomic<int> g_signal{0};

extern "C" void on_signal(int sig) {
  g_signal.store(sig);
  std::signal(sig, SIG_DFL);  // a second one ends the process
}

}  // namespace

Interrupted::Interrupted(int sig)
    : std::runtime_error(std::string("interrupted by ") + (sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal") +
                         ": stopped, and nothing half-written was left"),
      sig_(sig) {}

StopScope::StopScope() {
  g_signal.store(0);
  old_int_ = std::signal(SIGINT, on_signal);
  old_term_ = std::signal(SIGTERM, on_signal);
}

StopScope::~StopScope() {
  std::signal(SIGINT, old_int_);
  std::signal(SIGTERM, old_term_);
}

void check_stop() {
  if (const int sig = g_signal.load(std::memory_order_relaxed)) throw Interrupted(sig);
}

}  // namespace bcd
