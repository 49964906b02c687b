// Metrics: JSON lines, one flush per record so a crash loses at most the current step.
#include "dist/host_read.h"
#include "runtime/metrics.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <utility>

#include "base/bytes.h"
#include "base/error.h"
#include "base/files.h"
#include "base/json_read.h"
#include "runtime/cuda_torch.h"
#include "runtime/run_setup.h"

namespace bcd {

MetricsWriter::MetricsWriter(const std::string& path, bool append, bool tensorboard)
    : path_(path), out_(path, append ? std::ios::app : std::ios::trunc) {
  if (!out_) user_error("{}: cannot open metrics file for writing", path);
  if (tensorboard) {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    events_.emplace(open_tensorboard(dir.empty() ? "." : dir.string()));
  }
}

void MetricsWriter::write(const nlohmann::json& record) {
  out_ << record.dump() << '\n';
  out_.flush();
  if (!out_) user_error("{}: write failed (disk full?)", path_);
  if (events_ && record.contains("step") && record["step"].is_number_integer())
    events_->add_scalars(record["step"].get<int64_t>(), metrics_scalars(record));
}

void truncate_metrics(const std::string& path, int64_t first_step) {
  std::ifstream in(path);
  if (!in) return;
  std::vector<std::pair<int64_t, std::string>> lines;  // (line number, text), blank lines skipped
  std::string line;
  for (int64_t no = 1; std::getline(in, line); ++no)
    if (!line.empty()) lines.emplace_back(no, line);
  in.close();
  std::string kept;
  for (size_t i = 0; i < lines.size(); ++i) {
    int64_t step = 0;
    try {
      step = parse_json(lines[i].second, kJsonMetricsLine, path).at("step").get<int64_t>();
    } catch (const std::exception& e) {
      if (i + 1 == lines.size()) break;  // a torn last line of a killed run
      // A record in the middle that cannot be read is not a torn write: cutting there would
      // delete every record after it. Nothing is rewritten; the user repairs or removes it.
      user_error("{}: line {} is not a metrics record ({}); records follow it, so it is not a torn last line: "
                 "repair or delete that line, then resume again (nothing was changed)",
                 path, lines[i].first, e.what());
    }
    if (step >= first_step) break;
    kept += lines[i].second + "\n";
  }
  write_file_atomic(path, kept, "metrics file");
}

void MetricsLog::record(const StepStats& s, const RunSetup& run) {
  const BcdConfig& bc = run.cfg.bcd;
  const BlockAdamW* opt = run.block_opt.get();
  nlohmann::json rec = {{"step", s.step},
                        {"loss", s.loss},
                        {"lr", s.lr},
                        {"grad_norm", s.grad_norm},
                        {"tokens", run.tokens_per_step() * s.step},
                        {"tokens_per_s", s.tokens_per_s},
                        {"elapsed_s", s.elapsed_s},
                        {"flops_per_step", s.flops},
                        {"tflops", s.tflops}};
  // Model FLOPs utilisation: achieved over the device's peak (null when the peak is unknown).
  rec["mfu"] = run.peak_tflops ? nlohmann::json(s.tflops / *run.peak_tflops) : nlohmann::json();
  if (s.val_loss) rec["val_loss"] = *s.val_loss;
  if (bc.enabled) {
    rec["block"] = run.units[s.unit].name;
    rec["block_id"] = s.unit;
    rec["block_epoch"] = run.sched.epoch();
    rec["step_in_visit"] = run.sched.step_in_visit();
  }
  rec["optim_state_bytes"] = run.torch_opt ? run.torch_opt->state_bytes() : opt->state_bytes();
  if (opt) rec["block_state_bytes"] = opt->unit_moment_bytes(s.unit);
  if (opt && bc.enabled && (run.sched.step_in_visit() == 0 || s.step == 1)) {
    nlohmann::json per_block;  // moments held per block at the start of each visit
    for (size_t u = 0; u < run.units.size(); ++u) per_block[run.units[u].name] = opt->unit_moment_bytes(static_cast<int>(u));
    rec["state_bytes_by_block"] = per_block;
  }
  if (opt) {  // staging since the previous record, and totals
    const StagerStats& st = opt->staging();
    rec["switches"] = st.switches - logged_staging_.switches;
    rec["stall_ms"] = 1e3 * (st.stall_s - logged_staging_.stall_s);
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
  if (run.streamed) {  // frozen layers' weights streamed from host memory: this step's, and totals
    const WeightStreamStats& t = run.streamed->totals();
    rec["stream_bytes"] = s.stream_bytes;
    rec["stream_stall_ms"] = 1e3 * s.stream_stall_s;
    rec["stream_layer_stall_ms_max"] = 1e3 * s.stream_layer_stall_s;
    rec["stream_layer_stall_ms_mean"] = s.stream_uses > 0 ? 1e3 * s.stream_stall_s / static_cast<double>(s.stream_uses) : 0.0;
    if (s.stream_stall_block >= 0) rec["stream_layer_stall_block"] = run.model.block(s.stream_stall_block).name();
    rec["stream_bytes_total"] = t.bytes;
    rec["stream_stall_ms_total"] = 1e3 * t.stall_s;
    rec["stream_wait_ms_total"] = 1e3 * t.copy_wait_s;  // the compute side's waits (CUDA: event-timed)
    rec["stream_wait_ms_per_layer"] = t.acquires > 0 ? 1e3 * t.copy_wait_s / static_cast<double>(t.acquires) : 0.0;
    rec["stream_misses_total"] = t.misses;
  }
  if (run.reducer) {  // data parallel: the gradient's trip over the ranks
    const GradReducer::Stats& c = run.reducer->stats();
    const double exposed_s = c.exposed_s_total + run.ops().gather_s();  // sharded: the weights' all-gather too
    rec["comm_bytes_total"] = run.pg->bytes_sent();
    rec["comm_exposed_ms"] = 1e3 * (exposed_s - logged_exposed_s_);
    rec["comm_exposed_ms_total"] = 1e3 * exposed_s;
    if (run.shards() > 1) rec["comm_gather_ms_total"] = 1e3 * run.ops().gather_s();
    rec["comm_buckets"] = c.buckets;
    rec["comm_buckets_in_backward"] = c.started_in_backward;
    rec["comm_bucket_rebuilds"] = c.rebuilds;
    rec["comm_forward_ahead_total"] = run.steps_run_ahead;
    logged_exposed_s_ = exposed_s;
  }
  const MemoryAccounting& acct = run.acct;
  rec["memory_peak_bytes"] = {{"compute", acct.usage(Pool::kCompute).total_peak},
                              {"pinned", acct.usage(Pool::kPinned).total_peak},
                              {"host", acct.usage(Pool::kHost).total_peak},
                              {"nvme", acct.usage(Pool::kNvme).total_peak}};
  rec["rss_peak_bytes"] = process_memory_bytes("VmHWM");
  rec["host_reads_total"] = host_reads();  // device values read by the host (dist/host_read.h)
  if (run.device.is_cuda())  // what the GPU really held, beside the accounting's figures
    if (const auto p = cuda_allocator_peaks(cuda_index(run.device))) {
      rec["cuda_peak_allocated_bytes"] = p->allocated;
      rec["cuda_peak_reserved_bytes"] = p->reserved;
      if (const auto used = cuda_device_used_bytes(cuda_index(run.device))) rec["cuda_used_bytes"] = *used;
    }
  if (checkpoint_s > 0) rec["checkpoint_s_total"] = checkpoint_s;
  if (s.step == run.cfg.train.steps) rec["memory"] = acct.to_json();
  writer_.write(rec);
}

std::string MetricsLog::progress_line(const StepStats& s, const RunSetup& run) {
  const int64_t steps = run.cfg.train.steps;
  std::string line = fmt::format("step {:>{}}/{} | loss {:.4f} | lr {:.2e} | {:.0f} tok/s | ETA {}", s.step,
                                 std::to_string(steps).size(), steps, s.loss, s.lr, s.tokens_per_s,
                                 format_duration(s.eta_s));
  if (s.val_loss) line += fmt::format(" | val {:.4f}", *s.val_loss);
  if (run.cfg.bcd.enabled) line += fmt::format(" | {} (epoch {})", run.units[s.unit].name, run.sched.epoch());
  if (run.block_opt) line += fmt::format(" | stall {:.1f} ms", 1e3 * run.block_opt->staging().stall_s);
  // what each memory tier holds now
  std::string mem;
  for (const auto& [pool, name] : {std::pair{Pool::kCompute, "compute"}, std::pair{Pool::kPinned, "pinned"},
                                   std::pair{Pool::kHost, "host"}, std::pair{Pool::kNvme, "nvme"}}) {
    const uint64_t b = run.acct.usage(pool).total;
    if (b > 0) mem += fmt::format("{}{} {}", mem.empty() ? "" : ", ", name, format_bytes(b));
  }
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
