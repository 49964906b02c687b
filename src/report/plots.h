// Plots of training runs from their metrics.jsonl: `bcdtrain plot` and train.plot. Six PNGs
// drawn by gnuplot (pngcairo), one series per run, and plots.json listing each plot's series.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace bcd {

using PlotSay = std::function<void(const std::string&)>;

// What draw_plots did: the PNGs written (file names, in plot order) and, for each plot gnuplot
// failed on, why ("plot: gnuplot failed on memory.png (exit 1): ...").
struct PlotReport {
  std::vector<std::string> written;
  std::vector<std::string> failed;
};

// Legend names of runs: each dir's last path component, or as many components as make them
// unique; names over 40 characters lose their middle while they stay unique ("a (1)", "a (2)":
// the same dir twice).
std::vector<std::string> plot_run_names(const std::vector<std::string>& run_dirs);

// Draws loss_vs_step, loss_vs_time, tokens_per_s, memory, stall and active_block (.png) of the
// runs into out_dir, and out_dir/plots.json. A plot with no series is skipped: its stale PNG
// removed, "skipped" in plots.json. `say` gets the stdout lines ("plot: wrote DIR/x.png (3
// series)", "plot: skipped ..."), `warn` the stderr ones (a run without records, gnuplot's
// failures). Throws UserError, before writing anything, for a malformed metrics.jsonl
// (file:line), an unreadable one, or gnuplot (or its pngcairo terminal) missing.
PlotReport draw_plots(const std::vector<std::string>& run_dirs, const std::string& out_dir, const PlotSay& say,
                      const PlotSay& warn);

// train.plot: draws RUN_DIR/plots when the run ends and says where the PNGs went. A missing
// gnuplot or a failing one is a warning on stderr: the run itself went well.
void draw_run_plots(const std::string& run_dir, const PlotSay& say);

}  // namespace bcd
