// SIGINT and SIGTERM for the long work that is not a training run's steps (prepare, import,
// export, eval, generate, tokenize): while a StopScope lives, the first signal only sets a flag,
// and the work's loops call check_stop(), which throws Interrupted. Its unwinding removes what was
// half written (a StagingDir, an atomic write's temporary file) and the command exits 128 + the
// signal within a second or two. A second signal ends the process at once. (A training run has
// its own handler: it checkpoints before it stops, runtime/run_guard.h.)
#pragma once

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
  StopScope();   // installs the handlers (SIGINT, SIGTERM) and clears the flag
  ~StopScope();  // puts the previous handlers back
  StopScope(const StopScope&) = delete;
  StopScope& operator=(const StopScope&) = delete;

 private:
  void (*old_int_)(int);
  void (*old_term_)(int);
};

// Throws Interrupted when a signal came while a StopScope lived; cheap (one atomic load).
void check_stop();

}  // namespace bcd
