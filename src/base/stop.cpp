// Stopping long work on SIGINT/SIGTERM (stop.h).
#include "base/stop.h"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <string>
#include <vector>

namespace bcd {

namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_interrupts{false};  // the innermost scope's mode

extern "C" void on_signal(int sig) {
  g_signal.store(sig);
  std::signal(sig, SIG_DFL);  // a second one ends the process
}

// The handler runs on a stack of its own, not below the interrupted code's stack pointer: the
// signal frame (with the AVX-512 state, kilobytes) would otherwise be written there, and
// oneDNN's JIT GEMM kernels keep data below it. A signal arriving mid-GEMM corrupted the heap
// of 2-rank CPU runs (stopped by SIGTERM: "corrupted size vs. prev_size", a crash in the next
// backward) in about a third of the tries; none in 10 with the handler on this stack. Installed
// for the thread that opens a scope (the one that trains: Linux delivers a process's signal to
// its main thread when that thread does not block it).
void use_signal_stack() {
  thread_local std::vector<char> stack;
  if (!stack.empty()) return;
  stack.resize(std::max<size_t>(SIGSTKSZ, size_t{1} << 16));
  stack_t ss{};
  ss.ss_sp = stack.data();
  ss.ss_size = stack.size();
  if (sigaltstack(&ss, nullptr) != 0) stack.clear();  // without it, the handler runs as before
}

void install(int sig, struct sigaction* old) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, old);
}

}  // namespace

Interrupted::Interrupted(int sig)
    : std::runtime_error(std::string("interrupted by ") + (sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal") +
                         ": stopped, and nothing half-written was left"),
      sig_(sig) {}

StopScope::StopScope(Mode mode) : old_interrupts_(g_interrupts.load()) {
  g_signal.store(0);
  g_interrupts.store(mode == Mode::kInterrupt);
  use_signal_stack();
  install(SIGINT, &old_int_);
  install(SIGTERM, &old_term_);
}

StopScope::~StopScope() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  g_interrupts.store(old_interrupts_);
}

void check_stop() {
  if (!g_interrupts.load(std::memory_order_relaxed)) return;
  if (const int sig = g_signal.load(std::memory_order_relaxed)) throw Interrupted(sig);
}

int stop_signal() { return g_signal.load(); }

}  // namespace bcd
