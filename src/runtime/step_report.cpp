// The run's parts' figures in a step's report.
#include "runtime/step_report.h"

#include "dist/host_read.h"
#include "runtime/cuda_torch.h"

namespace bcd {

void add_run_figures(StepReport& s, const RunSetup& run) {
  const BcdConfig& bc = run.cfg.bcd;
  s.steps = run.cfg.train.steps;
  s.tokens = run.tokens_per_step() * s.step;
  s.peak_tflops = run.peak_tflops;
  if (bc.enabled) s.visit = StepReport::Visit{run.units[s.unit].name, run.sched().epoch(), run.sched().step_in_visit()};
  s.optim_state_bytes = run.optimizer().state_bytes();
  s.block_state_bytes = run.optimizer().moments_of(s.unit);
  if (s.block_state_bytes && bc.enabled && (run.sched().step_in_visit() == 0 || s.step == 1))
    for (size_t u = 0; u < run.units.size(); ++u)
      s.state_bytes_by_block.emplace_back(run.units[u].name, run.optimizer().moments_of(static_cast<int>(u)).value_or(0));
  if (const Stager* st = run.optimizer().staged()) s.staging = st->stats();
  if (run.streamed) s.stream_totals = run.streamed->totals();
  if (run.reducer) {
    const GradReducer::Stats& c = run.reducer->stats();
    StepReport::Comm comm;
    comm.bytes_sent = run.pg->bytes_sent();
    comm.exposed_s = c.exposed_s_total + run.ops().gather_s();  // sharded: the weights' all-gather too
    if (run.shards() > 1) comm.gather_s = run.ops().gather_s();
    comm.buckets = c.buckets, comm.buckets_in_backward = c.started_in_backward, comm.bucket_rebuilds = c.rebuilds;
    comm.forward_ahead = run.steps_run_ahead;
    s.comm = comm;
  }
  for (int p = 0; p < kNumPools; ++p) {
    s.pool_peak_bytes[p] = run.acct.usage(static_cast<Pool>(p)).total_peak;
    s.pool_bytes[p] = run.acct.usage(static_cast<Pool>(p)).total;
  }
  s.rss_peak_bytes = process_memory_bytes("VmHWM");
  s.host_reads = host_reads();
  if (run.device.is_cuda()) {
    const CudaAllocatorPeaks p = cuda_allocator_peaks(cuda_index(run.device));
    s.cuda = StepReport::Cuda{p.allocated, p.reserved, cuda_device_used_bytes(cuda_index(run.device))};
  }
  if (s.step == s.steps) s.accounting = run.acct.to_json();
}

}  // namespace bcd
