// The lines a run prints before its first step.
#include "runtime/run_banner.h"

#include <fmt/format.h>

#include "model/matmul.h"
#include "runtime/cuda_torch.h"

namespace bcd {

std::vector<std::string> run_banner(const RunSetup& run) {
  const Config& cfg = run.cfg;
  const torch::Device& device = run.device;
  const MemoryPlan& plan = run.plan;
  const ModelConfig& mc = cfg.model;
  const TrainConfig& tc = cfg.train;
  const BcdConfig& bc = cfg.bcd;
  std::vector<std::string> lines;
  lines.push_back(fmt::format("model: {} layers, d_model {}, {} heads ({} kv), vocab {}, {:.2f}M parameters in {} blocks",
                              mc.n_layers, mc.d_model, mc.n_heads, mc.kv_heads(), mc.vocab_size,
                              static_cast<double>(run.model.num_params()) / 1e6, run.model.n_blocks()));
  for (const DataSource& s : run.sources)
    lines.push_back(fmt::format("data: {} train / {} val tokens ({}{}), unigram val loss {:.4f}",
                                s.ds.n_tokens(Split::kTrain), s.ds.n_tokens(Split::kVal), s.ds.dir(),
                                run.sources.size() > 1 ? fmt::format(", {:.1f}% of the windows", 100 * s.weight) : "",
                                s.ds.unigram_val_loss()));
  lines.push_back(fmt::format("train: {} steps x {} tokens/step, {} AdamW ({}) lr {:g}, {} working weights, on {}{}",
                              tc.steps, run.tokens_per_step(), name_of(cfg.optim.impl),
                              bc.enabled ? "block coordinate descent" : "full-parameter", tc.lr, name_of(tc.dtype),
                              device.is_cuda() ? "cuda" : "cpu",
                              device.is_cuda() ? "" : fmt::format(" with {} threads ({} GEMMs)", torch::get_num_threads(), cpu_matmul_name())));
  // What the MFU in metrics.jsonl is measured against, and where that figure came from.
  const std::string gpu = device.is_cuda() ? cuda_device_name(cuda_index(device)) : "";
  if (run.peak_tflops)
    lines.push_back(fmt::format("utilisation: MFU against a peak of {:g} TFLOP/s ({})", *run.peak_tflops,
                                tc.peak_tflops > 0 ? "train.peak_tflops" : fmt::format("{}, {} dense", gpu, name_of(tc.dtype))));
  else if (device.is_cuda())
    lines.push_back(fmt::format("utilisation: no MFU: {} is not in the table of known GPUs (set train.peak_tflops)",
                                gpu.empty() ? std::string("the GPU") : gpu));
  if (bc.enabled) {
    std::string names;
    for (const auto& u : run.units) names += (names.empty() ? "" : " ") + u.name;
    lines.push_back(fmt::format("bcd: {} blocks [{}], {} steps per visit, order {}, moments {} on switch", run.units.size(),
                                names, bc.switch_every, name_of(bc.order), name_of(bc.state_on_switch)));
  }
  const Stager* stager = run.opt->staged();
  if (stager && run.units.size() > 1) {
    int on_nvme = 0;
    for (Tier t : plan.unit_home) on_nvme += t == Tier::kNvme ? 1 : 0;
    auto gib = [](uint64_t b) { return static_cast<double>(b) / (1 << 30); };
    lines.push_back(fmt::format("memory: compute {:.3f} GiB (plan {:.3f}), pinned pool {} x {:.1f} MiB, state homes: "
                                "{} units in host memory, {} on NVMe",
                                gib(run.acct.usage(Pool::kCompute).total), gib(plan.compute.total()),
                                stager->slab_count(), static_cast<double>(stager->slab_bytes()) / (1 << 20),
                                static_cast<int>(run.units.size()) - on_nvme, on_nvme));
  }
  if (run.streamed) {
    const StreamPlan& sp = plan.stream;
    lines.push_back(fmt::format("weights: {} of {} layers streamed ({:.2f} GiB from host memory{}{}), window {} x {:.1f} MiB; "
                                "plan: {:.2f} GB per step, {:.1f} ms of copies against {:.1f} ms of compute ({:g} GB/s, "
                                "{:g} TFLOP/s assumed)",
                                run.streamed->streamed_count(), cfg.model.n_layers,
                                static_cast<double>(run.streamed->host_bytes()) / (1 << 30),
                                run.streamed->shared() ? fmt::format(", one copy shared by {} ranks", run.dist_env.local_world_size) : "",
                                run.streamed->nvme_count() > 0 ? fmt::format("; {} layers from NVMe", run.streamed->nvme_count()) : "",
                                run.streamed->depth(), static_cast<double>(sp.slot_bytes) / (1 << 20),
                                static_cast<double>(sp.bytes_per_step) / 1e9, 1e3 * sp.copy_s_per_step,
                                1e3 * sp.compute_s_per_step, sp.gbps, sp.tflops));
  }
  if (run.pg->world_size() > 1)
    lines.push_back(fmt::format("dist: {} ranks ({}), {} sequences per rank per micro-batch, gradient buckets of "
                                "{:.0f} MiB, {}",
                                run.pg->world_size(), run.pg->backend(), tc.batch_size,
                                static_cast<double>(cfg.dist.bucket_bytes.value) / (1 << 20),
                                run.shards() > 1 ? fmt::format("block state sharded (each rank owns 1/{})", run.shards())
                                             : std::string("block state replicated on every rank")));
  if (!run.resume_from.empty())
    lines.push_back(fmt::format("resumed from {} at step {} (read in {:.2f} s)", run.resume_from, run.first_step - 1, run.resume_s));
  return lines;
}

}  // namespace bcd
