// resolve_plan: the model's shape, the budgets and the stream rates of a run, then its memory plan.
#include "runtime/run_plan.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>

#include "base/bytes.h"
#include "base/error.h"
#include "base/files.h"
#include "data/tokenizer.h"
#include "model/hf_config.h"
#include "model/llama.h"
#include "runtime/cuda_torch.h"
#include "runtime/machine.h"

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
                        site.local_ranks, rates, site.on_cuda ? cuda_runtime_reserve(site.world_ranks) : CudaReserve{});
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


// The tokenizer that came with [model] init_from, where there is one: in an HF directory, beside
// an imported .h5 (import copies it there), in the run directory of a model.h5 or a checkpoint.
std::string init_from_tokenizer(const std::string& init_from) {
  namespace fs = std::filesystem;
  if (init_from.empty()) return "";
  std::vector<fs::path> candidates;
  const std::string hf = hf_init_dir(init_from);
  if (!hf.empty()) {
    candidates.push_back(fs::path(hf));
  } else {
    const fs::path dir = fs::path(init_from).has_parent_path() ? fs::path(init_from).parent_path() : fs::path(".");
    candidates.push_back(dir);
    if (dir.filename() == "checkpoints") candidates.push_back(dir.parent_path());
  }
  std::error_code ec;
  for (const fs::path& c : candidates)
    if (fs::is_directory(c, ec))
      if (std::string tok = find_tokenizer(c.string()); !tok.empty()) return tok;
  return "";
}

void check_eval_fits(const ModelConfig& model, const TrainConfig& train, int64_t batch, int64_t seq_len) {
  TrainConfig at = train;
  at.batch_size = batch;
  at.seq_len = seq_len;
  UnitShape top;  // nothing trains: only the top layer's forward is held
  top.first_layer = static_cast<int>(model.n_layers) - 1;
  const uint64_t need = estimate_activation_bytes(model, at, top), avail = meminfo_bytes("MemAvailable");
  if (need > avail)
    user_error("eval: a batch of {} sequences of {} tokens needs about {} of activations, {} of memory is "
               "available: give a smaller --batch-size",
               batch, seq_len, format_bytes(need), format_bytes(avail));
}

}  // namespace bcd
