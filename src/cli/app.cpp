// bcdtrain command line: subcommands train, launch, config, plan, prepare, generate, eval,
// iobench, import and export (Hugging Face safetensors), plot. This file only dispatches: each
// subcommand is in the file of its group (cli/command.h); main.cpp is the process around it.
// Bad input anywhere becomes one line on stderr and exit code 2: escaped (a path, a flag's value or
// a record may hold a newline or a terminal's escape sequence) and never longer than kMaxErrorLine.
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cli/app.h"

#include "base/error.h"
#include "base/printable.h"
#include "base/stop.h"
#include "cli/command.h"
#include "io/state_file.h"
#include "dist/launcher.h"

namespace {

using namespace bcd;
using namespace bcd::cli;

int run(int argc, char** argv) {
  // launch: its own options, then a whole bcdtrain command line for every rank, untouched (its
  // overrides are the rank command's).
  // plot: its words, run directories among them, read in order by the command itself.
  std::vector<std::string> rest;
  Overrides overrides;
  const std::string first = argc > 1 ? argv[1] : "";
  const bool prefix = first == "launch" || first == "plot";
  if (prefix) rest.assign(argv + 1, argv + argc);
  else split_overrides(std::vector<std::string>(argv + 1, argv + argc), rest, overrides);
  // From "--" on, a prefix command's words are its own: CLI11 would take them for positionals.
  std::vector<std::string> after_dashes;
  if (prefix) {
    const auto dashes = std::find(rest.begin(), rest.end(), "--");
    after_dashes.assign(dashes, rest.end());
    rest.erase(dashes, rest.end());
  }

  CLI::App app{"bcdtrain: full-parameter LLM training by block coordinate descent"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "bcdtrain 0.1");
  // In --help's order.
  std::vector<Command> commands;
  commands.push_back(add_train(app));
  commands.push_back(add_launch(app));
  commands.push_back(add_config(app));
  commands.push_back(add_plan(app));
  commands.push_back(add_prepare(app));
  commands.push_back(add_tokenize(app));
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
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    throw UserError(parse_error_message(app, e));     // in our words, naming the flag
  }
  for (const Command& c : commands) {
    if (!c.sub->parsed()) continue;
    if (!overrides.empty() && !c.takes_overrides)
      user_error("config overrides ({}) are only accepted by train, config and plan", overrides.front());
    // Long work stops on SIGINT/SIGTERM at its next check, its temporaries removed (base/stop.h);
    // train stops at a step or micro-batch with a checkpoint (its RunGuard polls the same flag) and
    // launch forwards the signal to its ranks.
    const std::string& name = c.sub->get_name();
    std::optional<StopScope> stops;
    if (name != "train" && name != "launch") stops.emplace();
    if (c.run_words) {
      std::vector<std::string> words = c.sub->remaining();
      words.insert(words.end(), after_dashes.begin(), after_dashes.end());
      return c.run_words(words);
    }
    return c.run(overrides);
  }
  return 0;
}

// The one line an error ends with: escaped, the middle of an overlong one left out (a path of
// 4000 bytes). A torch error (a bug, exit 1) keeps its lines, escaped.
constexpr size_t kMaxErrorLine = 1000;
void print_error(const char* kind, const std::string& what) {
  fmt::print(stderr, "bcdtrain: {}: {}\n", kind, shorten_line(printable_line(what), kMaxErrorLine));
}

}  // namespace

namespace bcd::cli {

int run_command_line(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Interrupted& e) {
    fmt::print(stderr, "bcdtrain: {}\n", e.what());
    return 128 + e.signal();
  } catch (const UserError& e) {
    print_error("error", e.what());
    write_launcher_error_file(e.what(), 2);
    if (state_file_abandoned()) {  // skip HDF5's exit handler: it would flush that file again
      std::fflush(nullptr);
      ::_exit(2);
    }
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave (or a directory under it) that the system refused: the user's to fix.
    const std::string what = e.path1().empty() ? e.code().message()
                                               : fmt::format("{}: {}", e.path1().string(), e.code().message());
    print_error("error", what);
    write_launcher_error_file(what, 2);
    return 2;
  } catch (const InternalError& e) {
    print_error("internal error", e.what());
    write_launcher_error_file(std::string("internal error: ") + e.what(), 1);
    return 1;
  } catch (const c10::Error& e) {
    fmt::print(stderr, "bcdtrain: torch error: {}\n", printable(e.what_without_backtrace()));
    write_launcher_error_file(std::string("torch error: ") + e.what_without_backtrace(), 1);
    return 1;
  } catch (const std::exception& e) {
    print_error("error", e.what());
    write_launcher_error_file(e.what(), 1);
    return 1;
  }
}

}  // namespace bcd::cli
