// <run_dir>/metrics.jsonl: one JSON object per logged step, flushed as written.
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

namespace bcd {

class MetricsWriter {
 public:
  // Truncates the file (a new run) unless `append` (a resumed run).
  MetricsWriter(const std::string& path, bool append = false);
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace bcd
