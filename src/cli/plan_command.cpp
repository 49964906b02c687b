// plan: the memory plan of a run, from its config and overrides, allocating nothing.
#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>

#include "base/config.h"
#include "base/error.h"
#include "cli/command.h"
#include "data/dataset.h"
#include "memory/planner.h"
#include "model/hf_config.h"
#include "model/llama.h"
#include "runtime/cuda_torch.h"
#include "runtime/run_setup.h"

namespace bcd::cli {

Command add_plan(CLI::App& app) {
  struct Flags {
    std::string config_file;
    int ranks = 1;
  };
  auto f = std::make_shared<Flags>();
  auto* plan = app.add_subcommand("plan", "memory plan of a run: home tier of every block's state, budgets, fits or not");
  plan->add_option("--config", f->config_file, "TOML config file")->check(CLI::ExistingFile);
  plan->add_option("--nproc", f->ranks, "data-parallel ranks on this machine: they share its RAM")
      ->check(CLI::Range(1, 4096));
  auto run = [f](const Overrides& overrides) {
    const int plan_ranks = f->ranks;
    if (f->config_file.empty() && overrides.empty()) user_error("plan: give --config FILE and/or --section.key=value");
    Config cfg = load_config(f->config_file, overrides);
    ModelConfig mc = resolve_model_config(cfg.model);
    if (mc.vocab_size == 0) {
      if (cfg.data.first().empty())
        user_error("plan: [model] vocab_size is 0 and [data] path is empty: set model.vocab_size");
      mc.vocab_size = TokenDataset::open(cfg.data.first()).vocab_size();
    }
    // A GPU run's compute_bytes = auto is the GPU's memory, when one is usable here.
    const torch::Device device = cfg.train.device != "cpu" ? resolve_device("auto") : torch::Device(torch::kCPU);
    if (device.is_cuda()) apply_device_budget(cfg.memory, device);
    share_machine_memory(cfg.memory, device, plan_ranks);  // each of the ranks on this machine
    const int shards = plan_ranks > 1 && cfg.dist.shard_state && cfg.optim.impl == "fused" ? plan_ranks : 1;
    // A run for the GPU is planned as it will run there, GPU at hand or not (a login node).
    const bool on_cuda = device.is_cuda() || cfg.train.device == "cuda";
    const bool fused = !attention_keeps_scores(on_cuda);
    // The weight stream's rates: [memory] stream_gbps / stream_tflops, else this GPU's (a known
    // one's peak), else a 4090-class default.
    const std::optional<double> peak =
        device.is_cuda() ? gpu_peak_tflops(cuda_device_name(cuda_index(device)), cfg.train.dtype) : std::nullopt;
    const StreamRates rates = resolve_stream_rates(cfg.memory, cfg.train, on_cuda, peak);
    const MemoryPlan p = plan_memory(mc, cfg.bcd, cfg.train, cfg.memory, shards, fused, plan_ranks, rates);
    if (plan_ranks > 1)
      fmt::print("per rank, {} ranks on this machine ({})\n", plan_ranks,
                 shards > 1 ? "block state sharded: each rank holds 1/" + std::to_string(shards)
                            : "dist.shard_state = false: each rank holds all the block state");
    fmt::print("{}", format_plan(p));
    if (!p.fits) user_error("plan does not fit: {}", p.why_not);
    return 0;
  };
  return {plan, run, true};
}

}  // namespace bcd::cli
