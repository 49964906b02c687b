// Benchmark memory: peak model-state bytes in the compute tier (working weights, master,
// moments, gradients; activations excluded), from the runtime accounting, for BCD against
// full-parameter AdamW on a 32-layer model with bf16 working weights; the planner's prediction
// beside each. Goal: ratio <= (2 + 14/D) / 16 for D blocks. Last line: one JSON object.
#include <torch/torch.h>
#include <fmt/format.h>

#include "data/batch.h"
#include "memory/accounting.h"
#include "memory/planner.h"
#include "model/llama.h"
#include "optim/bcd_scheduler.h"
#include "optim/block_optimizer.h"
#include "runtime/trainer.h"

using namespace bcd;

namespace {

struct Result {
  uint64_t measured = 0, planned = 0;
  int units = 0;
};

uint64_t state_peak(const PoolUsage& u) {
  uint64_t n = 0;
  for (int k = 0; k < kNumStateKinds; ++k) n += u.peak[k];
  return n;
}

// Trains one block-epoch (every unit visited: the largest gradient buffer allocated) and reads
// the compute tier's peak per state kind.
Result measure(const ModelConfig& mc, const BcdConfig& bc) {
  TrainConfig tc;
  tc.dtype = Dtype::kBf16;
  tc.batch_size = 1;
  tc.seq_len = 16;
  MemoryConfig mem;
  mem.compute_bytes = {64ull << 30, false};
  mem.host_bytes = {64ull << 30, false};
  const MemoryPlan plan = plan_memory(mc, bc, tc, mem);
  MemoryAccounting acct;
  LlamaModel model(mc, torch::kBFloat16);
  model.init_weights(1);
  model.set_direct_sums(true);  // the trainer's model, as the planner counts it
  uint64_t working = 0;
  for (const Block& b : model.blocks()) working += static_cast<uint64_t>(b.data().nbytes());
  Charge w(&acct, Pool::kCompute, static_cast<int>(StateKind::kWorking), working);
  auto units = make_units(model, bc);
  BcdScheduler sched(static_cast<int>(units.size()), bc, 1);
  StateStorage s;
  s.accounting = &acct;
  BlockAdamW opt(model, units, OptimConfig{}, true, s);
  opt.activate(sched.current());
  torch::manual_seed(3);
  for (size_t i = 0; i < units.size(); ++i) {
    model.zero_grad();
    Batch batch;
    batch.tokens = torch::randint(mc.vocab_size, {1, 17}, torch::kInt64);
    // the trainer's pass: the matrices' gradients straight into the fp32 sums
    model.loss(batch, units[sched.current()].lowest_block(), {}, LlamaModel::LossOptions{1.0, true}).backward();
    model.accumulate_grads();  // bf16: into the fp32 gradient the optimizer reads
    opt.step(1e-4);
    if (sched.step()) opt.activate(sched.current());
  }
  Result r;
  r.measured = state_peak(acct.usage(Pool::kCompute));
  r.planned = plan.compute.total() - plan.compute.activations;
  r.units = static_cast<int>(units.size());
  return r;
}

}  // namespace

int main() {
  configure_threads(0);
  ModelConfig mc;
  mc.vocab_size = 2048;
  mc.d_model = 256;
  mc.n_layers = 32;
  mc.n_heads = 4;
  mc.d_ff = 704;
  mc.max_seq_len = 64;
  BcdConfig full;
  full.enabled = false;
  BcdConfig bcd;
  bcd.enabled = true;
  bcd.switch_every = 1;
  bcd.order = BlockOrder::kAscending;
  const Result f = measure(mc, full), b = measure(mc, bcd);
  const double ratio = static_cast<double>(b.measured) / static_cast<double>(f.measured);
  const double goal = (2.0 + 14.0 / mc.n_layers) / 16.0;
  fmt::print("32 layers, d_model {}, bf16 working weights: full AdamW {:.1f} MiB (plan {:.1f}), BCD over {} units "
             "{:.1f} MiB (plan {:.1f})\n",
             mc.d_model, static_cast<double>(f.measured) / (1 << 20), static_cast<double>(f.planned) / (1 << 20),
             b.units, static_cast<double>(b.measured) / (1 << 20), static_cast<double>(b.planned) / (1 << 20));
  fmt::print(
      "{{\"benchmark\": \"memory\", \"layers\": {}, \"units\": {}, \"full_bytes\": {}, \"full_planned\": {}, "
      "\"bcd_bytes\": {}, \"bcd_planned\": {}, \"planned_ratio\": {:.4f}, \"goal\": {:.4f}, \"ratio\": {:.4f}}}\n",
      mc.n_layers, b.units, f.measured, f.planned, b.measured, b.planned,
      static_cast<double>(b.planned) / static_cast<double>(f.planned), goal, ratio);
  return 0;
}
