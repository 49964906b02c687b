// summary.json: written when a run ends, read by `train --resume auto`.
#include "report/summary.h"

#include <cmath>

#include "base/files.h"
#include "base/json_read.h"

namespace bcd {

nlohmann::json summary_json(const char* status, const TrainSummary& sum, int64_t total_steps, double wall_s) {
  auto number = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  nlohmann::json j;
  j["status"] = status;
  j["steps"] = sum.steps;
  j["total_steps"] = total_steps;
  j["final_loss"] = sum.steps > 0 ? number(sum.final_loss) : nlohmann::json(nullptr);
  j["final_val_loss"] = sum.final_val_loss ? number(*sum.final_val_loss) : nlohmann::json(nullptr);
  j["tokens_per_s"] = sum.tokens_per_s > 0 ? nlohmann::json(sum.tokens_per_s) : nlohmann::json(nullptr);
  nlohmann::json peak = nlohmann::json::object();
  for (const char* pool : {"compute", "pinned", "host", "nvme"})
    peak[pool] = sum.memory.contains(pool) ? sum.memory[pool].value("peak", uint64_t{0}) : uint64_t{0};
  j["peak_bytes"] = peak;
  j["rss_peak_bytes"] = sum.rss_peak_bytes;
  j["stall_ms_total"] = 1e3 * sum.staging.stall_s;
  j["switch_wait_ms_total"] = 1e3 * sum.staging.copy_wait_s;
  j["switch_wait_ms_per_switch"] =
      sum.staging.switches > 0 ? nlohmann::json(1e3 * sum.staging.copy_wait_s / static_cast<double>(sum.staging.switches))
                               : nlohmann::json(nullptr);
  const bool streamed = sum.stream && sum.stream->acquires > 0;
  j["stream_wait_ms_total"] = streamed ? nlohmann::json(1e3 * sum.stream->copy_wait_s) : nlohmann::json(nullptr);
  j["stream_wait_ms_per_layer"] =
      streamed ? nlohmann::json(1e3 * sum.stream->copy_wait_s / static_cast<double>(sum.stream->acquires))
               : nlohmann::json(nullptr);
  j["wall_s"] = wall_s;
  return j;
}

void write_summary(const std::string& run_dir, const nlohmann::json& j) {
  write_file_atomic(run_dir + "/summary.json", j.dump(2) + "\n", "run summary");
}

std::optional<SummaryStatus> read_summary_status(const std::string& path) {
  const auto j = read_json_file(path, kJsonConfig, "run summary", /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("status") || !j["status"].is_string())
    return std::nullopt;
  SummaryStatus out;
  out.status = j["status"].get<std::string>();
  const auto steps = j.find("steps");
  if (steps != j.end() && steps->is_number_integer()) out.steps = steps->get<int64_t>();
  return out;
}

}  // namespace bcd
