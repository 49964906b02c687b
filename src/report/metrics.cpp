// Metrics: JSON lines, one flush per record so a crash loses at most the current step.
#include "report/metrics.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <utility>

#include "base/bytes.h"
#include "base/error.h"
#include "base/files.h"
#include "base/json_read.h"
#include "report/metric_keys.h"

namespace bcd {

MetricsWriter::MetricsWriter(const std::string& path, bool append, bool tensorboard)
    : path_(path), out_(path, append ? std::ios::app : std::ios::trunc) {
  if (!out_) user_error("{}: cannot open metrics file for writing", path);
  if (tensorboard) {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    events_.emplace(open_tensorboard(dir.empty() ? "." : dir.string()));
  }
}

namespace {

// A record's step: an object with an integer "step" (what the readers and TensorBoard key on).
std::optional<int64_t> step_of(const nlohmann::json& record) {
  if (!record.is_object() || !record.contains(metric_key::kStep) || !record[metric_key::kStep].is_number_integer())
    return std::nullopt;
  return record[metric_key::kStep].get<int64_t>();
}

}  // namespace

void MetricsWriter::write(const nlohmann::json& record) {
  out_ << record.dump() << '\n';
  out_.flush();
  if (!out_) user_error("{}: write failed (disk full?)", path_);
  if (const std::optional<int64_t> step = step_of(record); events_ && step)
    events_->add_scalars(*step, metrics_scalars(record));
}

std::vector<MetricsLine> read_metrics_lines(const std::string& path, const std::string& then) {
  std::vector<MetricsLine> out;
  std::ifstream in(path);
  if (!in) return out;
  std::string text;
  int64_t bad = 0;  // the line that was not a record, while no line follows it
  std::string why;
  for (int64_t no = 1; std::getline(in, text); ++no) {
    if (text.empty()) continue;
    // A line in the middle that cannot be read is not a torn write: leaving it out there would
    // drop every record after it. Nothing is rewritten; the user repairs or removes it.
    if (bad > 0)
      user_error("{}: line {} is not a metrics record ({}); records follow it, so it is not a torn last line: {}",
                 path, bad, why, then);
    nlohmann::json rec = parse_json(text, kJsonMetricsLine, path, /*allow_exceptions=*/false);
    const std::optional<int64_t> step = step_of(rec);
    if (!step) {
      bad = no;
      why = rec.is_discarded() ? "not JSON" : "no integer \"step\"";
      continue;
    }
    out.push_back({no, *step, std::move(text), std::move(rec)});
  }
  return out;
}

void truncate_metrics(const std::string& path, int64_t first_step) {
  // A file that cannot be read is left as it is (read_metrics_lines would find no record in it).
  if (!std::ifstream(path)) return;
  std::string kept;
  for (const MetricsLine& l : read_metrics_lines(path, "repair or delete that line, then resume again (nothing was changed)")) {
    if (l.step >= first_step) break;
    kept += l.text + "\n";
  }
  write_file_atomic(path, kept, "metrics file");
}

void MetricsLog::record(const StepReport& s) {
  nlohmann::json rec = {{metric_key::kStep, s.step},
                        {metric_key::kLoss, s.loss},
                        {"lr", s.lr},
                        {"grad_norm", s.grad_norm},
                        {"tokens", s.tokens},
                        {metric_key::kTokensPerS, s.tokens_per_s},
                        {metric_key::kElapsedS, s.elapsed_s},
                        {"flops_per_step", s.flops},
                        {"tflops", s.tflops}};
  // Model FLOPs utilisation: achieved over the device's peak (null when the peak is unknown).
  rec["mfu"] = s.peak_tflops ? nlohmann::json(s.tflops / *s.peak_tflops) : nlohmann::json();
  if (s.val_loss) rec[metric_key::kValLoss] = *s.val_loss;
  if (s.visit) {
    rec[metric_key::kBlock] = s.visit->block;
    rec[metric_key::kBlockId] = s.unit;
    rec["block_epoch"] = s.visit->epoch;
    rec["step_in_visit"] = s.visit->step_in_visit;
  }
  rec["optim_state_bytes"] = s.optim_state_bytes;
  if (s.block_state_bytes) rec["block_state_bytes"] = *s.block_state_bytes;
  if (!s.state_bytes_by_block.empty()) {
    nlohmann::json per_block;  // moments held per block at the start of each visit
    for (const auto& [name, bytes] : s.state_bytes_by_block) per_block[name] = bytes;
    rec["state_bytes_by_block"] = per_block;
  }
  if (s.staging) {  // staging since the previous record, and totals
    const StagerStats& st = *s.staging;
    rec[metric_key::kSwitches] = st.switches - logged_staging_.switches;
    rec[metric_key::kStallMs] = 1e3 * (st.stall_s - logged_staging_.stall_s);
    rec["stall_ms_total"] = 1e3 * st.stall_s;
    rec["switch_copy_ms_total"] = 1e3 * st.copy_s;
    // The compute side's waits for the switches' copies (CUDA: event-timed on its stream).
    rec["switch_wait_ms"] = 1e3 * (st.copy_wait_s - logged_staging_.copy_wait_s);
    rec["switch_wait_ms_total"] = 1e3 * st.copy_wait_s;
    rec["switch_wait_ms_per_switch"] = st.switches > 0 ? 1e3 * st.copy_wait_s / static_cast<double>(st.switches) : 0.0;
    rec["staged_bytes"] = {{"nvme_read", st.nvme_read_bytes},   {"nvme_write", st.nvme_write_bytes},
                           {"host_read", st.host_read_bytes},   {"host_write", st.host_write_bytes},
                           {"compute_in", st.compute_in_bytes}, {"compute_out", st.compute_out_bytes}};
    logged_staging_ = st;
  }
  if (s.stream_totals) {  // frozen layers' weights streamed from host memory: this step's, and totals
    const WeightStreamStats& t = *s.stream_totals;
    rec["stream_bytes"] = s.stream_bytes;
    rec["stream_stall_ms"] = 1e3 * s.stream_stall_s;
    rec["stream_layer_stall_ms_max"] = 1e3 * s.stream_layer_stall_s;
    rec["stream_layer_stall_ms_mean"] = s.stream_uses > 0 ? 1e3 * s.stream_stall_s / static_cast<double>(s.stream_uses) : 0.0;
    if (!s.stream_stall_block.empty()) rec["stream_layer_stall_block"] = s.stream_stall_block;
    rec["stream_bytes_total"] = t.bytes;
    rec["stream_stall_ms_total"] = 1e3 * t.stall_s;
    rec["stream_wait_ms_total"] = 1e3 * t.copy_wait_s;  // the compute side's waits (CUDA: event-timed)
    rec["stream_wait_ms_per_layer"] = t.acquires > 0 ? 1e3 * t.copy_wait_s / static_cast<double>(t.acquires) : 0.0;
    rec["stream_misses_total"] = t.misses;
  }
  if (s.comm) {  // data parallel: the gradient's trip over the ranks
    const StepReport::Comm& c = *s.comm;
    rec["comm_bytes_total"] = c.bytes_sent;
    rec["comm_exposed_ms"] = 1e3 * (c.exposed_s - logged_exposed_s_);
    rec["comm_exposed_ms_total"] = 1e3 * c.exposed_s;
    if (c.gather_s) rec["comm_gather_ms_total"] = 1e3 * *c.gather_s;
    rec["comm_buckets"] = c.buckets;
    rec["comm_buckets_in_backward"] = c.buckets_in_backward;
    rec["comm_bucket_rebuilds"] = c.bucket_rebuilds;
    rec["comm_forward_ahead_total"] = c.forward_ahead;
    logged_exposed_s_ = c.exposed_s;
  }
  nlohmann::json peaks;
  for (int p = 0; p < kNumPools; ++p) peaks[pool_name(static_cast<Pool>(p))] = s.pool_peak_bytes[p];
  rec[metric_key::kMemoryPeakBytes] = peaks;
  rec["rss_peak_bytes"] = s.rss_peak_bytes;
  rec["host_reads_total"] = s.host_reads;  // device values read by the host (dist/host_read.h)
  if (s.cuda) {  // what the GPU really held, beside the accounting's figures
    rec["cuda_peak_allocated_bytes"] = s.cuda->peak_allocated;
    rec["cuda_peak_reserved_bytes"] = s.cuda->peak_reserved;
    if (s.cuda->used) rec["cuda_used_bytes"] = *s.cuda->used;
  }
  if (checkpoint_s > 0) rec["checkpoint_s_total"] = checkpoint_s;
  if (!s.accounting.is_null()) rec["memory"] = s.accounting;
  writer_.write(rec);
}

std::string MetricsLog::progress_line(const StepReport& s) {
  std::string line = fmt::format("step {:>{}}/{} | loss {:.4f} | lr {:.2e} | {:.0f} tok/s | ETA {}", s.step,
                                 std::to_string(s.steps).size(), s.steps, s.loss, s.lr, s.tokens_per_s,
                                 format_duration(s.eta_s));
  if (s.val_loss) line += fmt::format(" | val {:.4f}", *s.val_loss);
  if (s.visit) line += fmt::format(" | {} (epoch {})", s.visit->block, s.visit->epoch);
  if (s.staging) line += fmt::format(" | stall {:.1f} ms", 1e3 * s.staging->stall_s);
  // what each memory tier holds now
  std::string mem;
  for (int p = 0; p < kNumPools; ++p)
    if (s.pool_bytes[p] > 0)
      mem += fmt::format("{}{} {}", mem.empty() ? "" : ", ", pool_name(static_cast<Pool>(p)), format_bytes(s.pool_bytes[p]));
  if (!mem.empty()) line += " | " + mem;
  return line;
}

uint64_t process_memory_bytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(in, line))
    if (line.rfind(k, 0) == 0) return std::stoull(line.substr(k.size())) * 1024;  // "VmHWM:  1234 kB"
  return 0;
}

}  // namespace bcd
