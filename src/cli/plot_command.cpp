// plot: the PNGs of one or more runs' metrics.jsonl (report/plots.h). Its flags are read here,
// in order, as scripts/plot.sh read them (that script now only calls this command).
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/printable.h"
#include "cli/command.h"
#include "report/plots.h"
#include "report/tensorboard.h"

namespace bcd::cli {
namespace {

constexpr const char* kUsage = R"(usage: bcdtrain plot RUN_DIR... [--out DIR] [--tensorboard] [-- RUN_DIR...]
  RUN_DIR        a run directory of `bcdtrain train` (its metrics.jsonl); one series per run,
                 named by the directory's last path component (more components when they clash)
  --out DIR      where the PNGs and plots.json go (default: RUN_DIR/plots for one run, ./plots
                 for several)
  --tensorboard  instead of PNGs, write each RUN_DIR/tensorboard/events.out.tfevents.* anew
                 from its metrics.jsonl (every scalar at its step), for `tensorboard --logdir`
  --             every word after it is a RUN_DIR (one that starts with "-" too)
  -h, --help     this text
Writes loss_vs_step.png, loss_vs_time.png, tokens_per_s.png, memory.png, stall.png and
active_block.png; a plot with no series (no run switched blocks, no BCD run) is skipped and
said so on stdout and in plots.json ("skipped": why). Exit status: 0 written, 1 gnuplot failed,
2 bad flags or input, or gnuplot missing (scripts/setup.sh installs it).
)";

[[noreturn]] void usage_error(const std::string& what) { user_error("plot: {} (see bcdtrain plot --help)", what); }

// The flags and run dirs of `words`; false when --help asked for the usage instead.
bool parse_plot_flags(const std::vector<std::string>& words, std::vector<std::string>& runs, std::string& out,
                      bool& tensorboard) {
  bool only_runs = false;  // after "--": every word is a run directory, "-x" too
  for (size_t i = 0; i < words.size(); ++i) {
    std::string flag = words[i], value;
    if (!only_runs && flag == "--") {
      only_runs = true;
      continue;
    }
    if (only_runs) {
      runs.push_back(flag);
      continue;
    }
    bool has_value = false;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos)
      value = flag.substr(eq + 1), flag.resize(eq), has_value = true;
    if (flag == "-h" || flag == "--help") return false;
    if (flag == "--tensorboard") {
      if (has_value) user_error("--tensorboard: takes no value, got \"{}\"", value);
      tensorboard = true;
    } else if (flag == "--out") {
      if (!has_value) {
        if (i + 1 >= words.size()) user_error("--out: expected a directory, got no value");
        value = words[++i];
      }
      if (value.empty()) user_error("--out: expected a directory, got \"\"");
      out = value;
    } else if (flag[0] == '-') {
      user_error("{}: unknown option of `plot` (see bcdtrain plot --help)", flag);
    } else {
      runs.push_back(flag);
    }
  }
  if (runs.empty()) usage_error("no RUN_DIR given");
  for (const std::string& r : runs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(r, ec)) usage_error(r + ": not a directory");
    const std::filesystem::file_status st = std::filesystem::status(r + "/metrics.jsonl", ec);
    if (st.type() == std::filesystem::file_type::not_found || st.type() == std::filesystem::file_type::none)
      usage_error(r + ": no metrics.jsonl there (not a run dir of bcdtrain train?)");
    // A FIFO would block the reader, /dev/zero never end: neither is what train writes.
    if (st.type() != std::filesystem::file_type::regular)
      usage_error(r + "/metrics.jsonl: not a regular file (a pipe, device or directory): expected the metrics "
                  "bcdtrain train writes");
  }
  if (out.empty()) out = runs.size() == 1 ? runs[0] + "/plots" : "plots";
  return true;
}

}  // namespace

Command add_plot(CLI::App& app) {
  auto* plot = app.add_subcommand("plot", "PNGs of runs' metrics.jsonl (gnuplot): loss, tokens/s, memory, stall, active block");
  // Every word comes back unparsed (remaining()): flags are read in order, --help among them.
  plot->set_help_flag();
  plot->prefix_command();
  auto run = [](const std::vector<std::string>& words) {
    std::vector<std::string> runs;
    std::string out;
    bool tensorboard = false;
    if (!parse_plot_flags(words, runs, out, tensorboard)) {
      fmt::print("{}", kUsage);
      return 0;
    }
    if (tensorboard) {
      for (const std::string& r : runs) {
        const EventFileWriter w = open_tensorboard(r);
        fmt::print("wrote {} ({} records of {}/metrics.jsonl)\n", printable_line(w.path()), w.events(), printable_line(r));
      }
      return 0;
    }
    PlotReport report;
    try {
      report = draw_plots(
          runs, out, [](const std::string& line) { fmt::print("{}\n", printable_line(line)); },
          [](const std::string& line) { fmt::print(stderr, "{}\n", printable_line(line)); });
    } catch (const UserError& e) {
      throw UserError(std::string("plot: ") + e.what());
    }
    return report.failed.empty() ? 0 : 1;
  };
  Command c;
  c.sub = plot;
  c.run_words = run;
  return c;
}

}  // namespace bcd::cli
