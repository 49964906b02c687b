// BCD tests: partition, schedule, truncated backward, block AdamW against full AdamW, keep/reset.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "model/llama.h"
#include "optim/bcd_scheduler.h"
#include "optim/block_optimizer.h"
#include "runtime/cuda_torch.h"
#include "runtime/flops.h"
#include "optim/optimizer.h"

namespace bcd {
namespace {

ModelConfig small_config() {
  ModelConfig m;
  m.vocab_size = 41;
  m.d_model = 32;
  m.n_layers = 3;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.d_ff = 48;
  m.max_seq_len = 32;
  m.init_std = 0.1;
  return m;
}

BcdConfig bcd_config(const std::string& blocks = "layer", int64_t k = 1, const std::string& order = "ascending") {
  BcdConfig b;
  b.enabled = true;
  b.blocks = *parse_choice<BlockKind>(blocks);  // the names a config file gives
  b.switch_every = k;
  b.order = *parse_choice<BlockOrder>(order);
  return b;
}

torch::Tensor batch_for(int step, int64_t vocab) {
  torch::manual_seed(1000 + step);
  return torch::randint(vocab, {2, 13}, torch::kInt64);
}

std::vector<std::string> names(const std::vector<UnitShape>& units) {
  std::vector<std::string> out;
  for (const auto& u : units) out.push_back(u.name);
  return out;
}

// ---- Partition ----

TEST(BcdUnits, Partitions) {
  LlamaModel m(small_config());
  EXPECT_EQ(names(make_units(m, bcd_config("layer"))),
            (std::vector<std::string>{"embed", "layer.0", "layer.1", "layer.2", "head"}));
  BcdConfig g = bcd_config("layer");
  g.layers_per_block = 2;
  g.include_embed = false;
  EXPECT_EQ(names(make_units(m, g)), (std::vector<std::string>{"layers.0-1", "layer.2", "head"}));
  BcdConfig h = bcd_config("attn_mlp");
  h.include_head = false;
  EXPECT_EQ(names(make_units(m, h)), (std::vector<std::string>{"embed", "layer.0.attn", "layer.0.mlp", "layer.1.attn",
                                                               "layer.1.mlp", "layer.2.attn", "layer.2.mlp"}));
  auto whole = make_units(m, bcd_config("whole"));
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].pieces.size(), 5u);
  BcdConfig off;
  EXPECT_EQ(names(make_units(m, off)), (std::vector<std::string>{"model"}));
}

// ---- Schedule ----

TEST(BcdScheduler, RandomOrderVisitsEveryBlockOncePerEpochAndIsSeeded) {
  const int n = 7;
  const int64_t k = 3;
  BcdConfig c = bcd_config("layer", k, "random");
  BcdScheduler a(n, c, 42), b(n, c, 42), other(n, c, 43);
  std::vector<std::vector<int>> epochs_a, epochs_other;
  for (int e = 0; e < 5; ++e) {
    std::vector<int> seen, seen_other;
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(a.epoch(), static_cast<uint64_t>(e));
      for (int64_t s = 0; s < k; ++s) {
        EXPECT_EQ(a.current(), b.current());
        EXPECT_EQ(a.step_in_visit(), static_cast<uint64_t>(s));
        const int cur = a.current();
        const bool switched = a.step();
        b.step();
        EXPECT_EQ(switched, s == k - 1);
        if (!switched) {
          EXPECT_EQ(a.current(), cur);
        }
      }
      seen.push_back(a.epoch_order(e)[i]);
      seen_other.push_back(other.epoch_order(e)[i]);
    }
    std::set<int> uniq(seen.begin(), seen.end());
    EXPECT_EQ(uniq.size(), static_cast<size_t>(n)) << "epoch " << e << " did not visit every block once";
    epochs_a.push_back(seen);
    epochs_other.push_back(seen_other);
  }
  EXPECT_NE(epochs_a, epochs_other) << "a different seed should give a different order";
  EXPECT_NE(epochs_a[0], epochs_a[1]) << "each epoch should draw a new permutation";
}

TEST(BcdScheduler, OrdersAndLookahead) {
  BcdConfig asc = bcd_config("layer", 2, "ascending"), desc = bcd_config("layer", 2, "descending");
  EXPECT_EQ(BcdScheduler(4, asc, 1).epoch_order(3), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(BcdScheduler(4, desc, 1).epoch_order(0), (std::vector<int>{3, 2, 1, 0}));
  BcdConfig fx = bcd_config("layer", 2, "fixed");
  EXPECT_EQ(BcdScheduler(4, fx, 1, {2, 0}).epoch_order(5), (std::vector<int>{2, 0}));

  // lookahead names exactly the visits that follow, across epoch boundaries
  BcdConfig rnd = bcd_config("layer", 2, "random");
  BcdScheduler s(5, rnd, 9);
  for (int t = 0; t < 3; ++t) s.step();
  std::vector<int> ahead = s.lookahead(12);
  std::vector<int> actual;
  while (actual.size() < ahead.size())
    if (s.step()) actual.push_back(s.current());
  EXPECT_EQ(ahead, actual);
}

TEST(BcdScheduler, StateRestoresExactly) {
  BcdConfig c = bcd_config("layer", 3, "random");
  BcdScheduler a(6, c, 5);
  for (int t = 0; t < 29; ++t) a.step();
  BcdScheduler b(6, c, 5);
  b.restore(a.state());
  for (int t = 0; t < 50; ++t) {
    ASSERT_EQ(a.current(), b.current()) << "step " << t;
    ASSERT_EQ(a.state(), b.state());
    a.step();
    b.step();
  }
}

// ---- Truncated backward ----

TEST(BcdStep, ActiveBlockGradientEqualsFullBackwardAndOthersGetNone) {
  for (const char* blocks : {"layer", "attn_mlp"}) {
    ModelConfig cfg = small_config();
    cfg.qkv_bias = true;
    LlamaModel m(cfg, torch::kFloat64);
    m.init_weights(3);
    torch::Tensor batch = batch_for(0, cfg.vocab_size);
    m.set_trainable(true);
    m.loss(batch).backward();
    std::vector<torch::Tensor> full;
    for (Block& b : m.blocks()) full.push_back(b.grad().clone());
    m.set_trainable(false);

    for (const UnitShape& u : make_units(m, bcd_config(blocks))) {
      for (const UnitPieceShape& p : u.pieces) m.block(p.block).set_trainable(true, p.part);
      m.loss(batch, u.lowest_block()).backward();
      for (int i = 0; i < m.n_blocks(); ++i) {
        const Block& b = m.block(i);
        const UnitPieceShape* piece = nullptr;
        for (const UnitPieceShape& p : u.pieces)
          if (p.block == i) piece = &p;
        if (!piece) {
          EXPECT_FALSE(b.grad().defined()) << u.name << ": " << b.name() << " got a gradient buffer";
          for (const auto& prm : b.params()) EXPECT_FALSE(prm.grad().defined()) << u.name << ": " << b.name();
          continue;
        }
        for (const Segment& seg : b.segments()) {
          torch::Tensor got = b.grad().narrow(0, seg.begin, seg.numel());
          torch::Tensor want = full[i].narrow(0, seg.begin, seg.numel());
          if (piece->part == Part::kNone || seg.part == piece->part)
            EXPECT_TRUE(torch::allclose(got, want, 1e-10, 1e-12)) << blocks << " " << u.name << " segment " << name_of(seg.part);
          else
            EXPECT_EQ(got.abs().sum().item<double>(), 0.0) << u.name << ": frozen part " << name_of(seg.part) << " got gradient";
        }
      }
      for (const UnitPieceShape& p : u.pieces) m.block(p.block).set_trainable(false);
    }
  }
}

// ---- Optimizer ----

TEST(BcdOptimizer, WholeModelBlockWithK1EqualsFullAdamW) {
  ModelConfig cfg = small_config();
  OptimConfig oc;
  oc.weight_decay = 0.1;
  LlamaModel full(cfg), fused_full(cfg), bcd(cfg);
  for (LlamaModel* m : {&full, &fused_full, &bcd}) m->init_weights(7);

  full.set_trainable(true);
  FullAdamW torch_opt(full, oc);
  BlockAdamW fused_opt(fused_full, make_units(fused_full, BcdConfig{}), oc, true);  // bcd disabled
  fused_opt.activate(0);
  BcdConfig whole = bcd_config("whole", 1, "random");
  BcdScheduler sched(1, whole, 1);
  BlockAdamW bcd_opt(bcd, make_units(bcd, whole), oc, true);
  bcd_opt.activate(sched.current());

  for (int t = 0; t < 8; ++t) {
    const double lr = 1e-2 * (1.0 - 0.1 * t);
    for (LlamaModel* m : {&full, &fused_full, &bcd}) {
      m->zero_grad();
      m->loss(batch_for(t, cfg.vocab_size)).backward();
    }
    torch_opt.step(lr);
    fused_opt.step(lr);
    bcd_opt.step(lr);
    if (sched.step()) bcd_opt.activate(sched.current());
    for (int i = 0; i < full.n_blocks(); ++i) {
      // same kernel, same schedule: bitwise
      ASSERT_TRUE(torch::equal(fused_full.block(i).data(), bcd.block(i).data())) << "step " << t << " " << bcd.block(i).name();
      // fused kernel vs torch::optim::AdamW: float rounding only
      torch::Tensor a = full.block(i).data(), b = bcd.block(i).data();
      const double rel = ((a - b).abs().max() / a.abs().max()).item<double>();
      ASSERT_LT(rel, 1e-5) << "step " << t << " " << full.block(i).name();
    }
  }
}

TEST(BcdOptimizer, KeepContinuesMomentsAndResetZeroesThem) {
  ModelConfig cfg = small_config();
  OptimConfig oc;
  for (bool keep : {true, false}) {
    LlamaModel m(cfg);
    m.init_weights(11);
    BcdConfig bc = bcd_config("layer", 2, "ascending");
    auto units = make_units(m, bc);
    BcdScheduler sched(static_cast<int>(units.size()), bc, 1);
    BlockAdamW opt(m, units, oc, keep);
    opt.activate(sched.current());
    const int layer0 = 1;  // unit and storage block of layer.0
    std::vector<torch::Tensor> m_at_leave, v_at_leave;
    int64_t step_at_leave = -1;
    for (int t = 0; t < 2 * static_cast<int>(units.size()) * 2 + 1; ++t) {
      const int u = sched.current();
      m.zero_grad();
      m.loss(batch_for(t, cfg.vocab_size), units[u].lowest_block()).backward();
      // at the first step of a visit of layer.0, before the update, check the moments
      if (u == layer0 && sched.step_in_visit() == 0) {
        for (int s = 0; s < static_cast<int>(m.block(1).segments().size()); ++s) {
          const SegmentState& st = opt.segment_state(1, s);
          ASSERT_TRUE(st.m.defined());
          if (!keep || step_at_leave < 0) {
            EXPECT_EQ(st.m.abs().sum().item<double>(), 0.0) << "keep=" << keep << " step " << t;
            EXPECT_EQ(st.v.abs().sum().item<double>(), 0.0);
            EXPECT_EQ(st.step, 0);
          } else {
            EXPECT_TRUE(torch::equal(st.m, m_at_leave[s])) << "keep: moments changed between visits";
            EXPECT_TRUE(torch::equal(st.v, v_at_leave[s]));
            EXPECT_EQ(st.step, step_at_leave);
          }
        }
      }
      opt.step(1e-2);
      if (u == layer0 && sched.step_in_visit() == 1) {  // last step of the visit (K = 2)
        m_at_leave.clear(), v_at_leave.clear();
        for (int s = 0; s < static_cast<int>(m.block(1).segments().size()); ++s) {
          m_at_leave.push_back(opt.segment_state(1, s).m.clone());
          v_at_leave.push_back(opt.segment_state(1, s).v.clone());
          step_at_leave = opt.segment_state(1, s).step;
        }
      }
      if (sched.step()) opt.activate(sched.current());
    }
    EXPECT_GT(step_at_leave, 0);
    // with reset, only the active unit holds moments
    if (!keep) EXPECT_EQ(opt.moment_bytes(), opt.unit_moment_bytes(opt.active()));
    else EXPECT_GT(opt.moment_bytes(), opt.unit_moment_bytes(opt.active()));
  }
}

TEST(BcdOptimizer, OnlyTheActiveBlockChanges) {
  ModelConfig cfg = small_config();
  LlamaModel m(cfg);
  m.init_weights(13);
  BcdConfig bc = bcd_config("attn_mlp", 1, "random");
  auto units = make_units(m, bc);
  BcdScheduler sched(static_cast<int>(units.size()), bc, 3);
  BlockAdamW opt(m, units, OptimConfig{}, true);
  opt.activate(sched.current());
  for (int t = 0; t < 6; ++t) {
    std::vector<torch::Tensor> before;
    for (Block& b : m.blocks()) before.push_back(b.data().clone());
    const UnitShape& u = units[sched.current()];
    m.zero_grad();
    m.loss(batch_for(t, cfg.vocab_size), u.lowest_block()).backward();
    opt.step(1e-2);
    for (int i = 0; i < m.n_blocks(); ++i) {
      const Block& b = m.block(i);
      for (const Segment& seg : b.segments()) {
        bool active = false;
        for (const UnitPieceShape& p : u.pieces) active |= p.block == i && (p.part == Part::kNone || p.part == seg.part);
        const bool changed = !torch::equal(b.data().narrow(0, seg.begin, seg.numel()),
                                           before[i].narrow(0, seg.begin, seg.numel()));
        EXPECT_EQ(changed, active) << u.name << ": " << b.name() << "/" << name_of(seg.part);
      }
    }
    if (sched.step()) opt.activate(sched.current());
  }
}

// FLOPs of a step, counted by hand for small_config (V 41, C 32, 3 layers, H 4, KV 2, D 8, F 48)
// over 2 sequences of 12 tokens. Per token: a layer's matrices hold 1024 (wq) + 512 (wk) + 512
// (wv) + 1024 (wo) + 3 * 1536 (MLP) = 7680 weights, 15360 FLOPs; causal attention 2 * 2 * 32 *
// 13 / 2 = 832; the LM head 2 * 41 * 32 = 2624.
TEST(StepFlops, ForwardEverywhereBackwardFromTheActiveUnitUp) {
  const double tokens = 2 * 12, layer = 15360, attn = 832, head = 2624;
  ModelConfig cfg = small_config();
  {
    LlamaModel m(cfg);
    m.set_trainable(true);  // full-parameter: backward through everything, every weight gradient
    const StepFlops f = micro_batch_flops(m, 0, 2, 12);
    EXPECT_EQ(f.forward, tokens * (3 * (layer + attn) + head));
    EXPECT_EQ(f.backward_input, tokens * (3 * (layer + 2 * attn) + head));
    EXPECT_EQ(f.backward_weight, tokens * (3 * layer + head));
    EXPECT_EQ(f.recompute, 0.0);
  }
  {
    LlamaModel m(cfg);
    m.block(2).set_trainable(true);  // layer.1 active: backward from block 2, weight gradients of its matrices only
    const StepFlops f = micro_batch_flops(m, 2, 2, 12);
    EXPECT_EQ(f.forward, tokens * (3 * (layer + attn) + head));
    EXPECT_EQ(f.backward_input, tokens * (2 * (layer + 2 * attn) + head));
    EXPECT_EQ(f.backward_weight, tokens * layer);
    EXPECT_EQ(f.total(), f.forward + f.backward_input + f.backward_weight);
  }
  {
    cfg.activation_checkpointing = true;  // layers with autograd run their forward twice
    LlamaModel m(cfg);
    m.block(2).set_trainable(true, Part::kMlp);  // a part: only the MLP's three matrices
    const StepFlops f = micro_batch_flops(m, 2, 2, 12);
    EXPECT_EQ(f.recompute, tokens * 2 * (layer + attn));
    EXPECT_EQ(f.backward_weight, tokens * 2 * 3 * 1536);
  }
  {
    cfg.activation_checkpointing = false;
    LlamaModel m(cfg);
    m.block(4).set_trainable(true);  // the head: backward through the LM head alone
    const StepFlops f = micro_batch_flops(m, 4, 2, 12);
    EXPECT_EQ(f.backward_input, tokens * head);
    EXPECT_EQ(f.backward_weight, tokens * head);
  }
}

TEST(StepFlops, KnownGpusPeaks) {
  EXPECT_EQ(gpu_peak_tflops("NVIDIA GeForce RTX 4090", Dtype::kBf16), 165.2);
  EXPECT_EQ(gpu_peak_tflops("NVIDIA GeForce RTX 4090", Dtype::kFp32), 82.6);
  EXPECT_EQ(gpu_peak_tflops("NVIDIA A100-SXM4-80GB", Dtype::kBf16), 312.0);
  EXPECT_EQ(gpu_peak_tflops("NVIDIA H100 PCIe", Dtype::kBf16), 756.5);
  EXPECT_EQ(gpu_peak_tflops("NVIDIA H100 80GB HBM3", Dtype::kBf16), 989.4);
  EXPECT_EQ(gpu_peak_tflops("NVIDIA H200", Dtype::kBf16), 989.4);
  EXPECT_EQ(gpu_peak_tflops("NVIDIA H200 NVL", Dtype::kBf16), 835.5);
  EXPECT_FALSE(gpu_peak_tflops("Tesla K80", Dtype::kBf16).has_value());
  EXPECT_FALSE(gpu_peak_tflops("", Dtype::kFp32).has_value());
}

// bf16 working weights: a step's micro-batches are summed in fp32, exactly the fp32 sum of each
// micro-batch's bf16 gradient taken alone, and not the bf16 sum autograd would leave.
TEST(BcdOptimizer, Bf16MicroBatchGradientsAreSummedInFp32) {
  ModelConfig cfg = small_config();
  LlamaModel m(cfg, torch::kBFloat16);
  m.init_weights(23);
  const int from = 1;  // layer.0 and everything above it train
  for (int b = from; b < m.n_blocks(); ++b) m.block(b).set_trainable(true);
  constexpr int kMicro = 8;
  // Reference: each micro-batch's gradient alone, summed in fp32 in the same order.
  std::vector<torch::Tensor> want, bf16_sum;
  for (int b = 0; b < m.n_blocks(); ++b) {
    want.push_back(b >= from ? torch::zeros({m.block(b).numel()}, torch::kFloat32) : torch::Tensor());
    bf16_sum.push_back(b >= from ? torch::zeros({m.block(b).numel()}, torch::kBFloat16) : torch::Tensor());
  }
  for (int i = 0; i < kMicro; ++i) {
    m.zero_grad();
    (m.loss(batch_for(i, cfg.vocab_size), from) / kMicro).backward();
    for (int b = from; b < m.n_blocks(); ++b) {
      want[b] += m.block(b).autograd_grad().to(torch::kFloat32);
      bf16_sum[b] += m.block(b).autograd_grad();
    }
  }
  // What the trainer does: backward after backward, each added into the fp32 sum.
  m.zero_grad();
  for (int i = 0; i < kMicro; ++i) {
    (m.loss(batch_for(i, cfg.vocab_size), from) / kMicro).backward();
    m.accumulate_grads();
  }
  bool bf16_differs = false;
  for (int b = from; b < m.n_blocks(); ++b) {
    const Block& blk = m.block(b);
    ASSERT_TRUE(blk.sums_grad_in_fp32());
    ASSERT_EQ(blk.grad().scalar_type(), torch::kFloat32);
    EXPECT_TRUE(torch::equal(blk.grad(), want[b])) << blk.name();
    EXPECT_EQ(blk.autograd_grad().abs().max().item<float>(), 0.0f) << "the autograd buffer is left empty";
    bf16_differs |= !torch::equal(bf16_sum[b].to(torch::kFloat32), want[b]);
  }
  EXPECT_TRUE(bf16_differs) << "the batches are meant to be ones where bf16 accumulation rounds";
  // fp32 blocks keep one buffer: autograd's is the sum.
  LlamaModel f(cfg);
  f.block(1).set_trainable(true);
  EXPECT_FALSE(f.block(1).sums_grad_in_fp32());
  EXPECT_TRUE(f.block(1).grad().is_same(f.block(1).autograd_grad()));
}

TEST(BcdOptimizer, Bf16WorkingWeightsFollowTheFp32Master) {
  ModelConfig cfg = small_config();
  LlamaModel m(cfg, torch::kBFloat16);
  m.init_weights(17);
  BcdConfig bc = bcd_config("layer", 1, "ascending");
  auto units = make_units(m, bc);
  BlockAdamW opt(m, units, OptimConfig{}, true);
  opt.activate(1);
  for (int t = 0; t < 3; ++t) {
    m.zero_grad();
    m.loss(batch_for(t, cfg.vocab_size), units[1].lowest_block()).backward();
    m.accumulate_grads();  // bf16: into the fp32 gradient the optimizer reads
    opt.step(1e-2);
  }
  const Block& b = m.block(1);
  for (int s = 0; s < static_cast<int>(b.segments().size()); ++s) {
    const Segment& seg = b.segments()[s];
    const SegmentState& st = opt.segment_state(1, s);
    ASSERT_TRUE(st.master.defined());
    EXPECT_TRUE(torch::equal(b.data().narrow(0, seg.begin, seg.numel()), st.master.to(torch::kBFloat16)))
        << "working bf16 must be the master rounded to nearest";
  }
  int64_t master_bytes = 0;  // an fp32 master of every block, trained or not
  for (Block& blk : m.blocks()) master_bytes += 4 * blk.numel();
  EXPECT_EQ(opt.state_bytes(), opt.moment_bytes() + master_bytes);
}

}  // namespace
}  // namespace bcd
