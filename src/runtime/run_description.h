// What the banner says of a run (report/banner.h's RunDescription), read from its set-up.
#pragma once

#include "report/banner.h"
#include "runtime/run_setup.h"

namespace bcd {

RunDescription run_description(const RunSetup& run);

}  // namespace bcd
