// launch: a whole bcdtrain command line run as N data-parallel ranks. Its own options come first
// and the rest goes to every rank untouched, so it is parsed before the app.
#include <string>
#include <vector>

#include "cli/command.h"
#include "runtime/launcher.h"

namespace bcd::cli {

void add_launch(CLI::App& app) {
  app.add_subcommand("launch", "run `train` as N data-parallel ranks: launch [--nproc N (default: the config's [dist] nproc)] [--oversubscribe] [--nnodes M --node-rank K "
                               "--master-addr HOST --master-port PORT] train --config FILE ...")
      ->allow_extras();
}

int run_launch(int argc, char** argv) {
  LaunchOptions lopt;
  const std::vector<std::string> command = parse_launch_args(std::vector<std::string>(argv + 2, argv + argc), lopt);
  return launch_ranks(lopt, command);
}

}  // namespace bcd::cli
