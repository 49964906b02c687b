// The model's matrix products. On the CPU in fp32 they go to oneDNN's GEMM where that is faster
// than LibTorch's BLAS (MKL): on AVX-512 CPUs MKL takes its AVX2 path on AMD parts, and oneDNN's
// AVX-512 kernels run the same fp32 products at about twice its FLOP/s. Both round in fp32
// (IEEE products and sums, in another order). Everywhere else (CUDA, bf16, fp64) LibTorch's own
// kernels, as before.
#pragma once

#include <torch/torch.h>

#include "base/config.h"

namespace bcd {

// Which GEMM the model's fp32 CPU products use (train.cpu_matmul), process-wide: auto (oneDNN
// when this LibTorch has it and the CPU has AVX-512, else LibTorch's BLAS), onednn (UserError
// when this LibTorch has no oneDNN GEMM), blas. Set before the first step; products in flight
// keep theirs.
void set_cpu_matmul(CpuMatmul choice);
// Whether fp32 CPU products go to oneDNN now.
bool cpu_matmul_is_onednn();
// What the choice resolved to, for the banner: "onednn" or "blas".
const char* cpu_matmul_name();

// x (..., in) times w (out, in) transposed, plus b (out) when defined: torch's linear, with the
// products above; under autograd its backward uses them too and computes only the gradients
// wanted (a frozen weight costs no weight-gradient product).
torch::Tensor gemm_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b = {});

// a (n, k) times b (k, m), both 2-D (transposed views are read as they are): torch::mm with the
// products above. No autograd.
torch::Tensor gemm_mm(const torch::Tensor& a, const torch::Tensor& b);
// out += a times b (out (n, m), contiguous): addmm_ with the products above. No autograd.
void gemm_addmm(const torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b);

// sum (n, m) fp32 += a (n, k) times b (k, m), a and b in a reduced-precision dtype (bf16, fp16),
// 2-D (transposed views are read as they are). On a GPU one tensor-core product that sums its
// fp32 accumulators straight into `sum` (aten::addmm.dtype): the product is never rounded to the
// working dtype. LibTorch's CPU has no such product: there the working-dtype product, rounded
// once, is added (what autograd's gradient plus an fp32 sum of it computed). No autograd.
void add_product_in_fp32(torch::Tensor sum, const torch::Tensor& a, const torch::Tensor& b);

// x (..., in) times w (out, in) transposed, plus b (out) when defined, as gemm_linear computes it;
// under autograd w's gradient is not returned but added into `w_grad_sum` (fp32, w's shape: its
// block's gradient sum, model/block.h) by add_product_in_fp32 in backward, and autograd gets none
// for w (its accumulator still runs, with no gradient, so hooks on it see w done). x's and b's
// gradients are autograd's, in the working dtype. For a reduced-precision w only.
torch::Tensor linear_into_grad_sum(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                                   const torch::Tensor& w_grad_sum);

}  // namespace bcd
