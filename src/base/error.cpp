// Formatting of internal failures.
#include "base/error.h"

namespace bcd {

void fail(const char* expr, const char* file, int line, const std::string& detail) {
  std::string msg = fmt::format("{}:{}: check failed: {}", file, line, expr);
  if (!detail.empty()) msg += fmt::format(" ({})", detail);
  throw InternalError(msg);
}

}  // namespace bcd
