// CUDA fused AdamW (kernels/adamw_cuda.h) against the CPU kernel, over gradient dtype, bf16
// working copy, size and alignment. Labelled gpu; skips without a CUDA device or CUDA build.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/adamw.h"

#ifdef BCD_HAVE_CUDA_KERNELS
#include <cuda_runtime_api.h>

#include "cuda_test_helpers.h"
#include "kernels/adamw_cuda.h"
#endif

namespace bcd {
namespace {

#ifndef BCD_HAVE_CUDA_KERNELS
TEST(AdamWCuda, Unavailable) {
  GTEST_SKIP() << "built without CUDA kernels (BCD_CUDA=OFF or no nvcc found)";
}
#else

using test::DeviceArray;
using test::no_device_reason;

// |a - r| / max(|r|, rms(r)), as in test_kernels.cpp; returns (max, elements not bitwise equal).
std::pair<double, int64_t> compare(const std::vector<float>& a, const std::vector<float>& r) {
  double sq = 0;
  for (float x : r) sq += static_cast<double>(x) * x;
  const double rms = std::sqrt(sq / static_cast<double>(std::max<size_t>(r.size(), 1)));
  double worst = 0;
  int64_t differing = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (std::memcmp(&a[i], &r[i], sizeof(float)) == 0) continue;
    ++differing;
    const double den = std::max(std::fabs(static_cast<double>(r[i])), rms);
    const double rel = std::fabs(static_cast<double>(a[i]) - r[i]) / (den > 0 ? den : 1.0);
    if (!(rel <= worst)) worst = rel;
  }
  return {worst, differing};
}

// (bf16 gradient, bf16 working copy, n, misalign by one element)
using Case = std::tuple<bool, bool, int64_t, bool>;
class AdamWCudaVsCpu : public ::testing::TestWithParam<Case> {};

// The up-front check the trainer makes before putting state on a GPU: this build has a kernel
// image for the device it runs on (a GPU outside BCD_CUDA_ARCHITECTURES would be named).
TEST(AdamWCuda, KernelImageForThisDevice) {
  const std::string why = no_device_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  EXPECT_EQ(adamw_cuda_unsupported_reason(0), "");
  EXPECT_NE(adamw_cuda_unsupported_reason(1 << 20).find("cannot query CUDA device"), std::string::npos);
}

TEST_P(AdamWCudaVsCpu, FiveStepsMatch) {
  const std::string why = no_device_reason();
  if (!why.empty()) GTEST_SKIP() << "no CUDA device: " << why;
  const auto [bf16_grad, bf16_out, n, misalign] = GetParam();
  const int64_t pad = misalign ? 1 : 0;  // 4-byte offset: float4 loads impossible, scalar path

  torch::manual_seed(31 + n);
  const torch::Tensor init = torch::randn({n});
  std::vector<float> p(init.data_ptr<float>(), init.data_ptr<float>() + n), m(n, 0.0f), v(n, 0.0f);
  std::vector<uint16_t> out(n, 0);
  DeviceArray<float> d_p(n, pad), d_m(n, pad), d_v(n, pad), d_g(n, pad);
  DeviceArray<uint16_t> d_g16(n, pad), d_out(n, pad);
  d_p.upload(p.data());
  d_m.upload(m.data());
  d_v.upload(v.data());

  AdamWHyper h;
  h.beta1 = 0.9f, h.beta2 = 0.95f, h.weight_decay = 0.1f;
  for (int64_t t = 1; t <= 5; ++t) {
    h.lr = 0.01f * static_cast<float>(t);
    h.step = t;
    const torch::Tensor g16 = (torch::randn({n}) * torch::exp(2 * torch::randn({n}))).to(torch::kBFloat16);
    const torch::Tensor g32 = bf16_grad ? g16.to(torch::kFloat32) : torch::randn({n});
    const auto* g16_bits = reinterpret_cast<const uint16_t*>(g16.data_ptr<at::BFloat16>());
    uint16_t* host_out = bf16_out ? out.data() : nullptr;
    if (bf16_grad) {
      adamw_step_cpu_bf16grad(p.data(), g16_bits, m.data(), v.data(), n, h, host_out);
      d_g16.upload(g16_bits);
      adamw_step_cuda(d_p.get(), d_g16.get(), true, d_m.get(), d_v.get(), n, h,
                      bf16_out ? d_out.get() : nullptr, nullptr);
    } else {
      adamw_step_cpu(p.data(), g32.data_ptr<float>(), m.data(), v.data(), n, h, host_out);
      d_g.upload(g32.data_ptr<float>());
      adamw_step_cuda(d_p.get(), d_g.get(), false, d_m.get(), d_v.get(), n, h,
                      bf16_out ? d_out.get() : nullptr, nullptr);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  // Same IEEE operations in the same order (__f*_rn intrinsics, no contraction), so the GPU
  // should agree bitwise; the tolerance is the contract, bitwise equality the expectation.
  const struct {
    const char* name;
    std::vector<float> got;
    const std::vector<float>& want;
  } checks[] = {{"master", d_p.download(), p}, {"m", d_m.download(), m}, {"v", d_v.download(), v}};
  for (const auto& c : checks) {
    const auto [rel, differing] = compare(c.got, c.want);
    ASSERT_LE(rel, 1e-6) << c.name << ": " << differing << " elements differ";
    EXPECT_EQ(differing, 0) << c.name << " not bitwise equal to the CPU kernel (max rel err " << rel << ")";
  }
  if (bf16_out) {
    EXPECT_EQ(d_out.download(), out) << "bf16 working copy";
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto& [bf16_grad, bf16_out, n, misalign] = info.param;
  return std::string(bf16_grad ? "bf16grad" : "fp32grad") + (bf16_out ? "_bf16out" : "") + "_n" +
         std::to_string(n) + (misalign ? "_misaligned" : "");
}

// 4194307 = 2^22 + 3: more float4 groups than a GPU holds resident threads (so the grid-stride
// loop turns over) plus a 3-element tail; 1..5 straddle one float4.
INSTANTIATE_TEST_SUITE_P(Grid, AdamWCudaVsCpu,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values<int64_t>(1, 3, 4, 5, 1000003, 4194307),
                                            ::testing::Bool()),
                         case_name);

#endif  // BCD_HAVE_CUDA_KERNELS

}  // namespace
}  // namespace bcd
