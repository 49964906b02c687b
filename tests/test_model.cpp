// Model tests: causality, RoPE, GQA, gradients against finite differences, flat buffers, HF config.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "model/hf_config.h"
#include "model/llama.h"
#include "base/error.h"
#include "test_util.h"

namespace bcd {
namespace {

ModelConfig tiny_config() {
  ModelConfig m;
  m.vocab_size = 37;
  m.d_model = 16;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.d_ff = 24;
  m.max_seq_len = 32;
  m.init_std = 0.2;  // large enough that every path matters in the checks below
  return m;
}

torch::Tensor random_tokens(int64_t b, int64_t t, int64_t v, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(v, {b, t}, torch::kInt64);
}

// Makes norms and biases non-trivial too, so the gradient checks exercise them.
void perturb_all(LlamaModel& m, uint64_t seed) {
  torch::NoGradGuard ng;
  torch::manual_seed(seed);
  for (Block& b : m.blocks()) b.data().add_(torch::randn_like(b.data()) * 0.1);
}

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
  torch::Tensor out = apply_rotary(x, m.rope_cos().narrow(0, 0, t).to(torch::kFloat64),
                                   m.rope_sin().narrow(0, 0, t).to(torch::kFloat64));
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

// The tables are built a chunk of positions at a time; every position past the first chunk
// holds exactly what one whole-table computation gives (the planner counts only the tables).
TEST(Model, RotaryTablesBuiltInChunksAreTheWholeTable) {
  ModelConfig cfg = tiny_config();
  cfg.max_seq_len = 9000;
  LlamaModel m(cfg);
  const int64_t d = cfg.head_dim();
  // transformers' computation (LlamaRotaryEmbedding), in fp32 over every position at once.
  torch::Tensor inv = 1.0 / torch::pow(cfg.rope_theta, torch::arange(0, d, 2, torch::kInt64).to(torch::kFloat32) / d);
  torch::Tensor f = torch::matmul(inv.view({1, d / 2, 1}), torch::arange(cfg.max_seq_len).to(torch::kFloat32).view({1, 1, -1}))
                        .transpose(1, 2)[0];
  torch::Tensor emb = torch::cat({f, f}, -1);
  EXPECT_TRUE(torch::equal(m.rope_cos(), emb.cos()));
  EXPECT_TRUE(torch::equal(m.rope_sin(), emb.sin()));
}

TEST(Model, RotaryScoresDependOnlyOnRelativePosition) {
  ModelConfig cfg = tiny_config();
  LlamaModel m(cfg);
  const int64_t d = cfg.head_dim();
  torch::manual_seed(6);
  torch::Tensor q = torch::randn({1, 1, 1, d}), k = torch::randn({1, 1, 1, d});
  auto rot = [&](const torch::Tensor& v, int64_t p) {
    return apply_rotary(v, m.rope_cos().narrow(0, p, 1), m.rope_sin().narrow(0, p, 1));
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
        const int64_t j = s.offset + torch::randint(s.numel, {1}).item<int64_t>();
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
        if (s.offset >= seg.begin && s.offset + s.numel <= seg.end) {
          ++hits;
          EXPECT_EQ(seg.decay, s.decay) << s.name;
          EXPECT_EQ(seg.part, s.part) << s.name;
        }
      EXPECT_EQ(hits, 1) << s.name;
    }
  }
  // a layer has attention and MLP halves; attn_norm and the biases belong to attention
  EXPECT_EQ(m.block(1).parts(), (std::vector<std::string>{"attn", "mlp"}));
  EXPECT_EQ(m.block(1).segments().size(), 4u);
  EXPECT_EQ(m.block(0).parts(), (std::vector<std::string>{""}));
}

TEST(Model, PartTrainableLimitsGradients) {
  ModelConfig cfg = tiny_config();
  LlamaModel m(cfg, torch::kFloat64);
  m.init_weights(51);
  m.block(2).set_trainable(true, "mlp");
  torch::manual_seed(52);
  m.loss(torch::randint(cfg.vocab_size, {2, 9}, torch::kInt64), /*grad_from=*/2).backward();
  const Block& b = m.block(2);
  for (size_t i = 0; i < b.slots().size(); ++i) {
    const double g = b.grad().narrow(0, b.slots()[i].offset, b.slots()[i].numel).abs().sum().item<double>();
    if (b.slots()[i].part == "mlp") EXPECT_GT(g, 0.0) << b.slots()[i].name;
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

// ---- HF config ----

TEST(HfConfig, MapsLlamaMistralQwen2) {
  test::TempDir dir;
  test::write_text(dir.file("llama.json"), R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
    "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false,
    "hidden_act": "silu", "rope_scaling": null})");
  ModelConfig l = model_config_from_hf(dir.file("llama.json"), ModelConfig{});
  EXPECT_EQ(l.d_model, 4096);
  EXPECT_EQ(l.ff_dim(), 11008);
  EXPECT_EQ(l.n_layers, 32);
  EXPECT_EQ(l.kv_heads(), 32);
  EXPECT_FALSE(l.qkv_bias);
  EXPECT_DOUBLE_EQ(l.norm_eps, 1e-5);

  test::write_text(dir.file("qwen2.json"), R"({"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896,
    "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": true,
    "use_sliding_window": false, "sliding_window": 4096})");
  ModelConfig q = model_config_from_hf(dir.file("qwen2.json"), ModelConfig{});
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_TRUE(q.tie_embeddings);
  EXPECT_EQ(q.kv_heads(), 2);
  EXPECT_DOUBLE_EQ(q.rope_theta, 1e6);

  test::write_text(dir.file("mistral.json"), R"({"model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 32768, "sliding_window": null})");
  ModelConfig s = model_config_from_hf(dir.file("mistral.json"), ModelConfig{});
  EXPECT_EQ(s.kv_heads(), 8);
}

// The same Llama 3.1 model in the form transformers 4.x writes (rope_theta + rope_scaling) and in
// the form 5.x writes (rope_parameters) reads to the same ModelConfig; so does Qwen3's implicit
// head_dim (128 in transformers' Qwen3Config, not hidden_size / heads).
TEST(HfConfig, ReadsBothRopeFormsAndExplicitHeadDims) {
  test::TempDir dir;
  const std::string shape = R"("model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "tie_word_embeddings": false, "hidden_act": "silu")";
  test::write_text(dir.file("v4.json"), "{" + shape + R"(, "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0,
    "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  test::write_text(dir.file("v5.json"), "{" + shape + R"(, "rope_parameters": {"rope_theta": 500000.0, "factor": 8.0,
    "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  for (const char* f : {"v4.json", "v5.json"}) {
    SCOPED_TRACE(f);
    const ModelConfig m = model_config_from_hf(dir.file(f), ModelConfig{});
    EXPECT_DOUBLE_EQ(m.rope_theta, 5e5);
    EXPECT_EQ(m.rope_type, RopeType::kLlama3);
    EXPECT_DOUBLE_EQ(m.rope_factor, 8.0);
    EXPECT_DOUBLE_EQ(m.rope_high_freq_factor, 4.0);
    EXPECT_EQ(m.rope_original_max_len, 8192);
    EXPECT_EQ(m.head_dim(), 128);
  }
  // transformers-4 style "type" instead of "rope_type"; yarn's default attention factor.
  test::write_text(dir.file("yarn.json"), "{" + shape + R"(, "rope_theta": 1e6, "rope_scaling": {"type": "yarn",
    "factor": 4.0, "original_max_position_embeddings": 32768}})");
  const ModelConfig y = model_config_from_hf(dir.file("yarn.json"), ModelConfig{});
  EXPECT_EQ(y.rope_type, RopeType::kYarn);
  EXPECT_EQ(y.rope_original_max_len, 32768);
  // Mistral-Nemo: head_dim 128 with hidden 5120 and 32 heads (160 each if it were implied).
  test::write_text(dir.file("nemo.json"), R"({"model_type": "mistral", "vocab_size": 131072, "hidden_size": 5120,
    "intermediate_size": 14336, "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "max_position_embeddings": 1024000, "rope_theta": 1000000.0, "sliding_window": null})");
  const ModelConfig nemo = model_config_from_hf(dir.file("nemo.json"), ModelConfig{});
  EXPECT_EQ(nemo.head_dim(), 128);
  EXPECT_EQ(nemo.d_head, 128);
  // Qwen3-0.6B without its head_dim key: transformers' default, 128.
  test::write_text(dir.file("qwen3.json"), R"({"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024,
    "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
    "max_position_embeddings": 40960, "rope_theta": 1000000, "tie_word_embeddings": true, "use_sliding_window": false,
    "sliding_window": null, "max_window_layers": 28, "attention_bias": false, "attention_dropout": 0.0,
    "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention", "full_attention",
    "full_attention", "full_attention", "full_attention", "full_attention", "full_attention", "full_attention",
    "full_attention", "full_attention", "full_attention", "full_attention", "full_attention", "full_attention",
    "full_attention", "full_attention", "full_attention", "full_attention", "full_attention", "full_attention",
    "full_attention", "full_attention", "full_attention", "full_attention", "full_attention"]})");
  const ModelConfig q3 = model_config_from_hf(dir.file("qwen3.json"), ModelConfig{});
  EXPECT_EQ(q3.head_dim(), 128);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_FALSE(q3.qkv_bias);
  EXPECT_EQ(q3.rope_type, RopeType::kDefault);
}

// config.json files as the published models carry them read without a warning: every key is
// read or known to change nothing.
TEST(HfConfig, PublishedConfigsReadWithoutWarnings) {
  test::TempDir dir;
  const std::map<std::string, std::string> configs = {
      {"llama-3.2-1b", R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
        "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
        "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
        "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
        "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})"},
      {"smollm2-135m", R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 576,
        "initializer_range": 0.041666666666666664, "intermediate_size": 1536, "is_llama_config": true,
        "max_position_embeddings": 8192, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 9,
        "num_hidden_layers": 30, "num_key_value_heads": 3, "pad_token_id": 2, "pretraining_tp": 1,
        "rms_norm_eps": 1e-05, "rope_interleaved": false, "rope_scaling": null, "rope_theta": 100000,
        "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.42.3",
        "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16", "fp16": "float16"}}, "use_cache": true,
        "vocab_size": 49152})"},
      {"qwen2.5-7b", R"({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
        "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28, "model_type": "qwen2",
        "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
        "transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false, "vocab_size": 152064})"},
      {"qwen3-8b", R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
        "initializer_range": 0.02, "intermediate_size": 12288, "max_position_embeddings": 40960,
        "max_window_layers": 36, "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
        "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})"},
      {"mistral-nemo", R"({"architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
        "eos_token_id": 2, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02,
        "intermediate_size": 14336, "max_position_embeddings": 1024000, "model_type": "mistral",
        "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
        "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 131072})"}};
  for (const auto& [name, text] : configs) {
    SCOPED_TRACE(name);
    test::write_text(dir.file(name + ".json"), text);
    testing::internal::CaptureStderr();
    const ModelConfig m = model_config_from_hf(dir.file(name + ".json"), ModelConfig{});
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
    EXPECT_GT(m.n_params(), 1e8);
  }
  test::write_text(dir.file("interleaved.json"), R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "rope_interleaved": true})");
  EXPECT_NE(test::error_of([&] { model_config_from_hf(dir.file("interleaved.json"), ModelConfig{}); }).find("rope_interleaved"),
            std::string::npos);
}

// What changes the math and is not implemented is refused by name; what is unknown is named in
// one warning line (once per file and process).
TEST(HfConfig, RefusesUnimplementedMathAndNamesUnknownKeys) {
  test::TempDir dir;
  const std::string shape = R"("vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64)";
  auto refused = [&](const std::string& type, const std::string& extra, const std::vector<std::string>& needles) {
    const std::string file = dir.file("r.json");
    test::write_text(file, "{\"model_type\": \"" + type + "\", " + shape + ", " + extra + "}");
    const std::string e = test::error_of([&] { model_config_from_hf(file, ModelConfig{}); });
    EXPECT_NE(e.find(file), std::string::npos) << extra << ": " << e;
    for (const auto& n : needles) EXPECT_NE(e.find(n), std::string::npos) << extra << ": " << e;
  };
  refused("llama", R"("rope_scaling": {"rope_type": "dynamic", "factor": 2.0})", {"dynamic", "llama3", "yarn"});
  refused("llama", R"("rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4})", {"rope_parameters.rope_type", "longrope"});
  refused("llama", R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})", {"low_freq_factor", "missing"});
  refused("llama", R"("rope_scaling": {"rope_type": "linear", "factor": 2.0, "mrope_section": [1, 2]})", {"mrope_section"});
  refused("llama", R"("partial_rotary_factor": 0.5)", {"partial_rotary_factor"});
  refused("qwen3", R"("layer_types": ["full_attention", "sliding_attention"], "sliding_window": 16, "use_sliding_window": true)",
          {"sliding_window 16", "layer 1"});
  refused("qwen2", R"("use_sliding_window": true, "sliding_window": 16, "max_window_layers": 1)", {"sliding_window 16"});
  refused("mistral", R"("sliding_window": 16)", {"sliding_window 16"});
  refused("llama", R"("layer_types": ["full_attention", "chunked_attention"])", {"chunked_attention"});
  refused("llama", R"("attn_logit_softcapping": 50.0)", {"attn_logit_softcapping"});
  refused("llama", R"("quantization_config": {"quant_method": "gptq"})", {"quantization_config"});
  refused("llama", R"("attention_dropout": 0.1)", {"attention_dropout"});
  refused("qwen3", R"("attention_bias": true)", {"attention_bias"});
  refused("gemma2", R"("head_dim": 8)", {"gemma2"});
  refused("llama", R"("head_dim": 7)", {"head_dim"});
  refused("llama", R"("rope_theta": 10000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0})",
          {"rope_parameters.rope_theta", "disagree"});

  // Off values of refused keys and inert keys pass silently; unknown keys are named once.
  const std::string file = dir.file("w.json");
  test::write_text(file, R"({"model_type": "llama", )" + shape + R"(, "final_logit_softcapping": null,
    "use_cache": true, "transformers_version": "5.25.0", "zz_custom": 1, "aa_other": "x", "pretraining_tp": 1})");
  testing::internal::CaptureStderr();
  model_config_from_hf(file, ModelConfig{});
  model_config_from_hf(file, ModelConfig{});
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(file), std::string::npos) << err;
  EXPECT_NE(err.find("aa_other, zz_custom"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;  // one line, once
  EXPECT_EQ(err.find("use_cache"), std::string::npos) << err;
}

TEST(HfConfig, RejectsUnsupportedInputNamingTheFile) {
  test::TempDir dir;
  auto expect_error = [&](const std::string& json, const std::string& needle) {
    test::write_text(dir.file("c.json"), json);
    try {
      model_config_from_hf(dir.file("c.json"), ModelConfig{});
      ADD_FAILURE() << "accepted: " << json;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(dir.file("c.json")), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(R"({"model_type": "gpt2", "vocab_size": 50257})", "unsupported model_type \"gpt2\"");
  expect_error(R"({"model_type": "llama"})", "vocab_size");
  expect_error(R"({"model_type": "llama", "vocab_size": "big", "hidden_size": 8})", "vocab_size");
  expect_error(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 3})", "divisible");
  expect_error("{not json", "invalid JSON");
  EXPECT_THROW(model_config_from_hf(dir.file("missing.json"), ModelConfig{}), UserError);
}

}  // namespace
}  // namespace bcd
