// Benchmark bcd-step: mean step time of BCD over one block-epoch (random order, K = 1) against
// full-parameter AdamW on the same 12-layer model and batch; rounds interleaved, medians.
// Last line: one JSON object.
#include <torch/torch.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

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
  BlockAdamW opt;
  bool bcd;
  Side(const ModelConfig& mc, const BcdConfig& bc, uint64_t seed)
      : model(mc), units(make_units(model, bc)), sched(static_cast<int>(units.size()), bc, seed),
        opt(model, units, OptimConfig{}, true), bcd(bc.enabled) {
    model.init_weights(seed);
    opt.activate(sched.current());
  }
  // One optimizer step; returns seconds.
  double step(const torch::Tensor& batch) {
    const auto t0 = Clock::now();
    const int grad_from = bcd ? units[sched.current()].lowest_block() : 0;
    model.zero_grad();
    model.loss(batch, grad_from).backward();
    clip_grad_norm(model, 1.0);
    opt.step(1e-4);
    if (sched.step()) opt.activate(sched.current());
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
};

}  // namespace

int main() {
  configure_threads(0);
  ModelConfig mc;
  mc.vocab_size = 2048;
  mc.d_model = env_int("BENCH_D_MODEL", 256);
  mc.n_layers = 12;
  mc.n_heads = 4;
  mc.n_kv_heads = 4;
  mc.max_seq_len = 256;
  const int64_t batch_size = env_int("BENCH_BATCH", 8), seq = 128;
  const int rounds = env_int("BENCH_ROUNDS", 5);

  BcdConfig full_cfg;  // disabled: one unit, the whole model
  BcdConfig bcd_cfg;
  bcd_cfg.enabled = true;
  bcd_cfg.switch_every = 1;
  bcd_cfg.order = BlockOrder::kRandom;
  Side full(mc, full_cfg, 1), bcd(mc, bcd_cfg, 1);
  const int epoch = static_cast<int>(bcd.units.size());
  torch::manual_seed(2);
  torch::Tensor batch = torch::randint(mc.vocab_size, {batch_size, seq + 1}, torch::kInt64);

  // warm-up: allocator, thread pools, one visit of every block
  for (int i = 0; i < 2; ++i) full.step(batch);
  for (int i = 0; i < epoch; ++i) bcd.step(batch);

  std::vector<double> full_ms, bcd_ms;
  for (int r = 0; r < rounds; ++r) {
    double f = 0, b = 0;
    for (int i = 0; i < epoch; ++i) f += full.step(batch);
    for (int i = 0; i < epoch; ++i) b += bcd.step(batch);  // exactly one block-epoch
    full_ms.push_back(1e3 * f / epoch);
    bcd_ms.push_back(1e3 * b / epoch);
    fmt::print("round {}: full {:.1f} ms/step, bcd {:.1f} ms/step\n", r + 1, full_ms.back(), bcd_ms.back());
  }
  const double fm = median(full_ms), bm = median(bcd_ms);
  fmt::print(
      "{{\"name\": \"bcd-step\", \"layers\": {}, \"d_model\": {}, \"params\": {}, \"blocks\": {}, \"batch\": {}, "
      "\"seq_len\": {}, \"rounds\": {}, \"threads\": {}, \"full_ms\": {:.2f}, \"bcd_ms\": {:.2f}, "
      "\"full_state_bytes\": {}, \"bcd_state_bytes\": {}, \"ratio\": {:.4f}}}\n",
      mc.n_layers, mc.d_model, full.model.num_params(), epoch, batch_size, seq, rounds, torch::get_num_threads(), fm,
      bm, full.opt.moment_bytes(), bcd.opt.moment_bytes(), bm / fm);
  return 0;
}
