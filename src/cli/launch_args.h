// `bcdtrain launch`'s command line: its own options, then the command every rank runs.
#pragma once

#include <string>
#include <vector>

#include "dist/launcher.h"

namespace bcd::cli {

// Parses `launch`'s own options from the front of `args` (up to the first word that is not one of
// them, or "--") as the app's `launch` command does, and returns the rest: the command each rank
// runs. Options take "--flag VALUE" and "--flag=VALUE", each at most once. The command's config
// (its --config FILE and its overrides, both forms, read by split_overrides as every command's
// are) gives [dist] nproc when --nproc is not given. UserError on a bad option, on a command
// other than `train` (the one meant to run on every rank) or not in `commands` (bcdtrain's
// commands; not checked when empty), and on what check_launch (dist/launcher.h) refuses.
std::vector<std::string> parse_launch_args(const std::vector<std::string>& args, LaunchOptions& opt,
                                           const std::vector<std::string>& commands = {});

}  // namespace bcd::cli
