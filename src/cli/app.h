// The whole command line of bcdtrain, as main() runs it once the process is set up: parsed,
// dispatched to its subcommand and run; bad input anywhere ends as one line on stderr and exit
// code 2.
#pragma once

namespace bcd::cli {

// `bcdtrain ARGS...` (argv[0] is the program): the exit code. Errors are printed, escaped and
// one line long (a torch error, a bug, keeps its lines): nothing is thrown.
int run_command_line(int argc, char** argv);

}  // namespace bcd::cli
