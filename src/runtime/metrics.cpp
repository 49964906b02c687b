// Metrics sink: JSON lines, one flush per record so a crash loses at most the current step.
#include "runtime/metrics.h"

#include "base/error.h"

namespace bcd {

MetricsWriter::MetricsWriter(const std::string& path, bool append)
    : path_(path), out_(path, append ? std::ios::app : std::ios::trunc) {
  if (!out_) user_error("{}: cannot open metrics file for writing", path);
}

void MetricsWriter::write(const nlohmann::json& record) {
  out_ << record.dump() << '\n';
  out_.flush();
  if (!out_) user_error("{}: write failed (disk full?)", path_);
}

}  // namespace bcd
