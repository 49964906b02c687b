// bcdtrain: the process around the command line (cli/app.h runs it).
#include <unistd.h>

#include <cstdlib>

#include "cli/app.h"

int main(int argc, char** argv) {
  // libgomp reads OMP_WAIT_POLICY once, when it is loaded. Its default (spin for a while after
  // every parallel region) steals the second core from the BLAS threads and halves CPU training
  // speed on small machines, so unless the user chose a policy we set PASSIVE and start again.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("BCD_NO_REEXEC")) {
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    ::execv("/proc/self/exe", argv);  // returns only on failure: carry on with the default
  }
  return bcd::cli::run_command_line(argc, argv);
}
