// CUDA fused AdamW: one grid-stride pass over master/grad/m/v that also writes the bf16
// working copy (DESIGN.md §4 step 4). No torch here: this library is built by nvcc alone.
#include "kernels/adamw_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/adamw_math.h"
#include "kernels/cuda_check.h"

namespace bcd {
namespace {

using adamw_detail::adamw_one;
using adamw_detail::bf16_to_float;
using adamw_detail::Coeffs;
using adamw_detail::float_to_bf16;

constexpr int kThreads = 256;

__device__ __forceinline__ float load_grad(const float* g, int64_t i) { return g[i]; }
__device__ __forceinline__ float load_grad(const uint16_t* g, int64_t i) {
  return bf16_to_float(g[i]);
}

// Four gradients starting at element 4*i: one 16-byte (fp32) or 8-byte (bf16) load.
__device__ __forceinline__ float4 load_grad4(const float* g, int64_t i) {
  return reinterpret_cast<const float4*>(g)[i];
}
__device__ __forceinline__ float4 load_grad4(const uint16_t* g, int64_t i) {
  const uint2 u = reinterpret_cast<const uint2*>(g)[i];  // little-endian: low half first
  return make_float4(bf16_to_float(static_cast<uint16_t>(u.x & 0xFFFFu)),
                     bf16_to_float(static_cast<uint16_t>(u.x >> 16)),
                     bf16_to_float(static_cast<uint16_t>(u.y & 0xFFFFu)),
                     bf16_to_float(static_cast<uint16_t>(u.y >> 16)));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(float_to_bf16(lo)) | (static_cast<uint32_t>(float_to_bf16(hi)) << 16);
}

// kVec: all buffers aligned for float4 (and 8-byte bf16 quads); the n % 4 tail is done by the
// first threads of the grid. Otherwise one element per thread per iteration.
template <typename G, bool kOut, bool kVec>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(float* __restrict__ p, const G* __restrict__ g, float* __restrict__ m,
                 float* __restrict__ v, int64_t n, Coeffs c, uint16_t* __restrict__ out) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if constexpr (kVec) {
    const int64_t n4 = n / 4;
    for (int64_t i = tid; i < n4; i += stride) {
      float4 pv = reinterpret_cast<float4*>(p)[i];
      float4 mv = reinterpret_cast<float4*>(m)[i];
      float4 vv = reinterpret_cast<float4*>(v)[i];
      const float4 gv = load_grad4(g, i);
      adamw_one(pv.x, gv.x, mv.x, vv.x, c);
      adamw_one(pv.y, gv.y, mv.y, vv.y, c);
      adamw_one(pv.z, gv.z, mv.z, vv.z, c);
      adamw_one(pv.w, gv.w, mv.w, vv.w, c);
      reinterpret_cast<float4*>(p)[i] = pv;
      reinterpret_cast<float4*>(m)[i] = mv;
      reinterpret_cast<float4*>(v)[i] = vv;
      if constexpr (kOut)
        reinterpret_cast<uint2*>(out)[i] = make_uint2(pack_bf16x2(pv.x, pv.y), pack_bf16x2(pv.z, pv.w));
    }
    done = n4 * 4;
  }
  for (int64_t i = done + tid; i < n; i += stride) {
    float pv = p[i], mv = m[i], vv = v[i];
    adamw_one(pv, load_grad(g, i), mv, vv, c);
    p[i] = pv;
    m[i] = mv;
    v[i] = vv;
    if constexpr (kOut) out[i] = float_to_bf16(pv);
  }
}

bool aligned(const void* ptr, uintptr_t bytes) {
  return ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

template <typename G, bool kOut>
void launch(float* p, const G* g, float* m, float* v, int64_t n, const Coeffs& c, uint16_t* out,
            cudaStream_t stream) {
  const bool vec = aligned(p, 16) && aligned(m, 16) && aligned(v, 16) &&
                   aligned(g, 4 * sizeof(G)) && aligned(out, 8);
  const int64_t work = vec ? std::max<int64_t>(n / 4, n % 4) : n;
  // A grid-stride loop needs only enough blocks to fill the GPU: 8 blocks of 256 threads is
  // the resident maximum per SM (2048 threads) on sm_80..sm_90.
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t wanted = (work + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wanted, 8LL * sms)));
  if (vec)
    adamw_kernel<G, kOut, true><<<blocks, kThreads, 0, stream>>>(p, g, m, v, n, c, out);
  else
    adamw_kernel<G, kOut, false><<<blocks, kThreads, 0, stream>>>(p, g, m, v, n, c, out);
  CUDA_CHECK(cudaGetLastError());
}

template <typename G>
void launch_grad(float* p, const G* g, float* m, float* v, int64_t n, const Coeffs& c,
                 uint16_t* out, cudaStream_t stream) {
  if (out) launch<G, true>(p, g, m, v, n, c, out, stream);
  else launch<G, false>(p, g, m, v, n, c, nullptr, stream);
}

}  // namespace

void adamw_step_cuda(float* master, const void* grad, bool grad_is_bf16, float* m, float* v,
                     int64_t n, const AdamWHyper& h, uint16_t* bf16_out, CUstream_st* stream) {
  BCD_CHECK(n >= 0, "n = {}", n);
  if (n == 0) return;
  BCD_CHECK(master && grad && m && v, "null buffer for {} elements", n);
  BCD_CHECK(h.step >= 1, "AdamW step count is 1-based, got {}", h.step);
  BCD_CHECK(h.beta1 >= 0 && h.beta1 < 1 && h.beta2 >= 0 && h.beta2 < 1,
            "betas must lie in [0, 1), got ({}, {})", h.beta1, h.beta2);
  const Coeffs c = adamw_detail::make_coeffs(h);
  if (grad_is_bf16)
    launch_grad(master, static_cast<const uint16_t*>(grad), m, v, n, c, bf16_out, stream);
  else
    launch_grad(master, static_cast<const float*>(grad), m, v, n, c, bf16_out, stream);
}

std::string adamw_cuda_unsupported_reason(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    const std::string why = cudaGetErrorString(cudaGetLastError());
    return "cannot query CUDA device " + std::to_string(device) + " (" + why + ")";
  }
  // Switching devices makes a context on the one switched to (CUDA 12+): only when needed.
  int previous = 0;
  cudaGetDevice(&previous);
  if (previous != device) cudaSetDevice(device);
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, adamw_kernel<float, false, true>);
  if (previous != device) cudaSetDevice(previous);
  if (e == cudaSuccess) return "";
  cudaGetLastError();
  return std::string(prop.name) + " is sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
         ", which this build has no kernels for (" + cudaGetErrorString(e) +
         "; rebuild with -DBCD_CUDA_ARCHITECTURES=" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
}

}  // namespace bcd
