// The fused, chunked head + cross entropy (model/fused_loss.h) against the unfused reference
// (logits whole, then the loss): the loss and every gradient, fp32 to 1e-6 relative and bf16
// within bf16's tolerance, for any chunk size, masked or not, tied or untied; the model's loss
// is this path.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "base/config.h"
#include "data/batch.h"
#include "model/fused_loss.h"
#include "model/llama.h"

namespace bcd {
namespace {

namespace F = torch::nn::functional;

// max |a - b| / max |b|: a relative error that a few tiny entries cannot blow up.
double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

struct Grads {
  torch::Tensor loss, hidden, weight;
};

// The unfused reference: logits (N, V) in the working dtype, cast to fp32, cross entropy.
Grads unfused(const torch::Tensor& h0, const torch::Tensor& w0, const torch::Tensor& y, const torch::Tensor& scale) {
  torch::Tensor h = h0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true);
  const torch::Tensor lf = F::linear(h, w).to(torch::kFloat32);
  const torch::Tensor ce = F::cross_entropy(lf, y, F::CrossEntropyFuncOptions().reduction(torch::kNone));
  torch::Tensor loss = (ce * scale).sum();
  loss.backward();
  return {loss.detach(), h.grad(), w.grad()};
}

Grads fused(const torch::Tensor& h0, const torch::Tensor& w0, const torch::Tensor& y, const torch::Tensor& scale,
            int64_t chunk, bool sink) {
  torch::Tensor h = h0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true);
  torch::Tensor sum = sink ? torch::zeros(w0.sizes(), torch::kFloat32) : torch::Tensor();
  torch::Tensor loss = chunked_linear_cross_entropy(h, w, y, scale, chunk, sum);
  loss.backward();
  if (sink) {
    EXPECT_FALSE(w.grad().defined()) << "the weight's gradient went to the sum, not to autograd";
  }
  return {loss.detach(), h.grad(), sink ? sum : w.grad()};
}

struct Case {
  torch::ScalarType dtype;
  double tol;
};

class FusedLoss : public ::testing::TestWithParam<Case> {};

TEST_P(FusedLoss, EqualsTheUnfusedLossAndGradientsForEveryChunkSize) {
  const auto [dtype, tol] = GetParam();
  torch::manual_seed(5);
  const int64_t n = 37, c = 24, v = 301;
  const torch::Tensor h = torch::randn({n, c}).to(dtype), w = (torch::randn({v, c}) * 0.3).to(dtype);
  const torch::Tensor y = torch::randint(v, {n}, torch::kInt64);
  torch::Tensor scale = (torch::rand({n}) < 0.6).to(torch::kFloat32) / 11.0;  // a mask over a divisor
  const Grads want = unfused(h, w, y, scale);
  for (int64_t chunk : {1, 5, 16, 37, 1000}) {
    for (bool sink : {false, true}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + (sink ? ", sink" : ""));
      const Grads got = fused(h, w, y, scale, chunk, sink);
      EXPECT_EQ(got.loss.scalar_type(), torch::kFloat32);
      EXPECT_LE(rel_err(got.loss, want.loss), tol);
      EXPECT_EQ(got.hidden.scalar_type(), dtype);
      EXPECT_LE(rel_err(got.hidden, want.hidden), tol);
      EXPECT_LE(rel_err(got.weight, want.weight), tol);
    }
  }
  // The values alone, per token, equal the reference's.
  const torch::Tensor ce = F::cross_entropy(F::linear(h, w).to(torch::kFloat32), y,
                                            F::CrossEntropyFuncOptions().reduction(torch::kNone));
  EXPECT_LE(rel_err(chunked_cross_entropy_values(h, w, y, 7), ce), tol);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedLoss, ::testing::Values(Case{torch::kFloat32, 1e-6}, Case{torch::kBFloat16, 2e-2}),
                         [](const auto& i) { return std::string(i.param.dtype == torch::kFloat32 ? "fp32" : "bf16"); });

// bf16 working weights on a GPU: the head's weight gradient is a bf16 tensor-core product summed
// in fp32 (into the block's fp32 sum, or autograd's gradient), within bf16's tolerance of the
// fp32 reference; so is every other output.
TEST(CudaFusedLoss, Bf16WeightGradientOnTheGpuIsSummedInFp32) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device: the head's bf16 weight-gradient product (aten::addmm.dtype) is CUDA's";
  torch::manual_seed(8);
  const int64_t n = 300, c = 64, v = 1000;
  const torch::Tensor h = torch::randn({n, c}).to(torch::kBFloat16), w = (torch::randn({v, c}) * 0.3).to(torch::kBFloat16);
  const torch::Tensor y = torch::randint(v, {n}, torch::kInt64), scale = torch::full({n}, 1.0 / n);
  const Grads want = unfused(h.to(torch::kFloat32), w.to(torch::kFloat32), y, scale);
  for (bool sink : {false, true}) {
    SCOPED_TRACE(sink ? "sink" : "autograd");
    torch::Tensor hc = h.cuda().requires_grad_(true), wc = w.cuda().requires_grad_(true);
    torch::Tensor sum = sink ? torch::zeros({v, c}, torch::TensorOptions().device(torch::kCUDA)) : torch::Tensor();
    chunked_linear_cross_entropy(hc, wc, y.cuda(), scale.cuda(), 77, sum).backward();
    const torch::Tensor gw = sink ? sum : wc.grad();
    EXPECT_EQ(sum.defined() ? sum.scalar_type() : torch::kFloat32, torch::kFloat32);
    EXPECT_LE(rel_err(gw.cpu(), want.weight), 2e-2);
    EXPECT_LE(rel_err(hc.grad().cpu(), want.hidden), 2e-2);
  }
}

// bf16 working weights on a GPU: each chunk's logits are the product written in fp32 from its fp32
// accumulators (aten::mm.dtype), not bf16 logits cast up: the losses match an fp64 reference on
// the same bf16 inputs to fp32 rounding, where bf16 logits (about 10 in size here, rounded by up
// to 2^-9 of that) would miss it by far more.
TEST(CudaFusedLoss, Bf16LogitsOnTheGpuAreFp32Products) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the fp32-output bf16 product (aten::mm.dtype) is CUDA's";
  torch::manual_seed(9);
  const int64_t n = 200, c = 256, v = 500;
  const torch::Tensor h = torch::randn({n, c}).to(torch::kBFloat16), w = (torch::randn({v, c}) * 0.6).to(torch::kBFloat16);
  const torch::Tensor y = torch::randint(v, {n}, torch::kInt64);
  const torch::Tensor ref = chunked_cross_entropy_values(h.to(torch::kFloat64), w.to(torch::kFloat64), y, 64);
  const torch::Tensor got = chunked_cross_entropy_values(h.cuda(), w.cuda(), y.cuda(), 64).cpu().to(torch::kFloat64);
  const double err = (got - ref).abs().max().item<double>();
  EXPECT_LE(err, 1e-4) << "the logits were rounded in bf16";
  const torch::Tensor lb = torch::mm(h.cuda(), w.cuda().t()).to(torch::kFloat64).cpu();  // bf16 logits
  const torch::Tensor rounded = torch::logsumexp(lb, 1) - lb.gather(1, y.unsqueeze(1)).squeeze(1);
  EXPECT_GT((rounded - ref).abs().max().item<double>(), 10 * err) << "the test's logits are too small to tell";
}

TEST(FusedLoss, AFrozenWeightOrHiddenGetsNoGradient) {
  torch::manual_seed(6);
  const torch::Tensor h = torch::randn({9, 8}), w = torch::randn({50, 8});
  const torch::Tensor y = torch::randint(50, {9}, torch::kInt64), scale = torch::full({9}, 1.0 / 9);
  torch::Tensor hr = h.clone().requires_grad_(true);
  chunked_linear_cross_entropy(hr, w, y, scale, 4).backward();
  EXPECT_LE(rel_err(hr.grad(), unfused(h, w, y, scale).hidden), 1e-6);
  torch::Tensor wr = w.clone().requires_grad_(true);
  chunked_linear_cross_entropy(h, wr, y, scale, 4).backward();
  EXPECT_LE(rel_err(wr.grad(), unfused(h, w, y, scale).weight), 1e-6);
}

// ---- The model's loss is the fused path ----

ModelConfig small(bool tied, int64_t chunk) {
  ModelConfig m;
  m.vocab_size = 97;
  m.d_model = 32;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.max_seq_len = 16;
  m.tie_embeddings = tied;
  m.loss_chunk_tokens = chunk;
  return m;
}

// Every block's gradient (what the optimizer reads) after one backward of `loss`.
std::vector<torch::Tensor> block_grads(LlamaModel& m, const std::function<torch::Tensor()>& loss, torch::Tensor* value) {
  m.set_trainable(true);
  m.zero_grad();
  torch::Tensor l = loss();
  l.backward();
  m.accumulate_grads();
  *value = l.detach().to(torch::kFloat32);
  std::vector<torch::Tensor> out;
  for (int b = 0; b < m.n_blocks(); ++b) out.push_back(m.block(b).grad().to(torch::kFloat32).clone());
  return out;
}

struct ModelCase {
  bool tied;
  torch::ScalarType dtype;
  double tol;
};

class FusedModelLoss : public ::testing::TestWithParam<ModelCase> {};

TEST_P(FusedModelLoss, GradientsOfEveryBlockEqualTheUnfusedLoss) {
  const auto [tied, dtype, tol] = GetParam();
  LlamaModel m(small(tied, 5), dtype);
  m.init_weights(3);
  torch::manual_seed(4);
  Batch b;
  b.tokens = torch::randint(97, {3, 11}, torch::kInt64);
  b.mask = (torch::rand({3, 10}) < 0.5).to(torch::kFloat32);
  b.divisor = 7;
  torch::Tensor got_loss, want_loss;
  const std::vector<torch::Tensor> got = block_grads(m, [&] { return m.loss(b); }, &got_loss);
  const std::vector<torch::Tensor> want = block_grads(
      m,
      [&] {
        const torch::Tensor logits = m.forward(b.tokens.narrow(1, 0, 10)).to(torch::kFloat32).reshape({-1, 97});
        const torch::Tensor ce = F::cross_entropy(logits, b.tokens.narrow(1, 1, 10).reshape({-1}),
                                                  F::CrossEntropyFuncOptions().reduction(torch::kNone));
        return (ce * b.mask.reshape({-1})).sum() / b.divisor;
      },
      &want_loss);
  EXPECT_LE(rel_err(got_loss, want_loss), tol);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(rel_err(got[i], want[i]), tol) << m.block(static_cast<int>(i)).name();
  // The trainer's way: the loss over grad_accum, the head weight's gradient straight into its
  // block's fp32 sum during the forward pass.
  torch::Tensor sunk_loss;
  const std::vector<torch::Tensor> sunk =
      block_grads(m, [&] { return m.loss(b, 0, {}, LlamaModel::LossOptions{0.5, true}); }, &sunk_loss);
  EXPECT_LE(rel_err(sunk_loss * 2, got_loss), tol);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(rel_err(sunk[i] * 2, got[i]), tol) << m.block(static_cast<int>(i)).name();
  // Chunk sizes change nothing but the order of the sums.
  for (int64_t chunk : {1, 30, 0}) {
    LlamaModel other(small(tied, chunk), dtype);
    other.init_weights(3);
    torch::Tensor loss;
    const std::vector<torch::Tensor> g = block_grads(other, [&] { return other.loss(b); }, &loss);
    EXPECT_LE(rel_err(loss, got_loss), tol) << "chunk " << chunk;
    for (size_t i = 0; i < g.size(); ++i) EXPECT_LE(rel_err(g[i], got[i]), tol) << "chunk " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, FusedModelLoss,
                         ::testing::Values(ModelCase{false, torch::kFloat32, 1e-5}, ModelCase{true, torch::kFloat32, 1e-5},
                                           ModelCase{false, torch::kBFloat16, 3e-2},
                                           ModelCase{true, torch::kBFloat16, 3e-2}),
                         [](const auto& i) {
                           return std::string(i.param.tied ? "tied_" : "untied_") +
                                  (i.param.dtype == torch::kFloat32 ? "fp32" : "bf16");
                         });

TEST(FusedModelLoss, TheChunkIsTheConfigsOrFitsTheBudget) {
  ModelConfig m = small(false, 0);
  m.vocab_size = 128256;
  EXPECT_EQ(m.loss_chunk(4096, 2), (int64_t{256} << 20) / (128256 * 10));  // 209 tokens of bf16
  EXPECT_EQ(m.loss_chunk(100, 2), 100);                                     // never more than the batch
  m.vocab_size = 1 << 30;
  EXPECT_EQ(m.loss_chunk(4096, 4), 16);  // at least 16
  m.loss_chunk_tokens = 64;
  EXPECT_EQ(m.loss_chunk(4096, 4), 64);
  EXPECT_EQ(m.loss_chunk(10, 4), 10);
}

}  // namespace
}  // namespace bcd
