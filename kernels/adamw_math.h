// AdamW arithmetic shared by the CPU and CUDA kernels (internal to kernels/): the per-call
// scalars, the one-element update in torch's rounding order, and bfloat16 conversions.
// Every operation is rounded on its own so that CPU (scalar, AVX2, AVX-512) and GPU agree bitwise.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/adamw.h"

#if defined(__CUDACC__)
#define BCD_HD __host__ __device__ __forceinline__
#else
#define BCD_HD inline
#endif

namespace bcd::adamw_detail {

// ---- Per-call scalars ----
// Every Tensor-Scalar op in torch 1.13 casts its double scalar to the tensor's dtype, so the
// scalars are computed in double (as torch::optim::AdamW::step does) and rounded once, here.
struct Coeffs {
  float decay;  // 1 - lr * wd
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float sqrt_bc2;  // sqrt(1 - beta2^t)
  float eps;
  float neg_step;  // -lr / (1 - beta1^t)
};

inline Coeffs make_coeffs(const AdamWHyper& h) {
  const double lr = h.lr, b1 = h.beta1, b2 = h.beta2, t = static_cast<double>(h.step);
  const double bc1 = 1.0 - std::pow(b1, t);
  const double bc2 = 1.0 - std::pow(b2, t);
  Coeffs c;
  c.decay = static_cast<float>(1.0 - lr * static_cast<double>(h.weight_decay));
  c.beta1 = h.beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - b1);
  c.beta2 = h.beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - b2);
  c.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  c.eps = h.eps;
  c.neg_step = static_cast<float>(-(lr / bc1));
  return c;
}

// ---- IEEE operations, one rounding each ----
// nvcc contracts a*b+c into an FMA by default; the __*_rn intrinsics are never contracted.
// Host code relies on -ffp-contract=off (set on kernels/adamw_cpu.cpp in CMakeLists.txt).
#if defined(__CUDA_ARCH__)
BCD_HD float op_mul(float a, float b) { return __fmul_rn(a, b); }
BCD_HD float op_add(float a, float b) { return __fadd_rn(a, b); }
BCD_HD float op_div(float a, float b) { return __fdiv_rn(a, b); }
BCD_HD float op_sqrt(float a) { return __fsqrt_rn(a); }
BCD_HD float op_fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
BCD_HD uint32_t float_bits(float f) { return __float_as_uint(f); }
BCD_HD float bits_float(uint32_t u) { return __uint_as_float(u); }
#else
BCD_HD float op_mul(float a, float b) { return a * b; }
BCD_HD float op_add(float a, float b) { return a + b; }
BCD_HD float op_div(float a, float b) { return a / b; }
BCD_HD float op_sqrt(float a) { return std::sqrt(a); }
BCD_HD float op_fma(float a, float b, float c) { return std::fma(a, b, c); }
BCD_HD uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
BCD_HD float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
#endif

// ---- bfloat16 ----
BCD_HD float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// c10::BFloat16's round_to_nearest_even: add 0x7FFF plus the kept LSB, truncate; NaN -> 0x7FC0.
BCD_HD uint16_t float_to_bf16(float f) {
  if (f != f) return 0x7FC0;
  const uint32_t u = float_bits(f);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// ---- The update ----
// torch::optim::AdamW::step (1.13) on one element, one rounding per torch kernel:
//   p.mul_(1 - lr*wd)
//   m.mul_(b1).add_(g, 1 - b1)            add with alpha is vec::fmadd in ATen's ufunc: one FMA
//   v.mul_(b2).addcmul_(g, g, 1 - b2)     `self + s*t1*t2`, which the compiler contracts to an FMA
//   d = (v.sqrt() / sqrt(bc2)).add_(eps)
//   p.addcdiv_(m, d, -lr/bc1)             `self + s*t1/t2`
// The two FMAs were confirmed against the installed LibTorch (AVX2 and AVX-512 capabilities):
// without them m differs in 56% of elements, by up to 1e-2 relative where m nearly cancels.
// The SIMD bodies in adamw_cpu.cpp repeat this sequence lane-wise.
BCD_HD void adamw_one(float& p, float g, float& m, float& v, const Coeffs& c) {
  const float m1 = op_fma(g, c.one_minus_beta1, op_mul(m, c.beta1));
  const float v1 = op_fma(op_mul(c.one_minus_beta2, g), g, op_mul(v, c.beta2));
  const float d = op_add(op_div(op_sqrt(v1), c.sqrt_bc2), c.eps);
  p = op_add(op_mul(p, c.decay), op_div(op_mul(c.neg_step, m1), d));
  m = m1;
  v = v1;
}

}  // namespace bcd::adamw_detail
