// Benchmark staging: mean BCD step time with every unit's master + moments homed on the NVMe
// tier (O_DIRECT: no page cache) against all of it in host memory, on a model whose per-unit
// optimizer state is >= 64 MiB. Same model, data and schedule on both sides (their losses must
// agree bitwise); rounds interleaved, the side that goes first alternating; medians.
// Environment: BENCH_NVME_DIR (default: a directory under build/), BENCH_ROUNDS, BENCH_STEPS.
// Last line: one JSON object.
#include <torch/torch.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "memory/accounting.h"
#include "bench_util.h"
#include "model/llama.h"
#include "optim/bcd_scheduler.h"
#include "optim/block_optimizer.h"
#include "optim/optimizer.h"
#include "runtime/trainer.h"

using namespace bcd;
using bench::env_int;
using bench::median;
using Clock = std::chrono::steady_clock;

namespace {

struct Side {
  LlamaModel model;
  std::vector<UnitShape> units;
  BcdScheduler sched;
  MemoryAccounting acct;
  std::unique_ptr<BlockAdamW> opt;
  std::vector<double> losses;
  bool switch_due = false;

  Side(const ModelConfig& mc, const BcdConfig& bc, Tier home, const std::string& nvme_dir)
      : model(mc), units(make_units(model, bc)), sched(static_cast<int>(units.size()), bc, 42) {
    model.init_weights(42);
    StateStorage s;
    s.accounting = &acct;
    s.unit_home.assign(units.size(), home);
    s.stager.nvme_paths = {nvme_dir};
    opt = std::make_unique<BlockAdamW>(model, units, OptimConfig{}, true, s);
    opt->activate(sched.current());
  }
  // One optimizer step as the trainer takes it (switch, look-ahead, forward, backward, update).
  void step(const torch::Tensor& batch) {
    if (switch_due) opt->activate(sched.current());
    opt->prefetch(sched.lookahead(1));
    model.zero_grad();
    torch::Tensor loss = model.loss(batch, units[sched.current()].lowest_block());
    loss.backward();
    clip_grad_norm(model, 1.0);
    opt->step(1e-4);
    losses.push_back(loss.item<double>());
    switch_due = sched.step();
  }
};

}  // namespace

int main() {
  configure_threads(0);
  const int rounds = env_int("BENCH_ROUNDS", 5);
  const int steps = env_int("BENCH_STEPS", 24);  // per side per round
  ModelConfig mc;
  mc.vocab_size = 2048;
  mc.d_model = 1024;
  mc.n_layers = 4;
  mc.n_heads = 8;
  mc.d_ff = 2816;
  mc.max_seq_len = 128;
  BcdConfig bc;
  bc.enabled = true;
  bc.blocks = BlockKind::kLayer;
  bc.switch_every = 3;
  bc.order = BlockOrder::kRandom;
  bc.include_embed = false;  // every unit a decoder layer: the same image size for all
  bc.include_head = false;
  const char* env_dir = std::getenv("BENCH_NVME_DIR");
  const std::string dir = env_dir && *env_dir ? env_dir : "bench-nvme";
  std::filesystem::create_directories(dir);

  std::string json;
  bool same = false;
  {
    Side host(mc, bc, Tier::kPinned, dir), nvme(mc, bc, Tier::kNvme, dir);
    const uint64_t unit_bytes = nvme.opt->stager().unit_bytes(0);
    fmt::print("model: {} layers, d_model {}, {:.1f}M params; {} units of {:.1f} MiB (fp32 m + v), K = {}; "
               "NVMe tier {} ({})\n",
               mc.n_layers, mc.d_model, static_cast<double>(host.model.num_params()) / 1e6, host.units.size(),
               static_cast<double>(unit_bytes) / (1 << 20), bc.switch_every, dir,
               nvme.opt->stager().store()->direct() ? "O_DIRECT" : "buffered");
    torch::manual_seed(7);
    std::vector<torch::Tensor> batches;
    for (int i = 0; i < steps; ++i) batches.push_back(torch::randint(mc.vocab_size, {1, 65}, torch::kInt64));

    // warm-up: every unit visited once on both sides
    for (int i = 0; i < 2 * bc.switch_every * static_cast<int>(host.units.size()); ++i)
      host.step(batches[i % steps]), nvme.step(batches[i % steps]);
    const StagerStats nvme0 = nvme.opt->staging();

    std::vector<double> t_host, t_nvme;
    double nvme_time = 0;
    for (int r = 0; r < rounds; ++r) {
      for (int k = 0; k < 2; ++k) {
        Side& s = (k == r % 2) ? host : nvme;
        const auto t0 = Clock::now();
        for (int i = 0; i < steps; ++i) s.step(batches[i]);
        const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        (&s == &host ? t_host : t_nvme).push_back(dt / steps);
        if (&s == &nvme) nvme_time += dt;
        fmt::print("round {} {}: {:.1f} ms/step\n", r + 1, &s == &host ? "host" : "nvme", 1e3 * dt / steps);
      }
    }
    nvme.opt->flush();
    const StagerStats st = nvme.opt->staging();
    const uint64_t moved = st.nvme_read_bytes + st.nvme_write_bytes - nvme0.nvme_read_bytes - nvme0.nvme_write_bytes;
    same = host.losses == nvme.losses;
    const double mh = median(t_host), mn = median(t_nvme);
    fmt::print("host {:.1f} ms/step, nvme {:.1f} ms/step, stall {:.1f} ms over {} switches, NVMe {:.2f} GB/s, "
               "losses bitwise equal: {}\n",
               1e3 * mh, 1e3 * mn, 1e3 * (st.stall_s - nvme0.stall_s), st.switches - nvme0.switches,
               static_cast<double>(moved) / 1e9 / nvme_time, same ? "yes" : "NO");
    json = fmt::format(
        "{{\"benchmark\": \"staging\", \"unit_state_mib\": {:.1f}, \"switch_every\": {}, \"rounds\": {}, "
        "\"steps_per_round\": {}, \"host_ms_per_step\": {:.2f}, \"nvme_ms_per_step\": {:.2f}, \"stall_ms\": {:.2f}, "
        "\"switches\": {}, \"nvme_gb_per_s\": {:.3f}, \"nvme_bytes\": {}, \"direct\": {}, \"losses_equal\": {}, "
        "\"ratio\": {:.4f}}}\n",
        static_cast<double>(unit_bytes) / (1 << 20), bc.switch_every, rounds, steps, 1e3 * mh, 1e3 * mn,
        1e3 * (st.stall_s - nvme0.stall_s), st.switches - nvme0.switches, static_cast<double>(moved) / 1e9 / nvme_time,
        moved, nvme.opt->stager().store()->direct() ? "true" : "false", same ? "true" : "false", mn / mh);
  }  // the stores close (and write their tables) before their directory goes
  std::filesystem::remove_all(dir);
  fmt::print("{}", json);
  return same ? 0 : 1;
}
