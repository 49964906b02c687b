// resolve_plan: the model's shape, the budgets and the stream rates of a run, then its memory plan.
#include "runtime/run_plan.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>

#include "base/error.h"
#include "base/files.h"
#include "data/tokenizer.h"
#include "model/hf_config.h"
#include "model/llama.h"
#include "runtime/cuda_torch.h"
#include "runtime/run_setup.h"

namespace bcd {

int state_shards(const Config& cfg, int world_ranks) {
  return world_ranks > 1 && cfg.dist.shard_state && cfg.optim.impl == OptimImpl::kFused ? world_ranks : 1;
}

RunPlan resolve_plan(const Config& cfg, const PlanSite& site, const TokenDataset* data) {
  RunPlan rp;
  rp.model = resolve_model_config(cfg.model);
  ModelConfig& mc = rp.model;
  if (data) {
    if (mc.vocab_size == 0) mc.vocab_size = data->vocab_size();
    if (mc.vocab_size < data->vocab_size())
      user_error("config: [model] vocab_size {} is smaller than the dataset's tokenizer vocabulary {} ({})",
                 mc.vocab_size, data->vocab_size(), cfg.data.first());
    // Initial weights learned on another tokenizer's ids would be trained on words they never saw.
    const std::string init_tok = init_from_tokenizer(cfg.model.init_from);
    if (!init_tok.empty() && !tokenizer_matches(data->tokenizer_path(), std::filesystem::path(init_tok).parent_path().string()))
      user_error("config: [model] init_from {} comes with the tokenizer {}, but the dataset {} was tokenized with "
                 "another one ({}): prepare the data with --tokenizer {}",
                 cfg.model.init_from, init_tok, cfg.data.first(), data->tokenizer_path(), init_tok);
  } else if (mc.vocab_size == 0) {
    user_error("plan: [model] vocab_size is 0 and [data] path is empty: set model.vocab_size");
  }
  if (cfg.train.seq_len > mc.max_seq_len)
    user_error("config: [train] seq_len ({}) exceeds the model's max_seq_len ({})", cfg.train.seq_len, mc.max_seq_len);

  rp.memory = cfg.memory;
  apply_device_budget(rp.memory, site.device);  // compute_bytes = auto: the GPU's memory on CUDA
  share_machine_memory(rp.memory, site.device, site.local_ranks);
  rp.local_ranks = site.local_ranks;
  rp.shards = state_shards(cfg, site.world_ranks);
  // The weight stream's rates: [memory] stream_gbps / stream_tflops, else this GPU's (a known
  // one's peak), else a 4090-class default.
  std::optional<double> peak;
  if (site.device.is_cuda()) peak = gpu_peak_tflops(cuda_device_name(cuda_index(site.device)), cfg.train.dtype);
  const StreamRates rates = resolve_stream_rates(rp.memory, cfg.train, site.on_cuda, peak);
  rp.plan = plan_memory(mc, cfg.bcd, cfg.train, rp.memory, rp.shards, !attention_keeps_scores(site.on_cuda),
                        site.local_ranks, rates);
  return rp;
}

std::string format_run_plan(const RunPlan& rp) {
  std::string out;
  if (rp.local_ranks > 1)
    out = fmt::format("per rank, {} ranks on this machine ({})\n", rp.local_ranks,
                      rp.shards > 1 ? "block state sharded: each rank holds 1/" + std::to_string(rp.shards)
                                    : "dist.shard_state = false: each rank holds all the block state");
  return out + format_plan(rp.plan);
}

}  // namespace bcd
