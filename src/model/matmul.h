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

}  // namespace bcd
