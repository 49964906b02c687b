// The command line's pieces: each subcommand adds itself to the CLI11 app (its flags bound to
// state it owns) and returns what runs it once parsed; each value-taking flag declares its check
// (cli/flags.h), so every refusal of a flag reads the same. main.cpp only dispatches.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "cli/flags.h"

namespace bcd::cli {

// --section.key=value words taken off the command line before CLI11 parses the rest.
using Overrides = std::vector<std::string>;

struct Command {
  CLI::App* sub = nullptr;                          // the subcommand in the app
  std::function<int(const Overrides&)> run;         // its exit code
  bool takes_overrides = false;                     // train, config and plan read a config
  // A prefix command (launch, plot) reads its words itself: `run_words` gets every word after its
  // CLI11 flags, in order, "--" and what follows it included (CLI11 would refuse those). Such a
  // command's words are never split into overrides.
  std::function<int(const std::vector<std::string>&)> run_words;
};

// train_commands.cpp: train (a fresh run, --resume and its rules, --resume auto) and config.
Command add_train(CLI::App& app);
Command add_config(CLI::App& app);
// plan_command.cpp: the memory plan of a run.
Command add_plan(CLI::App& app);
// data_commands.cpp: prepare; iobench (the drive under the NVMe tier).
Command add_prepare(CLI::App& app);
Command add_iobench(CLI::App& app);
// tokenize_command.cpp: tokenize, a file's lines as ids (or ids as text) with any tokenizer.
Command add_tokenize(CLI::App& app);
// model_commands.cpp: generate and eval on a trained run or a checkpoint; import and export
// (Hugging Face).
Command add_generate(CLI::App& app);
Command add_eval(CLI::App& app);
Command add_import(CLI::App& app);
Command add_export(CLI::App& app);
// plot_command.cpp: plot, the PNGs of runs' metrics.jsonl.
Command add_plot(CLI::App& app);
// launch_command.cpp: launch runs a whole bcdtrain command line as N ranks: the words after its
// own flags go to every rank untouched.
Command add_launch(CLI::App& app);

}  // namespace bcd::cli
