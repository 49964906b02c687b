// The model's matrix products (model/matmul.h): oneDNN's GEMM against torch's, and a
// reduced-precision layer's weight gradients summed in fp32 by one product (linear_into_grad_sum).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/model_shape.h"
#include "data/batch.h"
#include "model/llama.h"
#include "model/matmul.h"
#include "model_test_helpers.h"

namespace bcd {
namespace {

using test::perturb_all;
using test::random_tokens;
using test::tiny_config;

// Restores the process-wide GEMM choice a test changes.
struct CpuMatmulScope {
  bool was = cpu_matmul_is_onednn();
  explicit CpuMatmulScope(CpuMatmul c) { set_cpu_matmul(c); }
  ~CpuMatmulScope() { set_cpu_matmul(was ? CpuMatmul::kOneDnn : CpuMatmul::kBlas); }
};

// linear through oneDNN gives torch's linear within fp32 rounding, forward and every gradient,
// and computes no gradient nobody wants: a frozen weight gets none, a frozen input none either.
TEST(Matmul, OneDnnLinearMatchesTorchLinearAndItsGradients) {
  const CpuMatmulScope scope(CpuMatmul::kOneDnn);
  ASSERT_TRUE(cpu_matmul_is_onednn());
  torch::manual_seed(3);
  for (const bool x_grad : {true, false})
    for (const bool w_grad : {true, false})
      for (const bool bias : {false, true}) {
        SCOPED_TRACE(fmt::format("x_grad {} w_grad {} bias {}", x_grad, w_grad, bias));
        const torch::Tensor x0 = torch::randn({3, 37, 96}), w0 = torch::randn({80, 96}) * 0.1, b0 = torch::randn({80});
        const torch::Tensor g = torch::randn({3, 37, 80});
        auto run = [&](bool ours) {
          torch::Tensor x = x0.clone().requires_grad_(x_grad), w = w0.clone().requires_grad_(w_grad),
                        b = bias ? b0.clone().requires_grad_(true) : torch::Tensor();
          torch::Tensor y = ours ? gemm_linear(x, w, b) : (bias ? torch::nn::functional::linear(x, w, b)
                                                                : torch::nn::functional::linear(x, w));
          if (x_grad || w_grad || bias) (y * g).sum().backward();
          return std::vector<torch::Tensor>{y.detach(), x.grad(), w.grad(), bias ? b.grad() : torch::Tensor()};
        };
        const auto ours = run(true), ref = run(false);
        for (size_t i = 0; i < ours.size(); ++i) {
          ASSERT_EQ(ours[i].defined(), ref[i].defined()) << "output " << i;
          if (ours[i].defined()) {
            EXPECT_TRUE(torch::allclose(ours[i], ref[i], 1e-5, 1e-4)) << "output " << i;
          }
        }
      }
}

// The head's products: transposed operands read in place, an accumulation into a sum, an empty
// inner dimension.
TEST(Matmul, OneDnnProductsMatchTorch) {
  const CpuMatmulScope scope(CpuMatmul::kOneDnn);
  torch::manual_seed(4);
  const torch::Tensor a = torch::randn({70, 33}), b = torch::randn({50, 33});
  EXPECT_TRUE(torch::allclose(gemm_mm(a, b.t()), torch::mm(a, b.t()), 1e-5, 1e-4));
  const torch::Tensor sum = torch::randn({33, 50}), c = torch::randn({70, 50});
  torch::Tensor acc = sum.clone();
  gemm_addmm(acc, a.t(), c);
  EXPECT_TRUE(torch::allclose(acc, sum + torch::mm(a.t(), c), 1e-5, 1e-4));
  torch::Tensor zero_k = torch::ones({4, 5});
  gemm_addmm(zero_k, torch::empty({4, 0}), torch::empty({0, 5}));
  EXPECT_TRUE(torch::equal(zero_k, torch::ones({4, 5})));
  EXPECT_TRUE(torch::equal(gemm_mm(torch::empty({4, 0}), torch::empty({0, 5})), torch::zeros({4, 5})));
}

// The choice changes rounding only: a model's loss and gradients agree across the two GEMMs.
TEST(Matmul, ModelLossAgreesAcrossGemmChoices) {
  const ModelConfig mc = tiny_config();
  auto loss_and_grad = [&](CpuMatmul c) {
    const CpuMatmulScope scope(c);
    LlamaModel m(mc);
    m.init_weights(5);
    m.set_trainable(true);
    torch::Tensor loss = m.loss(random_tokens(2, 17, mc.vocab_size, 6));
    loss.backward();
    std::vector<torch::Tensor> grads;
    for (Block& b : m.blocks()) grads.push_back(b.grad().clone());
    return std::make_pair(loss.item<double>(), grads);
  };
  const auto [la, ga] = loss_and_grad(CpuMatmul::kOneDnn);
  const auto [lb, gb] = loss_and_grad(CpuMatmul::kBlas);
  EXPECT_NEAR(la, lb, 1e-5 * std::abs(lb));
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_TRUE(torch::allclose(ga[i], gb[i], 1e-4, 1e-5)) << "block " << i;
}

// ---- A reduced-precision layer's matrices sum their gradients in fp32 ----

struct StepGrads {
  std::vector<torch::Tensor> sums;  // each block's grad() after the step's micro-batches
  // each block's autograd buffer after the last backward, whole and per slot (undefined: none)
  std::vector<torch::Tensor> autograd;
  std::vector<std::map<std::string, torch::Tensor>> autograd_of;
};

// One step of `micro` micro-batches the trainer's way: each loss over micro, backpropagated, then
// the autograd buffers into the fp32 sums.
StepGrads step_grads(LlamaModel& m, const torch::Tensor& tokens, int micro, bool into_blocks, int grad_from) {
  m.zero_grad();
  StepGrads out;
  for (int i = 0; i < micro; ++i) {
    Batch b;
    b.tokens = tokens.narrow(0, i * tokens.size(0) / micro, tokens.size(0) / micro);
    m.loss(b, grad_from, {}, LlamaModel::LossOptions{1.0 / micro, into_blocks}).backward();
    if (i == micro - 1)
      for (Block& blk : m.blocks()) {
        out.autograd.push_back(blk.trainable() ? blk.autograd_grad().cpu().clone() : torch::Tensor());
        std::map<std::string, torch::Tensor> of;
        for (const ParamSlot& s : blk.slots()) {
          const torch::Tensor g = blk.autograd_grad_of(s.name);
          of[s.name] = g.defined() ? g.cpu().clone() : g;
        }
        out.autograd_of.push_back(of);
      }
    m.accumulate_grads();
  }
  for (Block& blk : m.blocks()) out.sums.push_back(blk.trainable() ? blk.grad().cpu().clone() : torch::Tensor());
  return out;
}

void set_layers_and_head_trainable(LlamaModel& m, bool on) {
  for (int i = 1; i < m.n_blocks(); ++i) m.block(i).set_trainable(on);
}

// With grad_into_blocks (the trainer's pass) a bf16 layer's matrices add their weight gradients
// into the block's fp32 sum in backward, one product each, with or without activation
// checkpointing and with biases; with direct sums (the trainer's model) autograd's bf16 buffer
// holds the norms' and the biases' gradients only, which it fills as before. On the CPU the
// product is autograd's own, so every layer's sum is bitwise autograd's summed in fp32; on a GPU
// it is the fp32-output tensor-core product, within bf16 rounding of autograd's (whose every
// micro-batch's product was rounded to bf16).
void expect_layer_matrices_summed_in_fp32(torch::Device device) {
  for (bool ckpt : {false, true}) {
    SCOPED_TRACE(ckpt ? "checkpointed" : "not checkpointed");
    ModelConfig cfg = tiny_config();
    cfg.qkv_bias = true;
    cfg.activation_checkpointing = ckpt;
    LlamaModel m(cfg, torch::TensorOptions().dtype(torch::kBFloat16).device(device));
    m.init_weights(61);
    perturb_all(m, 62);
    const torch::Tensor tokens = random_tokens(4, 9, cfg.vocab_size, 63);
    set_layers_and_head_trainable(m, true);
    const StepGrads want = step_grads(m, tokens, 2, /*into_blocks=*/false, 1);
    set_layers_and_head_trainable(m, false);
    m.set_direct_sums(true);
    set_layers_and_head_trainable(m, true);
    const StepGrads got = step_grads(m, tokens, 2, /*into_blocks=*/true, 1);
    for (int i = 1; i < m.n_blocks(); ++i) {
      const Block& b = m.block(i);
      ASSERT_EQ(got.sums[i].scalar_type(), torch::kFloat32);
      int64_t autograd_elems = 0;
      for (const ParamSlot& s : b.slots()) {
        const torch::Tensor& a = got.autograd_of[i].at(s.name);
        if (s.shape.size() == 2) {
          EXPECT_FALSE(a.defined()) << b.name() << "." << s.name << " has an autograd buffer";
          ASSERT_TRUE(want.autograd_of[i].at(s.name).defined()) << b.name() << "." << s.name;
        } else {
          autograd_elems += s.numel();
          ASSERT_TRUE(a.defined()) << b.name() << "." << s.name;
          EXPECT_TRUE(torch::equal(a, want.autograd_of[i].at(s.name))) << b.name() << "." << s.name;
          EXPECT_GT(a.abs().max().item<double>(), 0.0) << b.name() << "." << s.name;
        }
      }
      // The buffer is those slots and nothing else (the whole window before).
      EXPECT_EQ(got.autograd[i].numel(), autograd_elems) << b.name();
      EXPECT_EQ(want.autograd[i].numel(), b.numel()) << b.name();
      if (i == m.n_blocks() - 1) continue;  // the head's product differs without grad_into_blocks
      if (device.is_cpu()) {
        EXPECT_TRUE(torch::equal(got.sums[i], want.sums[i])) << b.name();
      } else {
        const double scale = want.sums[i].abs().max().item<double>();
        EXPECT_LE((got.sums[i] - want.sums[i]).abs().max().item<double>(), 1e-2 * scale) << b.name();
      }
      EXPECT_GT(got.sums[i].abs().max().item<double>(), 0.0) << b.name();
    }
  }
}

// The whole bf16 embedding table, trainable, in the trainer's pass: the lookup adds its rows'
// gradient into the fp32 sum (no bf16 V x C buffer), tied and untied. A step whose tokens are all
// different is bitwise the old path (each row gets one bf16 gradient, exact in either sum);
// repeated tokens are summed in fp32 instead of bf16, so within bf16 rounding of it.
TEST(Matmul, Bf16EmbeddingTableSumsItsGradientInFp32) {
  for (const bool tied : {false, true})
    for (const bool repeats : {false, true}) {
      SCOPED_TRACE(fmt::format("tied {}, {} tokens", tied, repeats ? "repeated" : "distinct"));
      ModelConfig cfg = tiny_config();
      cfg.tie_embeddings = tied;
      LlamaModel m(cfg, torch::TensorOptions().dtype(torch::kBFloat16));
      m.init_weights(66);
      perturb_all(m, 67);
      // 2 micro-batches of 2 x 8 inputs (+1 target each): 34 of the 37 ids, distinct, or random
      const torch::Tensor tokens = repeats ? random_tokens(4, 9, cfg.vocab_size, 68)
                                           : torch::randperm(cfg.vocab_size, torch::kInt64).narrow(0, 0, 36).view({4, 9});
      m.set_trainable(true);
      const StepGrads want = step_grads(m, tokens, 2, /*into_blocks=*/false, 0);
      m.set_trainable(false);
      m.set_direct_sums(true);
      m.set_trainable(true);
      const StepGrads got = step_grads(m, tokens, 2, /*into_blocks=*/true, 0);
      EXPECT_FALSE(got.autograd_of[0].at(slot::kTokEmbeddings).defined()) << "the table has a bf16 buffer";
      EXPECT_EQ(got.autograd[0].numel(), 0);
      const torch::Tensor g = got.sums[0], w = want.sums[0];
      EXPECT_GT(g.abs().max().item<double>(), 0.0);
      if (!repeats && !tied) {
        EXPECT_TRUE(torch::equal(g, w));
      } else {
        // (tied: the head's product also lands in the table's sum, rounded differently before)
        EXPECT_LE((g - w).abs().max().item<double>(), 1e-2 * w.abs().max().item<double>());
      }
    }
}

// With direct sums every gradient pass must be the trainer's: a pass without grad_into_blocks
// gives the matrices gradients autograd's buffer has no room for, and the sum would miss them.
TEST(Matmul, DirectSumsRefuseAPassThatIsNotTheTrainers) {
  LlamaModel m(tiny_config(), torch::TensorOptions().dtype(torch::kBFloat16));
  m.init_weights(64);
  m.set_direct_sums(true);
  set_layers_and_head_trainable(m, true);
  m.loss(random_tokens(2, 9, tiny_config().vocab_size, 65), 1).backward();
  try {
    m.accumulate_grads();
    FAIL() << "a pass without grad_into_blocks was summed";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("grad_into_blocks"), std::string::npos) << e.what();
  }
}

// What each unit's gradient buffers hold in the trainer's model (direct sums, bf16) is what the
// planner counts for it (base/model_shape.h: UnitShape::autograd_elems): the fp32 sum over the
// window and autograd's bf16 buffer over the slots it fills, for whole blocks, attention/MLP
// halves, vocabulary slices, tied and untied, with biases.
TEST(Matmul, DirectSumsHoldWhatThePlannerCounts) {
  for (const bool tied : {false, true})
    for (const int64_t slices : {1, 3})
      for (const BlockKind kind : {BlockKind::kLayer, BlockKind::kAttnMlp}) {
        SCOPED_TRACE(fmt::format("tied {}, {} vocabulary slices, {}", tied, slices,
                                 kind == BlockKind::kLayer ? "layers" : "halves"));
        ModelConfig cfg = tiny_config();
        cfg.tie_embeddings = tied;
        cfg.qkv_bias = true;
        BcdConfig bcd;
        bcd.enabled = true;
        bcd.blocks = kind;
        bcd.vocab_slices = slices;
        LlamaModel m(cfg, torch::TensorOptions().dtype(torch::kBFloat16));
        m.set_direct_sums(true);
        int64_t matrices_left_out = 0;
        for (const UnitShape& u : unit_shapes(cfg, bcd)) {
          int64_t bytes = 0;
          for (const UnitPieceShape& p : u.pieces) m.block(p.block).set_trainable(true, p.part, p.begin, p.end);
          for (const UnitPieceShape& p : u.pieces) bytes += m.block(p.block).grad_bytes();
          EXPECT_EQ(bytes, u.grad_elems * 4 + u.autograd_elems * 2) << u.name;
          matrices_left_out += u.grad_elems - u.autograd_elems;
          for (const UnitPieceShape& p : u.pieces) m.block(p.block).set_trainable(false);
        }
        EXPECT_GT(matrices_left_out, 0);
      }
}

TEST(Matmul, Bf16LayerMatricesSumTheirGradientsInFp32) { expect_layer_matrices_summed_in_fp32(torch::kCPU); }

TEST(CudaMatmul, Bf16LayerMatricesSumTheirGradientsInFp32OnTheGpu) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device: the fp32-output bf16 product (aten::addmm.dtype) is CUDA's";
  expect_layer_matrices_summed_in_fp32(torch::kCUDA);
}

}  // namespace
}  // namespace bcd
