// Benchmark a BCD block switch: seconds per switch of one Llama-2-7B decoder layer (d_model 4096,
// d_ff 11008: 202M parameters) with bf16 working weights against fp32, from host homes and from
// NVMe homes. A switch is everything it moves: the active unit's image (bf16: fp32 master + m + v,
// 12 bytes a parameter; fp32: m + v, 8) out of the compute tier and to its home, the next unit's
// in from its home; timed from activate() until both copies and the write-back are done (the
// stager's flush), so nothing is left in flight (no update runs: its compute is not the
// switch's). Two layers visited in turn after a warm-up visit of each; rounds interleaved, the
// dtype that goes first alternating; ratio = the median of the rounds' bf16 / fp32 seconds per
// switch, the larger of the two homes'.
// Environment: BENCH_ROUNDS (4), BENCH_SWITCHES (per side per round, 4), BENCH_NVME_DIR,
// BENCH_D_MODEL (4096), BENCH_D_FF (11008). Last line: one JSON object.
#include <torch/torch.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "memory/accounting.h"
#include "model/llama.h"
#include "optim/bcd_scheduler.h"
#include "optim/block_optimizer.h"
#include "runtime/trainer.h"

using namespace bcd;
using bench::env_int;
using bench::median;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Timing {
  double per_switch_s = 0;  // median over the side's switches
  double activate_s = 0;    // of which the training thread spent in activate() (host-side work)
  uint64_t bytes = 0;       // the image of one unit
};

// One side: a fresh model and optimizer (no init: the bytes moved do not depend on the values),
// a warm-up visit of each layer, then `switches` timed switches between them.
Timing run_side(const ModelConfig& mc, torch::ScalarType dtype, Tier home, const std::string& dir, int switches) {
  LlamaModel model(mc, torch::TensorOptions().dtype(dtype), std::nullopt);
  BcdConfig bc;
  bc.enabled = true;
  bc.include_embed = false;
  bc.include_head = false;
  const std::vector<UnitShape> units = make_units(model, bc);
  MemoryAccounting acct;
  StateStorage s;
  s.accounting = &acct;
  s.unit_home.assign(units.size(), home);
  s.stager.nvme_paths = {dir};
  BlockAdamW opt(model, units, OptimConfig{}, /*keep_state=*/true, s);
  // Warm-up: each unit's first visit fills its master from the working weights; the second
  // brings back what went home.
  for (int u : {0, 1, 0, 1}) opt.activate(u);
  opt.flush();
  Timing t;
  t.bytes = opt.stager().unit_bytes(0);
  std::vector<double> per, act;
  for (int i = 0; i < switches; ++i) {
    const int next = i % 2;
    const auto t0 = Clock::now();
    opt.activate(next);
    act.push_back(since(t0));
    opt.flush();  // both copies and the write-back done
    per.push_back(since(t0));
  }
  t.per_switch_s = median(per);
  t.activate_s = median(act);
  return t;
}

}  // namespace

int main() {
  configure_threads(0);
  const int rounds = env_int("BENCH_ROUNDS", 4);
  const int switches = env_int("BENCH_SWITCHES", 4);
  ModelConfig mc;
  mc.vocab_size = 256;  // the embedding and head stay small and frozen: two layers' state moves
  mc.d_model = env_int("BENCH_D_MODEL", 4096);
  mc.n_layers = 2;
  mc.n_heads = 32;
  mc.d_ff = env_int("BENCH_D_FF", 11008);
  mc.max_seq_len = 64;
  const char* env_dir = std::getenv("BENCH_NVME_DIR");
  const std::string dir = env_dir && *env_dir ? env_dir : "bench-switch-nvme";
  std::filesystem::create_directories(dir);
  const torch::ScalarType dtypes[2] = {torch::kBFloat16, torch::kFloat32};
  const Tier homes[2] = {Tier::kPinned, Tier::kNvme};
  const char* home_name[2] = {"host", "nvme"};
  std::vector<double> ratio[2], sec[2][2], act[2][2];
  uint64_t bytes[2] = {0, 0};
  for (int r = 0; r < rounds; ++r) {
    for (int h = 0; h < 2; ++h) {
      double t[2] = {0, 0};
      for (int k = 0; k < 2; ++k) {
        const int d = (k + r) % 2;  // which dtype goes first alternates
        const Timing tm = run_side(mc, dtypes[d], homes[h], dir, switches);
        t[d] = tm.per_switch_s;
        bytes[d] = tm.bytes;
        sec[h][d].push_back(tm.per_switch_s);
        act[h][d].push_back(tm.activate_s);
        fmt::print("round {} {} {}: {:.1f} ms per switch ({:.1f} ms in activate), {:.0f} MiB image\n", r + 1,
                   home_name[h], d == 0 ? "bf16" : "fp32", 1e3 * tm.per_switch_s, 1e3 * tm.activate_s,
                   static_cast<double>(tm.bytes) / (1 << 20));
      }
      ratio[h].push_back(t[0] / t[1]);
      fmt::print("round {} {}: bf16 / fp32 = {:.3f}\n", r + 1, home_name[h], t[0] / t[1]);
    }
  }
  std::filesystem::remove_all(dir);
  const double byte_ratio = static_cast<double>(bytes[0]) / static_cast<double>(bytes[1]);
  fmt::print(
      "{{\"benchmark\": \"switch\", \"layer_params\": {}, \"rounds\": {}, \"switches_per_side\": {}, "
      "\"bf16_image_bytes\": {}, \"fp32_image_bytes\": {}, \"image_byte_ratio\": {:.4f}, "
      "\"host_bf16_ms\": {:.1f}, \"host_fp32_ms\": {:.1f}, \"host_bf16_activate_ms\": {:.1f}, "
      "\"host_fp32_activate_ms\": {:.1f}, \"host_ratio\": {:.4f}, \"nvme_bf16_ms\": {:.1f}, \"nvme_fp32_ms\": {:.1f}, "
      "\"nvme_bf16_activate_ms\": {:.1f}, \"nvme_fp32_activate_ms\": {:.1f}, \"nvme_ratio\": {:.4f}, "
      "\"ratio\": {:.4f}}}\n",
      bytes[1] / 8, rounds, switches, bytes[0], bytes[1], byte_ratio, 1e3 * median(sec[0][0]), 1e3 * median(sec[0][1]),
      1e3 * median(act[0][0]), 1e3 * median(act[0][1]), median(ratio[0]), 1e3 * median(sec[1][0]),
      1e3 * median(sec[1][1]), 1e3 * median(act[1][0]), 1e3 * median(act[1][1]), median(ratio[1]),
      std::max(median(ratio[0]), median(ratio[1])));
  return 0;
}
