// SIGINT and SIGTERM for long work: while a StopScope lives, the first signal only sets a flag
// (a second one ends the process at once). Work that can stop anywhere (prepare, import, export,
// eval, generate, tokenize) calls check_stop() in its loops, which then throws Interrupted: its
// unwinding removes what was half written (a StagingDir, an atomic write's temporary file) and
// the command exits 128 + the signal within a second or two. A training run polls stop_signal()
// instead, and stops after its step with a checkpoint (runtime/run_guard.h); check_stop() does not
// throw within its scope.
#pragma once

#include <csignal>
#include <stdexcept>

namespace bcd {

class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int sig);
  int signal() const { return sig_; }

 private:
  int sig_;
};

class StopScope {
 public:
  enum class Mode { kInterrupt, kPoll };  // whether check_stop() throws within the scope
  // Installs the handlers (SIGINT, SIGTERM) and clears the flag.
  explicit StopScope(Mode mode = Mode::kInterrupt);
  ~StopScope();  // puts the previous handlers back
  StopScope(const StopScope&) = delete;
  StopScope& operator=(const StopScope&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  bool old_interrupts_;
};

// Throws Interrupted when a signal came while a StopScope of Mode::kInterrupt lives; cheap (one
// atomic load).
void check_stop();

// The signal that came while a StopScope lives, else 0.
int stop_signal();

}  // namespace bcd
