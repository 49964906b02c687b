// plan: the memory plan of a run, from its config and overrides, allocating nothing.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "base/config.h"
#include "base/error.h"
#include "cli/command.h"
#include "data/dataset.h"
#include "runtime/run_plan.h"
#include "runtime/run_setup.h"

namespace bcd::cli {

Command add_plan(CLI::App& app) {
  struct Flags {
    std::string config_file;
    int ranks = 0;  // 0: [dist] nproc
  };
  auto f = std::make_shared<Flags>();
  auto* plan = app.add_subcommand("plan", "memory plan of a run: home tier of every block's state, budgets, fits or not");
  plan->add_option("--config", f->config_file, "TOML config file")->transform(existing_file("a TOML config file"));
  plan->add_option("--nproc", f->ranks, "data-parallel ranks on this machine: they share its RAM (default: [dist] nproc)")
      ->transform(integer<int>(1, 1024));  // as launch --nproc and [dist] nproc
  auto run = [f](const Overrides& overrides) {
    if (f->config_file.empty() && overrides.empty()) user_error("plan: give --config FILE and/or --section.key=value");
    const Config cfg = load_config(f->config_file, overrides);
    const int ranks = f->ranks > 0 ? f->ranks : static_cast<int>(cfg.dist.nproc);
    PlanSite site;
    // A GPU run's compute_bytes = auto is the GPU's memory, when one is usable here; a run for the
    // GPU is planned as it will run there, GPU at hand or not (a login node).
    site.device = cfg.train.device != DeviceChoice::kCpu ? resolve_device(DeviceChoice::kAuto) : torch::Device(torch::kCPU);
    site.on_cuda = site.device.is_cuda() || cfg.train.device == DeviceChoice::kCuda;
    site.local_ranks = site.world_ranks = ranks;  // each of the ranks on this machine
    // The dataset, where it is at hand, is checked as the run checks it (its vocabulary, the
    // tokenizer of init_from); a login node may plan without it when vocab_size is set.
    std::optional<TokenDataset> data;
    std::error_code ec;
    if (!cfg.data.first().empty() && (cfg.model.vocab_size == 0 || std::filesystem::is_directory(cfg.data.first(), ec)))
      data.emplace(TokenDataset::open(cfg.data.first()));
    const RunPlan rp = resolve_plan(cfg, site, data ? &*data : nullptr);
    fmt::print("{}", format_run_plan(rp));
    if (!rp.plan.fits) user_error("plan does not fit: {}", rp.plan.why_not);
    return 0;
  };
  return {plan, run, true, {}};
}

}  // namespace bcd::cli
