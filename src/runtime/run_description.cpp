// A run's set-up as the banner's plain figures.
#include "runtime/run_description.h"

#include "model/matmul.h"
#include "runtime/cuda_torch.h"

namespace bcd {

RunDescription run_description(const RunSetup& run) {
  const Config& cfg = run.cfg;
  RunDescription d;
  d.model = cfg.model;
  d.train = cfg.train;
  d.bcd = cfg.bcd;
  d.optim = cfg.optim.impl;
  d.bucket_bytes = cfg.dist.bucket_bytes.value;
  d.num_params = run.model().num_params();
  d.n_blocks = run.model().n_blocks();
  for (const DataSource& s : run.sources)
    d.sources.push_back({s.ds.dir(), s.ds.n_tokens(Split::kTrain), s.ds.n_tokens(Split::kVal), s.weight, s.ds.unigram_val_loss()});
  d.tokens_per_step = run.tokens_per_step();
  d.on_cuda = run.device.is_cuda();
  d.threads = torch::get_num_threads();
  d.cpu_matmul = cpu_matmul_name();
  if (d.on_cuda) d.gpu = cuda_device_name(cuda_index(run.device));
  d.peak_tflops = run.peak_tflops;
  for (const UnitShape& u : run.units) d.units.push_back(u.name);
  if (const Stager* stager = run.optimizer().staged(); stager && run.units.size() > 1) {
    RunDescription::Staging s;
    s.compute_bytes = run.acct.usage(Pool::kCompute).total;
    s.planned_compute_bytes = run.plan.compute.total();
    s.slabs = stager->slab_count();
    s.slab_bytes = stager->slab_bytes();
    for (Tier t : run.plan.unit_home) s.units_on_nvme += t == Tier::kNvme ? 1 : 0;
    s.units_on_host = static_cast<int>(run.units.size()) - s.units_on_nvme;
    d.staging = s;
  }
  if (run.streamed) {
    RunDescription::Stream w;
    w.streamed = run.streamed->streamed_count();
    w.on_nvme = run.streamed->nvme_count();
    w.host_bytes = run.streamed->host_bytes();
    w.shared_by = run.streamed->shared() ? run.dist_env.local_world_size : 0;
    w.depth = run.streamed->depth();
    w.plan = run.plan.stream;
    d.stream = w;
  }
  d.world_size = run.pg->world_size();
  d.backend = run.pg->backend();
  d.shards = run.shards();
  d.resume_from = run.resume_from;
  d.resumed_step = run.first_step - 1;
  d.resume_s = run.resume_s;
  return d;
}

}  // namespace bcd
