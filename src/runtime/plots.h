// train.plot: a run draws its own plots when it ends, through scripts/plot.sh (gnuplot).
#pragma once

#include <functional>
#include <string>

namespace bcd {

// scripts/plot.sh for this binary: $BCD_PLOT_SCRIPT when set, else <binary's dir>/../scripts
// (a build directory inside the source tree), else the source tree the build was configured
// from; "" when none of them holds it. `looked`: the places tried, for the warning.
std::string find_plot_script(std::string* looked = nullptr);

// Runs `plot.sh RUN_DIR --out RUN_DIR/plots`; says where the PNGs went. A missing plot.sh or
// gnuplot, or a failing plot.sh, is a warning on stderr: the run itself went well.
void draw_run_plots(const std::string& run_dir, const std::function<void(const std::string&)>& say);

}  // namespace bcd
