// Model tests: causality, RoPE, GQA, gradients against finite differences, flat buffers (the HF config: test_hf_config.cpp).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "model/llama.h"
#include "base/error.h"
#include "model_test_helpers.h"
#include "test_util.h"

namespace bcd {
namespace {

using test::perturb_all;
using test::random_tokens;
using test::tiny_config;

TEST(Model, BlocksAreEmbedLayersHead) {
  LlamaModel m(tiny_config());
  ASSERT_EQ(m.n_blocks(), 4);
  EXPECT_EQ(m.block(0).name(), "embed");
  EXPECT_EQ(m.block(1).name(), "layer.0");
  EXPECT_EQ(m.block(2).name(), "layer.1");
  EXPECT_EQ(m.block(3).name(), "head");
  // 37*16 embed + 2 layers + norm + 37*16 head
  const int64_t layer = 16 + 16 * 16 + 8 * 16 * 2 + 16 * 16 + 16 + 3 * 24 * 16;
  EXPECT_EQ(m.num_params(), 37 * 16 + 2 * layer + 16 + 37 * 16);
}

// The init is a pure function of the seed: the same weights on 1 thread or 2, and a bf16 model's
// are the fp32 model's rounded; norms 1, biases 0, the output projections' spread 1/sqrt(2L) of
// the others'.
TEST(Model, InitIsTheSameForAnyThreadCountAndDtype) {
  ModelConfig cfg = tiny_config();
  cfg.qkv_bias = true;
  cfg.d_model = 64, cfg.d_ff = 128;  // 4096-element matrices: their spread within 2% of the draw's
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  LlamaModel one(cfg, torch::kFloat32, 5);
  at::set_num_threads(2);
  LlamaModel two(cfg, torch::kFloat32, 5);
  LlamaModel half(cfg, torch::kBFloat16, 5);
  at::set_num_threads(threads);
  LlamaModel other(cfg, torch::kFloat32, 6);
  for (int i = 0; i < one.n_blocks(); ++i) {
    EXPECT_TRUE(torch::equal(one.block(i).data(), two.block(i).data())) << one.block(i).name();
    EXPECT_TRUE(torch::equal(one.block(i).data().to(torch::kBFloat16), half.block(i).data())) << one.block(i).name();
    EXPECT_FALSE(torch::equal(one.block(i).data(), other.block(i).data()))
        << one.block(i).name() << ": another seed, the same weights";
  }
  const Block& l0 = one.block(1);
  EXPECT_TRUE(torch::equal(l0.param("attn_norm"), torch::ones_like(l0.param("attn_norm"))));
  EXPECT_TRUE(torch::equal(l0.param("bq"), torch::zeros_like(l0.param("bq"))));
  const double sd = l0.param("wq").std().item<double>(), sd_out = l0.param("wo").std().item<double>();
  EXPECT_NEAR(sd, cfg.init_std, 0.05 * cfg.init_std);
  EXPECT_NEAR(sd_out, cfg.init_std / std::sqrt(2.0 * cfg.n_layers), 0.05 * cfg.init_std);
  EXPECT_FALSE(torch::equal(l0.param("wq").flatten().narrow(0, 0, 64), l0.param("wk").flatten().narrow(0, 0, 64)))
      << "two matrices of one block drew the same numbers";
}

TEST(Model, CausalityFutureTokenNeverChangesPastLogits) {
  for (bool ckpt : {false, true}) {
    ModelConfig cfg = tiny_config();
    cfg.activation_checkpointing = ckpt;
    LlamaModel m(cfg);
    m.init_weights(3);
    torch::NoGradGuard ng;
    const int64_t t = 20;
    torch::Tensor x = random_tokens(2, t, cfg.vocab_size, 1);
    torch::Tensor base = m.forward(x);
    for (int64_t pos : {0, 7, 19}) {
      torch::Tensor y = x.clone();
      y.select(1, pos).add_(1).remainder_(cfg.vocab_size);
      torch::Tensor out = m.forward(y);
      if (pos > 0) {
        EXPECT_TRUE(torch::allclose(out.narrow(1, 0, pos), base.narrow(1, 0, pos), 1e-5, 1e-6))
            << "changing token " << pos << " changed earlier logits (checkpointing " << ckpt << ")";
      }
      EXPECT_FALSE(torch::allclose(out.narrow(1, pos, 1), base.narrow(1, pos, 1)))
          << "changing token " << pos << " did not change its own logits";
    }
  }
}

TEST(Model, PrefixLogitsDoNotDependOnSequenceLength) {
  // Any sequence length up to max_seq_len: a prefix run alone gives the same logits.
  ModelConfig cfg = tiny_config();
  LlamaModel m(cfg);
  m.init_weights(5);
  torch::NoGradGuard ng;
  torch::Tensor x = random_tokens(1, cfg.max_seq_len, cfg.vocab_size, 2);
  torch::Tensor full = m.forward(x);
  for (int64_t t : {1, 2, 13, 31}) {
    torch::Tensor part = m.forward(x.narrow(1, 0, t));
    EXPECT_TRUE(torch::allclose(part, full.narrow(1, 0, t), 1e-5, 1e-6)) << "prefix length " << t;
  }
  EXPECT_THROW(m.forward(random_tokens(1, cfg.max_seq_len + 1, cfg.vocab_size, 3)), UserError);
}

TEST(Model, RotaryMatchesDirectFormula) {
  ModelConfig cfg = tiny_config();
  cfg.rope_theta = 500000.0;
  LlamaModel m(cfg);
  const int64_t d = cfg.head_dim(), t = 9;
  torch::manual_seed(4);
  torch::Tensor x = torch::randn({1, 1, t, d}, torch::kFloat64);
  const auto [cos, sin] = m.rope(t);
  torch::Tensor out = apply_rotary(x, cos.to(torch::kFloat64), sin.to(torch::kFloat64));
  auto xa = x.accessor<double, 4>();
  auto oa = out.accessor<double, 4>();
  for (int64_t p = 0; p < t; ++p) {
    for (int64_t i = 0; i < d / 2; ++i) {
      // HF half-split layout: pair (i, i + D/2) rotated by p * theta^(-2i/D)
      const double ang = static_cast<double>(p) * std::pow(cfg.rope_theta, -2.0 * i / d);
      const double a = xa[0][0][p][i], b = xa[0][0][p][i + d / 2];
      // The tables hold fp32 angles (as transformers computes them): ~1e-7 relative per angle.
      EXPECT_NEAR(oa[0][0][p][i], a * std::cos(ang) - b * std::sin(ang), 1e-5) << "p=" << p << " i=" << i;
      EXPECT_NEAR(oa[0][0][p][i + d / 2], b * std::cos(ang) + a * std::sin(ang), 1e-5) << "p=" << p << " i=" << i;
    }
  }
}

// The tables are built a chunk of positions at a time, and grown as longer sequences come;
// every position past the first chunk holds exactly what one whole-table computation gives
// (the planner counts only the tables). They start at 4096 positions, whatever the declared
// context: a model that declares 2^25 positions builds no table of 2^25.
TEST(Model, RotaryTablesBuiltInChunksAreTheWholeTable) {
  ModelConfig cfg = tiny_config();
  cfg.max_seq_len = 9000;
  LlamaModel m(cfg);
  EXPECT_EQ(m.rope_positions(), 4096);
  const auto [c100, s100] = m.rope(100);
  EXPECT_EQ(c100.size(0), 100);
  EXPECT_EQ(m.rope_positions(), 4096);
  const auto [c5000, s5000] = m.rope(5000);
  EXPECT_EQ(m.rope_positions(), 8192);
  EXPECT_TRUE(torch::equal(c5000.narrow(0, 0, 100), c100));
  m.reserve_positions(100000);
  EXPECT_EQ(m.rope_positions(), 9000);
  ModelConfig huge = tiny_config();
  huge.max_seq_len = kMaxPositions;
  EXPECT_EQ(LlamaModel(huge).rope_bytes(), 2u * 4096 * static_cast<uint64_t>(huge.head_dim()) * 4);
  const int64_t d = cfg.head_dim();
  // transformers' computation (LlamaRotaryEmbedding), in fp32 over every position at once.
  torch::Tensor inv = 1.0 / torch::pow(cfg.rope_theta, torch::arange(0, d, 2, torch::kInt64).to(torch::kFloat32) / d);
  torch::Tensor f = torch::matmul(inv.view({1, d / 2, 1}), torch::arange(cfg.max_seq_len).to(torch::kFloat32).view({1, 1, -1}))
                        .transpose(1, 2)[0];
  torch::Tensor emb = torch::cat({f, f}, -1);
  const auto [cos, sin] = m.rope(cfg.max_seq_len);
  EXPECT_TRUE(torch::equal(cos, emb.cos()));
  EXPECT_TRUE(torch::equal(sin, emb.sin()));
}

TEST(Model, RotaryScoresDependOnlyOnRelativePosition) {
  ModelConfig cfg = tiny_config();
  LlamaModel m(cfg);
  const int64_t d = cfg.head_dim();
  torch::manual_seed(6);
  torch::Tensor q = torch::randn({1, 1, 1, d}), k = torch::randn({1, 1, 1, d});
  auto rot = [&](const torch::Tensor& v, int64_t p) {
    const auto [cos, sin] = m.rope(p + 1);
    return apply_rotary(v, cos.narrow(0, p, 1), sin.narrow(0, p, 1));
  };
  const double s1 = (rot(q, 10) * rot(k, 7)).sum().item<double>();
  const double s2 = (rot(q, 5) * rot(k, 2)).sum().item<double>();
  EXPECT_NEAR(s1, s2, 1e-5);
}

TEST(Model, GqaEqualsMultiHeadWithRepeatedKvHeads) {
  ModelConfig gcfg = tiny_config();  // 4 heads, 2 kv heads
  gcfg.qkv_bias = true;
  ModelConfig mcfg = gcfg;
  mcfg.n_kv_heads = 4;
  LlamaModel g(gcfg), mh(mcfg);
  g.init_weights(8);
  perturb_all(g, 9);
  torch::NoGradGuard ng;
  const int64_t d = gcfg.head_dim(), rep = gcfg.n_heads / gcfg.kv_heads();
  for (int i = 0; i < g.n_blocks(); ++i) {
    const Block& src = g.block(i);
    Block& dst = mh.block(i);
    for (const auto& slot : src.slots()) {
      const torch::Tensor& s = src.param(slot.name);
      const torch::Tensor& t = dst.param(slot.name);
      if (slot.name == "wk" || slot.name == "wv" || slot.name == "bk" || slot.name == "bv") {
        // MHA head j uses GQA kv head j / rep
        for (int64_t j = 0; j < mcfg.n_heads; ++j)
          t.narrow(0, j * d, d).copy_(s.narrow(0, (j / rep) * d, d));
      } else {
        t.copy_(s);
      }
    }
  }
  torch::Tensor x = random_tokens(2, 12, gcfg.vocab_size, 10);
  EXPECT_TRUE(torch::allclose(g.forward(x), mh.forward(x), 1e-5, 1e-6));
}

// Attention reads each KV head for its group of query heads inside the kernel: the same output
// and gradients, within fp32 rounding, as the KV heads copied once per query head (HF repeat_kv).
TEST(Model, GqaAttentionEqualsRepeatedKvHeads) {
  torch::manual_seed(3);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32).requires_grad(true);
  torch::Tensor q = torch::randn({2, 8, 16, 16}, opts), k = torch::randn({2, 2, 16, 16}, opts),
                v = torch::randn({2, 2, 16, 16}, opts);
  const torch::Tensor out = causal_attention(q, k, v);
  const torch::Tensor ref = at::scaled_dot_product_attention(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1),
                                                             {}, 0.0, /*is_causal=*/true);
  EXPECT_TRUE(torch::allclose(out, ref, 1e-5, 1e-6)) << (out - ref).abs().max().item<double>();
  const torch::Tensor w = torch::randn_like(out);
  const auto g = torch::autograd::grad({(out * w).sum()}, {q, k, v});
  const auto gr = torch::autograd::grad({(ref * w).sum()}, {q, k, v});
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_TRUE(torch::allclose(g[i], gr[i], 1e-5, 1e-5)) << i << ": " << (g[i] - gr[i]).abs().max().item<double>();
}

// ---- Gradients ----

struct GradCase {
  bool tied, bias, ckpt;
};

class ModelGrad : public ::testing::TestWithParam<GradCase> {};

TEST_P(ModelGrad, MatchesFiniteDifferencesInDouble) {
  const GradCase c = GetParam();
  ModelConfig cfg = tiny_config();
  cfg.vocab_size = 11;
  cfg.d_model = 8;
  cfg.n_heads = 2;
  cfg.n_kv_heads = 1;
  cfg.d_ff = 12;
  cfg.tie_embeddings = c.tied;
  cfg.qkv_bias = c.bias;
  cfg.activation_checkpointing = c.ckpt;
  cfg.init_std = 0.5;
  LlamaModel m(cfg, torch::kFloat64);
  m.init_weights(11);
  perturb_all(m, 12);
  m.set_trainable(true);
  torch::Tensor batch = random_tokens(2, 7, cfg.vocab_size, 13);
  m.zero_grad();
  m.loss(batch).backward();

  torch::manual_seed(14);
  const double eps = 1e-6;
  for (Block& b : m.blocks()) {
    ASSERT_TRUE(b.grad().defined()) << b.name();
    for (size_t si = 0; si < b.slots().size(); ++si) {
      const ParamSlot& s = b.slots()[si];
      for (int probe = 0; probe < 3; ++probe) {
        const int64_t j = s.offset + torch::randint(s.numel(), {1}).item<int64_t>();
        double fd;
        {
          torch::NoGradGuard ng;
          auto el = b.data().narrow(0, j, 1);
          const double orig = el.item<double>();
          el.fill_(orig + eps);
          const double lp = m.loss(batch).item<double>();
          el.fill_(orig - eps);
          const double lm = m.loss(batch).item<double>();
          el.fill_(orig);
          fd = (lp - lm) / (2 * eps);
        }
        const double an = b.grad()[j].item<double>();
        EXPECT_NEAR(an, fd, 1e-7 + 1e-5 * std::abs(fd))
            << b.name() << "." << s.name << "[" << j - s.offset << "] tied=" << c.tied << " bias=" << c.bias
            << " ckpt=" << c.ckpt;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ModelGrad,
                         ::testing::Values(GradCase{false, false, false}, GradCase{true, true, false},
                                           GradCase{false, true, true}),
                         [](const auto& info) {
                           return std::string(info.param.tied ? "tied" : "untied") +
                                  (info.param.bias ? "_bias" : "_nobias") + (info.param.ckpt ? "_ckpt" : "");
                         });

// Instruction data: the loss is -log p(target) summed over the targets the mask counts, divided by
// the batch's divisor, computed here by hand from the logits; masked-out targets change nothing.
TEST(Model, MaskedLossCountsOnlyMaskedTargets) {
  ModelConfig cfg = tiny_config();
  LlamaModel m(cfg, torch::kFloat64);
  m.init_weights(21);
  perturb_all(m, 22);
  Batch b;
  b.tokens = random_tokens(3, 9, cfg.vocab_size, 23);                 // (B, T+1) = (3, 9)
  b.mask = torch::zeros({3, 8}, torch::kFloat32);
  const std::vector<std::pair<int, int>> counted = {{0, 0}, {0, 5}, {0, 6}, {1, 7}, {2, 1}, {2, 2}, {2, 3}};
  for (auto [r, t] : counted) b.mask[r][t] = 1;
  b.divisor = 5.5;  // as if the global batch counted 11 targets over 2 ranks

  const torch::Tensor logits = m.forward(b.tokens.narrow(1, 0, 8));  // (3, 8, V)
  double want = 0;
  for (auto [r, t] : counted) {
    const int64_t target = b.tokens[r][t + 1].item<int64_t>();
    double z = 0;
    for (int64_t v = 0; v < cfg.vocab_size; ++v) z += std::exp(logits[r][t][v].item<double>());
    want += std::log(z) - logits[r][t][target].item<double>();
  }
  want /= b.divisor;
  EXPECT_NEAR(m.loss(b).item<double>(), want, 1e-12);

  // A target the mask does not count can be anything (the inputs stay: the last position of
  // row 1 is a target only, so it may change without moving any counted logit).
  Batch other = b;
  other.tokens = b.tokens.clone();
  other.tokens[1][8] = (b.tokens[1][8].item<int64_t>() + 1) % cfg.vocab_size;  // (1, 7) counts
  EXPECT_NE(m.loss(other).item<double>(), m.loss(b).item<double>());
  other.tokens = b.tokens.clone();
  other.tokens[0][8] = (b.tokens[0][8].item<int64_t>() + 1) % cfg.vocab_size;  // (0, 7) does not
  EXPECT_EQ(m.loss(other).item<double>(), m.loss(b).item<double>());

  // An all-ones mask with divisor B*T is the plain mean; no mask is exactly the plain loss.
  Batch all = b;
  all.mask = torch::ones({3, 8}, torch::kFloat32);
  all.divisor = 24;
  EXPECT_NEAR(m.loss(all).item<double>(), m.loss(b.tokens).item<double>(), 1e-12);
  Batch plain{b.tokens, torch::Tensor(), 24};
  EXPECT_EQ(m.loss(plain).item<double>(), m.loss(b.tokens).item<double>());
  // Nothing counted in the whole global batch: zero, and backward still runs.
  Batch none = b;
  none.mask = torch::zeros({3, 8}, torch::kFloat32);
  none.divisor = 0;
  m.set_trainable(true);
  m.zero_grad();
  const torch::Tensor l = m.loss(none);
  EXPECT_EQ(l.item<double>(), 0.0);
  l.backward();
}

TEST(Model, CheckpointingGivesTheSameGradients) {
  ModelConfig cfg = tiny_config();
  LlamaModel a(cfg, torch::kFloat64);
  cfg.activation_checkpointing = true;
  LlamaModel b(cfg, torch::kFloat64);
  a.init_weights(21);
  b.init_weights(21);
  a.set_trainable(true);
  b.set_trainable(true);
  torch::Tensor batch = random_tokens(3, 10, cfg.vocab_size, 22);
  a.loss(batch).backward();
  b.loss(batch).backward();
  for (int i = 0; i < a.n_blocks(); ++i)
    EXPECT_TRUE(torch::allclose(a.block(i).grad(), b.block(i).grad(), 1e-10, 1e-12)) << a.block(i).name();
}

TEST(Model, TruncatedBackwardStopsAtGradFrom) {
  ModelConfig cfg = tiny_config();
  LlamaModel m(cfg, torch::kFloat64);
  m.init_weights(31);
  m.set_trainable(true);
  torch::Tensor batch = random_tokens(2, 9, cfg.vocab_size, 32);
  m.loss(batch).backward();
  std::vector<torch::Tensor> full;
  for (Block& b : m.blocks()) full.push_back(b.grad().clone());
  const int from = 2;  // layer.1
  m.zero_grad();
  m.loss(batch, from).backward();
  for (int i = 0; i < m.n_blocks(); ++i) {
    if (i < from)
      EXPECT_EQ(m.block(i).grad().abs().sum().item<double>(), 0.0) << m.block(i).name();
    else
      EXPECT_TRUE(torch::allclose(m.block(i).grad(), full[i], 1e-10, 1e-12)) << m.block(i).name();
  }
}

// ---- Flat buffers ----

TEST(Model, FlatBuffersBackTheParameters) {
  ModelConfig cfg = tiny_config();
  LlamaModel m(cfg);
  m.init_weights(41);
  m.set_trainable(true);
  for (Block& b : m.blocks()) {
    const auto* base = static_cast<const char*>(b.data().data_ptr());
    const auto* gbase = static_cast<const char*>(b.grad().data_ptr());
    const int64_t bytes = b.data().nbytes();
    for (size_t i = 0; i < b.slots().size(); ++i) {
      const torch::Tensor& p = b.params()[i];
      const auto* ptr = static_cast<const char*>(p.data_ptr());
      EXPECT_EQ(ptr, base + b.slots()[i].offset * 4) << b.name() << "." << b.slots()[i].name;
      EXPECT_GE(ptr, base);
      EXPECT_LE(ptr + p.nbytes(), base + bytes);
      const auto* gptr = static_cast<const char*>(p.grad().data_ptr());
      EXPECT_EQ(gptr - gbase, ptr - base) << "gradient view of " << b.slots()[i].name;
    }
    EXPECT_EQ(b.numel() % Block::kAlign, 0);
  }
  torch::Tensor x = random_tokens(1, 8, cfg.vocab_size, 42);
  torch::Tensor before = m.forward(x).detach();
  // Writing a layer's flat buffer changes the output ...
  {
    torch::NoGradGuard ng;
    m.block(1).data().mul_(1.5);
  }
  EXPECT_FALSE(torch::allclose(m.forward(x), before));
  // ... and backward fills the flat gradient buffer.
  m.zero_grad();
  m.loss(random_tokens(2, 9, cfg.vocab_size, 43)).backward();
  for (Block& b : m.blocks()) EXPECT_GT(b.grad().abs().sum().item<double>(), 0.0) << b.name();
}

TEST(Model, SegmentsGroupPartsAndDecay) {
  ModelConfig cfg = tiny_config();
  cfg.qkv_bias = true;
  LlamaModel m(cfg);
  for (Block& b : m.blocks()) {
    // segments tile the buffer in order, aligned
    int64_t pos = 0;
    for (const Segment& seg : b.segments()) {
      EXPECT_EQ(seg.begin, pos) << b.name();
      EXPECT_EQ(seg.begin % Block::kAlign, 0) << b.name();
      pos = seg.end;
    }
    EXPECT_EQ(pos, b.numel()) << b.name();
    for (const auto& s : b.slots()) {
      EXPECT_EQ(s.decay, s.shape.size() == 2) << s.name;
      int hits = 0;
      for (const Segment& seg : b.segments())
        if (s.offset >= seg.begin && s.offset + s.numel() <= seg.end) {
          ++hits;
          EXPECT_EQ(seg.decay, s.decay) << s.name;
          EXPECT_EQ(seg.part, s.part) << s.name;
        }
      EXPECT_EQ(hits, 1) << s.name;
    }
  }
  // a layer has attention and MLP halves; attn_norm and the biases belong to attention
  EXPECT_EQ(m.block(1).parts(), (std::vector<Part>{Part::kAttn, Part::kMlp}));
  EXPECT_EQ(m.block(1).segments().size(), 4u);
  EXPECT_EQ(m.block(0).parts(), (std::vector<Part>{Part::kNone}));
}

TEST(Model, PartTrainableLimitsGradients) {
  ModelConfig cfg = tiny_config();
  LlamaModel m(cfg, torch::kFloat64);
  m.init_weights(51);
  m.block(2).set_trainable(true, Part::kMlp);
  torch::manual_seed(52);
  m.loss(torch::randint(cfg.vocab_size, {2, 9}, torch::kInt64), /*grad_from=*/2).backward();
  const Block& b = m.block(2);
  for (size_t i = 0; i < b.slots().size(); ++i) {
    const double g = b.grad().narrow(0, b.slots()[i].offset, b.slots()[i].numel()).abs().sum().item<double>();
    if (b.slots()[i].part == Part::kMlp) EXPECT_GT(g, 0.0) << b.slots()[i].name;
    else EXPECT_EQ(g, 0.0) << b.slots()[i].name;
  }
}

TEST(Model, InitIsAPureFunctionOfTheSeed) {
  LlamaModel a(tiny_config()), b(tiny_config());
  a.init_weights(7);
  b.init_weights(7);
  for (int i = 0; i < a.n_blocks(); ++i) EXPECT_TRUE(torch::equal(a.block(i).data(), b.block(i).data()));
  b.init_weights(8);
  EXPECT_FALSE(torch::equal(a.block(1).data(), b.block(1).data()));
}

}  // namespace
}  // namespace bcd
