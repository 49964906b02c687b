// launch: a whole bcdtrain command line run as N data-parallel ranks. Its own options come first
// and the rest goes to every rank untouched (the app leaves launch's words whole: no overrides).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/bytes.h"
#include "base/config.h"
#include "base/error.h"
#include "cli/command.h"
#include "cli/flags.h"
#include "cli/launch_args.h"
#include "dist/launcher.h"

namespace bcd::cli {

namespace {

// launch's own flags, declared on `launch` (the app's subcommand, or a parser of its own for
// parse_launch_args): every word from the first one that is not one of them is the rank command.
void define_launch_flags(CLI::App& sub, LaunchOptions& opt) {
  sub.prefix_command();
  const auto once = CLI::MultiOptionPolicy::Throw;  // --nproc 2 --nproc 1 is a mistake, not "1"
  sub.add_option("--nproc,--nproc-per-node,--nproc_per_node", opt.nproc,
                 "ranks on this machine (default: the command's config's [dist] nproc, else 1)")
      ->transform(integer<int>(1, 1024))->multi_option_policy(once);
  sub.add_option("--nnodes", opt.nnodes, "machines of the run (default 1)")
      ->transform(integer<int>(1, 65536))->multi_option_policy(once);
  sub.add_option("--node-rank,--node_rank", opt.node_rank, "this machine's index, 0 .. nnodes-1")
      ->transform(integer<int>(0, 65535))->multi_option_policy(once);
  sub.add_option("--master-addr,--master_addr", opt.master_addr, "the host of node 0 (several machines)")
      ->transform(text("a host name or address"))->multi_option_policy(once);
  sub.add_option("--master-port,--master_port", opt.master_port, "a free TCP port on node 0 (several machines)")
      ->transform(integer<int>(1, 65535))->multi_option_policy(once);
  sub.add_option("--grace", opt.grace_s, "seconds the ranks get to checkpoint after a signal before they are killed")
      ->transform(integer<int>(0, 86400))->multi_option_policy(once);
  sub.add_flag("--oversubscribe", opt.oversubscribe, "allow more ranks than this machine has cores");
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

// What follows launch's flags: the command every rank runs, checked.
std::vector<std::string> launch_command(std::vector<std::string> command, const std::vector<std::string>& commands) {
  if (!command.empty() && command[0] == "--") command.erase(command.begin());
  if (command.empty()) user_error("launch: no command to run (e.g. bcdtrain launch --nproc 2 train --config FILE)");
  const std::string& name = command[0];
  if (name.size() > 1 && name[0] == '-')
    user_error("{}: unknown option of `launch` (see bcdtrain launch --help)", shown(name.substr(0, name.find('='))));
  const bool known = commands.empty() || std::find(commands.begin(), commands.end(), name) != commands.end();
  if (!known)
    user_error("launch: `{}` is not a bcdtrain command; launch runs `train` on every rank (bcdtrain launch --nproc N "
               "train --config FILE)",
               shown(name));
  if (name != "train")
    user_error("launch: runs `train` on every rank; `{}` is meant to run once: run `bcdtrain {}` without launch", name,
               name);
  return command;
}

// The rank command of `words` (what followed launch's flags in `sub`), checked with the options
// against its config: parse_launch_args's and the app's launch's last step.
std::vector<std::string> checked_launch(const std::vector<std::string>& words, const std::vector<std::string>& commands,
                                        const CLI::App& sub, LaunchOptions& opt) {
  std::vector<std::string> command = launch_command(words, commands);
  const std::optional<Config> cfg = command_config(command);
  // --nproc and the command's own --dist.nproc override both say how many ranks: they must agree
  // (the ranks' world size is --nproc's; the override would be dropped without a word). A
  // config file's [dist] nproc is a default that --nproc replaces.
  const bool nproc_given = sub.count("--nproc") > 0;
  const bool nproc_override = std::any_of(command.begin(), command.end(), [](const std::string& w) {
    return w == "--dist.nproc" || w.rfind("--dist.nproc=", 0) == 0;
  });
  if (nproc_given && nproc_override && cfg && cfg->dist.nproc != opt.nproc)
    user_error("launch: --nproc {} and the command's --dist.nproc={} disagree: give one of them", opt.nproc,
               cfg->dist.nproc);
  check_launch(opt, cfg ? &*cfg : nullptr, nproc_given);
  return command;
}

}  // namespace

std::vector<std::string> parse_launch_args(const std::vector<std::string>& args, LaunchOptions& opt,
                                           const std::vector<std::string>& commands) {
  CLI::App app{"launch"};
  define_launch_flags(app, opt);
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them reversed
  } catch (const CLI::ParseError& e) {
    throw UserError(parse_error_message(app, e));
  }
  return checked_launch(app.remaining(), commands, app, opt);
}

Command add_launch(CLI::App& app) {
  auto* sub = app.add_subcommand("launch", "run `train` as N data-parallel ranks: launch [--nproc N] [--oversubscribe] "
                                           "[--nnodes M --node-rank K --master-addr HOST --master-port PORT] train "
                                           "--config FILE ...");
  auto opt = std::make_shared<LaunchOptions>();
  define_launch_flags(*sub, *opt);
  auto run = [sub, opt, &app](const std::vector<std::string>& words) {
    std::vector<std::string> commands;
    for (const auto* s : app.get_subcommands({})) commands.push_back(s->get_name());
    return launch_ranks(*opt, checked_launch(words, commands, *sub, *opt));
  };
  Command c;
  c.sub = sub;
  c.run_words = run;
  return c;
}

}  // namespace bcd::cli
