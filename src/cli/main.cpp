// bcdtrain command line: subcommands train, launch, config, plan, prepare, generate, eval,
// iobench, import and export (Hugging Face safetensors), plot. This file only dispatches: each
// subcommand is in the file of its group (cli/command.h).
// Bad input anywhere becomes one line on stderr and exit code 2.
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/command.h"
#include "io/state_file.h"

namespace {

using namespace bcd;
using namespace bcd::cli;

// "--section.key=value" and "--section.key value" are config overrides; the rest goes to CLI11.
void split_overrides(int argc, char** argv, std::vector<std::string>& rest,
                     std::vector<std::string>& overrides) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const auto eq = a.find('=');
    const auto dot = a.find('.');
    const bool is_override = a.rfind("--", 0) == 0 && dot != std::string::npos && (eq == std::string::npos || dot < eq);
    if (!is_override) {
      rest.push_back(a);
    } else if (eq != std::string::npos) {
      overrides.push_back(a);
    } else {
      if (i + 1 >= argc) user_error("override {}: missing value (expected {}=VALUE)", a, a);
      overrides.push_back(a + "=" + argv[++i]);
    }
  }
}

int run(int argc, char** argv) {
  // launch: its own options, then a whole bcdtrain command line for every rank, untouched.
  if (argc > 1 && std::string(argv[1]) == "launch") return run_launch(argc, argv);
  std::vector<std::string> rest;
  Overrides overrides;
  split_overrides(argc, argv, rest, overrides);

  CLI::App app{"bcdtrain: full-parameter LLM training by block coordinate descent"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "bcdtrain 0.1");
  // In --help's order.
  std::vector<Command> commands;
  commands.push_back(add_train(app));
  add_launch(app);
  commands.push_back(add_config(app));
  commands.push_back(add_plan(app));
  commands.push_back(add_prepare(app));
  commands.push_back(add_generate(app));
  commands.push_back(add_eval(app));
  commands.push_back(add_iobench(app));
  commands.push_back(add_import(app));
  commands.push_back(add_export(app));
  commands.push_back(add_plot(app));

  if (!rest.empty() && rest[0][0] != '-') {
    std::string names;
    bool known = false;
    for (const auto* sub : app.get_subcommands({})) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->get_name() == rest[0];
    }
    if (!known) user_error("unknown subcommand '{}' (expected one of: {})", rest[0], names);
  }
  try {
    std::vector<std::string> args(rest.rbegin(), rest.rend());  // CLI11 takes them reversed
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    fmt::print(stderr, "bcdtrain: {}\n", e.what());
    return 2;
  }
  for (const Command& c : commands) {
    if (!c.sub->parsed()) continue;
    if (!overrides.empty() && !c.takes_overrides)
      user_error("config overrides ({}) are only accepted by train, config and plan", overrides.front());
    return c.run(overrides);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // libgomp reads OMP_WAIT_POLICY once, when it is loaded. Its default (spin for a while after
  // every parallel region) steals the second core from the BLAS threads and halves CPU training
  // speed on small machines, so unless the user chose a policy we set PASSIVE and start again.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("BCD_NO_REEXEC")) {
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    ::execv("/proc/self/exe", argv);  // returns only on failure: carry on with the default
  }
  try {
    return run(argc, argv);
  } catch (const bcd::UserError& e) {
    fmt::print(stderr, "bcdtrain: error: {}\n", e.what());
    if (bcd::state_file_abandoned()) {  // skip HDF5's exit handler: it would flush that file again
      std::fflush(nullptr);
      ::_exit(2);
    }
    return 2;
  } catch (const bcd::InternalError& e) {
    fmt::print(stderr, "bcdtrain: internal error: {}\n", e.what());
    return 1;
  } catch (const c10::Error& e) {
    fmt::print(stderr, "bcdtrain: torch error: {}\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bcdtrain: error: {}\n", e.what());
    return 1;
  }
}
