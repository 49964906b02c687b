// The lines a run prints before its first step.
#include "report/banner.h"

#include <fmt/format.h>

namespace bcd {

std::vector<std::string> run_banner(const RunDescription& run) {
  const ModelConfig& mc = run.model;
  const TrainConfig& tc = run.train;
  const BcdConfig& bc = run.bcd;
  std::vector<std::string> lines;
  lines.push_back(fmt::format("model: {} layers, d_model {}, {} heads ({} kv), vocab {}, {:.2f}M parameters in {} blocks",
                              mc.n_layers, mc.d_model, mc.n_heads, mc.kv_heads(), mc.vocab_size,
                              static_cast<double>(run.num_params) / 1e6, run.n_blocks));
  for (const RunDescription::Source& s : run.sources)
    lines.push_back(fmt::format("data: {} train / {} val tokens ({}{}), unigram val loss {:.4f}", s.train_tokens,
                                s.val_tokens, s.dir,
                                run.sources.size() > 1 ? fmt::format(", {:.1f}% of the windows", 100 * s.weight) : "",
                                s.unigram_val_loss));
  lines.push_back(fmt::format("train: {} steps x {} tokens/step, {} AdamW ({}) lr {:g}, {} working weights, on {}{}",
                              tc.steps, run.tokens_per_step, name_of(run.optim),
                              bc.enabled ? "block coordinate descent" : "full-parameter", tc.lr, name_of(tc.dtype),
                              run.on_cuda ? "cuda" : "cpu",
                              run.on_cuda ? "" : fmt::format(" with {} threads ({} GEMMs)", run.threads, run.cpu_matmul)));
  // What the MFU in metrics.jsonl is measured against, and where that figure came from.
  if (run.peak_tflops)
    lines.push_back(fmt::format("utilisation: MFU against a peak of {:g} TFLOP/s ({})", *run.peak_tflops,
                                tc.peak_tflops > 0 ? "train.peak_tflops" : fmt::format("{}, {} dense", run.gpu, name_of(tc.dtype))));
  else if (run.on_cuda)
    lines.push_back(fmt::format("utilisation: no MFU: {} is not in the table of known GPUs (set train.peak_tflops)",
                                run.gpu.empty() ? std::string("the GPU") : run.gpu));
  if (bc.enabled) {
    std::string names;
    for (const std::string& u : run.units) names += (names.empty() ? "" : " ") + u;
    lines.push_back(fmt::format("bcd: {} blocks [{}], {} steps per visit, order {}, moments {} on switch", run.units.size(),
                                names, bc.switch_every, name_of(bc.order), name_of(bc.state_on_switch)));
  }
  if (run.staging) {
    const RunDescription::Staging& s = *run.staging;
    auto gib = [](uint64_t b) { return static_cast<double>(b) / (1 << 30); };
    lines.push_back(fmt::format("memory: compute {:.3f} GiB (plan {:.3f}), pinned pool {} x {:.1f} MiB, state homes: "
                                "{} units in host memory, {} on NVMe",
                                gib(s.compute_bytes), gib(s.planned_compute_bytes), s.slabs,
                                static_cast<double>(s.slab_bytes) / (1 << 20), s.units_on_host, s.units_on_nvme));
  }
  if (run.stream) {
    const RunDescription::Stream& w = *run.stream;
    const StreamPlan& sp = w.plan;
    lines.push_back(fmt::format("weights: {} of {} layers streamed ({:.2f} GiB from host memory{}{}), window {} x {:.1f} MiB; "
                                "plan: {:.2f} GB per step, {:.1f} ms of copies against {:.1f} ms of compute ({:g} GB/s, "
                                "{:g} TFLOP/s assumed)",
                                w.streamed, mc.n_layers, static_cast<double>(w.host_bytes) / (1 << 30),
                                w.shared_by > 0 ? fmt::format(", one copy shared by {} ranks", w.shared_by) : "",
                                w.on_nvme > 0 ? fmt::format("; {} layers from NVMe", w.on_nvme) : "", w.depth,
                                static_cast<double>(sp.slot_bytes) / (1 << 20), static_cast<double>(sp.bytes_per_step) / 1e9,
                                1e3 * sp.copy_s_per_step, 1e3 * sp.compute_s_per_step, sp.gbps, sp.tflops));
  }
  if (run.world_size > 1)
    lines.push_back(fmt::format("dist: {} ranks ({}), {} sequences per rank per micro-batch, gradient buckets of "
                                "{:.0f} MiB, {}",
                                run.world_size, run.backend, tc.batch_size, static_cast<double>(run.bucket_bytes) / (1 << 20),
                                run.shards > 1 ? fmt::format("block state sharded (each rank owns 1/{})", run.shards)
                                               : std::string("block state replicated on every rank")));
  if (!run.resume_from.empty())
    lines.push_back(fmt::format("resumed from {} at step {} (read in {:.2f} s)", run.resume_from, run.resumed_step, run.resume_s));
  return lines;
}

}  // namespace bcd
