// The lines a run prints before its first step: model, data, training, utilisation, BCD, memory,
// streamed weights, ranks, resume.
#pragma once

#include <string>
#include <vector>

#include "runtime/run_setup.h"

namespace bcd {

std::vector<std::string> run_banner(const RunSetup& run);

}  // namespace bcd
