// A step's report (report/metrics.h's StepReport) completed with what the run's parts hold: the
// visit, the optimizer's state and staging, streamed weights, the ranks' communication, memory.
#pragma once

#include "report/metrics.h"
#include "runtime/run_setup.h"

namespace bcd {

// Adds `run`'s figures to `s`, whose step, unit and loop figures are set.
void add_run_figures(StepReport& s, const RunSetup& run);

}  // namespace bcd
