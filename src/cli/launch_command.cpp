// launch: a whole bcdtrain command line run as N data-parallel ranks. Its own options come first
// and the rest goes to every rank untouched, so it is parsed before the app.
#include <optional>
#include <string>
#include <vector>

#include "base/bytes.h"
#include "base/config.h"
#include "base/error.h"
#include "cli/command.h"
#include "cli/launch_args.h"
#include "runtime/launcher.h"

namespace bcd::cli {

namespace {

int parse_int(const std::string& flag, const std::string& text, int lo, int hi) {
  const std::optional<int64_t> v = parse_count(text);
  if (!v || *v < lo || *v > hi)
    user_error("{}: expected an integer from {} to {}, got {}", flag, lo, hi, text.empty() ? "\"\"" : text);
  return static_cast<int>(*v);
}

// The config of the rank command's --config FILE and overrides; none without either (a resume:
// its config is in the checkpoint).
std::optional<Config> command_config(const std::vector<std::string>& command) {
  std::vector<std::string> rest, overrides;
  split_overrides(std::vector<std::string>(command.begin() + 1, command.end()), rest, overrides);
  std::string file;
  for (size_t k = 0; k < rest.size(); ++k) {
    if (rest[k] == "--config" && k + 1 < rest.size()) file = rest[++k];
    else if (rest[k].rfind("--config=", 0) == 0) file = rest[k].substr(9);
  }
  if (file.empty() && overrides.empty()) return std::nullopt;
  return load_config(file, overrides);
}

}  // namespace

std::vector<std::string> parse_launch_args(const std::vector<std::string>& args, LaunchOptions& opt) {
  size_t i = 0;
  auto value = [&](const std::string& flag) -> std::string {
    if (i + 1 >= args.size()) user_error("{}: expected a value, got none (launch {} VALUE ... train ...)", flag, flag);
    return args[++i];
  };
  bool nproc_given = false;
  for (; i < args.size(); ++i) {
    std::string a = args[i], v;
    const auto eq = a.find('=');
    const bool inline_value = a.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) v = a.substr(eq + 1), a = a.substr(0, eq);
    auto get = [&]() { return inline_value ? v : value(a); };
    if (a == "--") {
      ++i;
      break;
    } else if (a == "--nproc" || a == "--nproc-per-node" || a == "--nproc_per_node") {
      opt.nproc = parse_int(a, get(), 1, 1024);
      nproc_given = true;
    } else if (a == "--nnodes") {
      opt.nnodes = parse_int(a, get(), 1, 65536);
    } else if (a == "--node-rank" || a == "--node_rank") {
      opt.node_rank = parse_int(a, get(), 0, 65535);
    } else if (a == "--master-addr" || a == "--master_addr") {
      opt.master_addr = get();
    } else if (a == "--master-port" || a == "--master_port") {
      opt.master_port = parse_int(a, get(), 1, 65535);
    } else if (a == "--grace") {
      opt.grace_s = parse_int(a, get(), 0, 86400);
    } else if (a == "--oversubscribe") {
      if (inline_value) user_error("--oversubscribe: expected no value, got {}", v);
      opt.oversubscribe = true;
    } else {
      break;
    }
  }
  std::vector<std::string> command(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (command.empty()) user_error("launch: no command to run (e.g. bcdtrain launch --nproc 2 train --config FILE)");
  if (command[0] != "train")
    user_error("launch: runs `train` on every rank; `{}` is meant to run once: run `bcdtrain {}` without launch",
               command[0], command[0]);
  const std::optional<Config> cfg = command_config(command);
  check_launch(opt, cfg ? &*cfg : nullptr, nproc_given);
  return command;
}

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
