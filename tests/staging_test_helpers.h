// A small BCD training over staged state, shared by the staging tests (CPU) and their CUDA twins.
#pragma once

#include <torch/torch.h>

#include <random>
#include <string>
#include <vector>

#include "memory/stager.h"
#include "model/llama.h"
#include "optim/bcd_scheduler.h"
#include "optim/block_optimizer.h"
#include "test_util.h"

namespace bcd::test {

// Units of different sizes; a reference copy of what each home should hold.
struct StagerFixture {
  test::TempDir dir{"bcd-stager"};
  MemoryAccounting acct;
  std::vector<StagedUnit> units;
  StagerOptions opts;

  StagerFixture(int n, Tier home, int depth = 1) {
    for (int i = 0; i < n; ++i) {
      StagedUnit u;
      u.name = "u" + std::to_string(i);
      u.kind_bytes[static_cast<int>(StateKind::kAdamM)] = (i + 1) * 40000 + 4 * i;
      u.kind_bytes[static_cast<int>(StateKind::kAdamV)] = (i + 1) * 40000 + 4 * i;
      u.home = home;
      units.push_back(u);
    }
    opts.prefetch_depth = depth;
    opts.nvme_paths = {dir.path()};
  }
};

inline std::vector<char> pattern(uint64_t n, uint32_t seed) {
  std::vector<char> v(n);
  std::mt19937 g(seed);
  for (auto& c : v) c = static_cast<char>(g());
  return v;
}

inline ModelConfig small_model() {
  ModelConfig m;
  m.vocab_size = 53;
  m.d_model = 48;
  m.n_layers = 4;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.d_ff = 64;
  m.max_seq_len = 32;
  m.init_std = 0.1;
  return m;
}

struct Trained {
  std::vector<double> losses;
  std::vector<torch::Tensor> weights, m, v;
  StagerStats staging;
};

// BCD over a small model with random batches: 3 block-epochs, K = 2, moments at `home`.
// Tensors come back on the CPU whatever `device` trained them.
inline Trained train_small(torch::ScalarType dtype, const std::string& order, const std::string& blocks, bool keep,
                           Tier home, const std::string& nvme_dir, torch::Device device = torch::kCPU) {
  const ModelConfig cfg = small_model();
  LlamaModel model(cfg, torch::TensorOptions(dtype).device(device));
  model.init_weights(5);
  BcdConfig bc;
  bc.enabled = true;
  bc.blocks = *parse_choice<BlockKind>(blocks);  // the names a config file gives
  bc.switch_every = 2;
  bc.order = *parse_choice<BlockOrder>(order);
  auto units = make_units(model, bc);
  BcdScheduler sched(static_cast<int>(units.size()), bc, 9);
  MemoryAccounting acct;
  StateStorage storage;
  storage.accounting = &acct;
  storage.unit_home.assign(units.size(), home);
  storage.stager.nvme_paths = {nvme_dir};
  BlockAdamW opt(model, units, OptimConfig{}, keep, storage);
  opt.activate(sched.current());
  Trained out;
  for (int t = 0; t < 3 * static_cast<int>(units.size()) * 2; ++t) {
    opt.prefetch(sched.lookahead(1));
    model.zero_grad();
    torch::manual_seed(100 + t);
    torch::Tensor batch = torch::randint(cfg.vocab_size, {2, 9}, torch::kInt64);
    torch::Tensor loss = model.loss(batch, units[sched.current()].lowest_block());
    loss.backward();
    model.accumulate_grads();  // bf16: into the fp32 gradient the optimizer reads
    out.losses.push_back(loss.item<double>());
    opt.step(5e-3);
    if (sched.step()) opt.activate(sched.current());
  }
  opt.flush();
  for (const Block& b : model.blocks()) out.weights.push_back(b.data().to(torch::kCPU).clone());
  for (int b = 0; b < model.n_blocks(); ++b)
    for (int s = 0; s < static_cast<int>(model.block(b).segments().size()); ++s) {
      SegmentState st = opt.segment_state(b, s);
      out.m.push_back(st.m.defined() ? st.m.to(torch::kCPU).clone() : torch::Tensor());
      out.v.push_back(st.v.defined() ? st.v.to(torch::kCPU).clone() : torch::Tensor());
      if (st.master.defined()) out.weights.push_back(st.master.to(torch::kCPU).clone());
    }
  out.staging = opt.staging();
  return out;
}

}  // namespace bcd::test
