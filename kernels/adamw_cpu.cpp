// CPU fused AdamW: one pass over master/grad/m/v (28 bytes per parameter) instead of torch's
// nine kernels. AVX-512 and AVX2 bodies chosen at run time, a scalar tail and fallback, TBB
// across cores. Built with -ffp-contract=off (see CMakeLists.txt): rounding must follow torch.
#include "kernels/adamw.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BCD_ADAMW_X86 1
#define BCD_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define BCD_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define BCD_ADAMW_X86 0
#endif

#include "kernels/adamw_math.h"
#include "base/error.h"

namespace bcd {
namespace {

using adamw_detail::adamw_one;
using adamw_detail::bf16_to_float;
using adamw_detail::Coeffs;
using adamw_detail::float_to_bf16;

// ---- Scalar path (tails, and CPUs without AVX2) ----
inline float load_grad(const float* g, int64_t i) { return g[i]; }
inline float load_grad(const uint16_t* g, int64_t i) { return bf16_to_float(g[i]); }

template <typename G>
void range_scalar(float* p, const G* g, float* m, float* v, int64_t n, const Coeffs& c,
                  uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    adamw_one(p[i], load_grad(g, i), m[i], v[i], c);
    if (out) out[i] = float_to_bf16(p[i]);
  }
}

#if BCD_ADAMW_X86
// GCC 12's AVX-512 headers self-initialise their undefined vectors (`__m512 __Y = __Y;`), which
// -Wmaybe-uninitialized flags once inlined; a false positive, fixed in GCC 13 (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// ---- AVX-512: 16 lanes, masked tail ----
struct Vec512 {
  __m512 decay, beta1, omb1, beta2, omb2, sqrt_bc2, eps, neg_step;
};

BCD_TARGET_AVX512 inline Vec512 broadcast512(const Coeffs& c) {
  return {_mm512_set1_ps(c.decay),    _mm512_set1_ps(c.beta1), _mm512_set1_ps(c.one_minus_beta1),
          _mm512_set1_ps(c.beta2),    _mm512_set1_ps(c.one_minus_beta2),
          _mm512_set1_ps(c.sqrt_bc2), _mm512_set1_ps(c.eps),   _mm512_set1_ps(c.neg_step)};
}

// Same bias trick as adamw_detail::float_to_bf16, 16 lanes at once. Not VCVTNEPS2BF16
// (AVX512_BF16): it flushes subnormals to zero, torch does not.
BCD_TARGET_AVX512 inline __m256i bf16_rne512(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, lsb), _mm512_set1_epi32(0x7FFF)), 16);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
  return _mm512_cvtepi32_epi16(r);
}

template <typename G, bool kTail>
BCD_TARGET_AVX512 inline __m512 load_grad512(const G* g, __mmask16 k) {
  if constexpr (std::is_same_v<G, uint16_t>) {
    const __m256i h = kTail ? _mm256_maskz_loadu_epi16(k, g)
                            : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return kTail ? _mm512_maskz_loadu_ps(k, g) : _mm512_loadu_ps(g);
  }
}

// Operation order as in adamw_one (kernels/adamw_math.h).
template <typename G, bool kOut, bool kTail>
BCD_TARGET_AVX512 inline void step16(float* p, const G* g, float* m, float* v, uint16_t* out,
                                     const Vec512& c, __mmask16 k) {
  __m512 pv = kTail ? _mm512_maskz_loadu_ps(k, p) : _mm512_loadu_ps(p);
  __m512 mv = kTail ? _mm512_maskz_loadu_ps(k, m) : _mm512_loadu_ps(m);
  __m512 vv = kTail ? _mm512_maskz_loadu_ps(k, v) : _mm512_loadu_ps(v);
  const __m512 gv = load_grad512<G, kTail>(g, k);
  pv = _mm512_mul_ps(pv, c.decay);
  mv = _mm512_fmadd_ps(gv, c.omb1, _mm512_mul_ps(mv, c.beta1));
  vv = _mm512_fmadd_ps(_mm512_mul_ps(c.omb2, gv), gv, _mm512_mul_ps(vv, c.beta2));
  const __m512 d = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vv), c.sqrt_bc2), c.eps);
  pv = _mm512_add_ps(pv, _mm512_div_ps(_mm512_mul_ps(c.neg_step, mv), d));
  if constexpr (kTail) {
    _mm512_mask_storeu_ps(p, k, pv);
    _mm512_mask_storeu_ps(m, k, mv);
    _mm512_mask_storeu_ps(v, k, vv);
    if constexpr (kOut) _mm256_mask_storeu_epi16(out, k, bf16_rne512(pv));
  } else {
    _mm512_storeu_ps(p, pv);
    _mm512_storeu_ps(m, mv);
    _mm512_storeu_ps(v, vv);
    if constexpr (kOut) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bf16_rne512(pv));
  }
}

template <typename G, bool kOut>
BCD_TARGET_AVX512 void range_avx512_impl(float* p, const G* g, float* m, float* v, int64_t n,
                                         const Coeffs& cs, uint16_t* out) {
  const Vec512 c = broadcast512(cs);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    step16<G, kOut, false>(p + i, g + i, m + i, v + i, kOut ? out + i : nullptr, c, 0xFFFF);
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1u);
    step16<G, kOut, true>(p + i, g + i, m + i, v + i, kOut ? out + i : nullptr, c, k);
  }
}

template <typename G>
void range_avx512(float* p, const G* g, float* m, float* v, int64_t n, const Coeffs& c,
                  uint16_t* out) {
  if (out) range_avx512_impl<G, true>(p, g, m, v, n, c, out);
  else range_avx512_impl<G, false>(p, g, m, v, n, c, nullptr);
}

// ---- AVX2 + FMA: 8 lanes, scalar tail ----
struct Vec256 {
  __m256 decay, beta1, omb1, beta2, omb2, sqrt_bc2, eps, neg_step;
};

BCD_TARGET_AVX2 inline Vec256 broadcast256(const Coeffs& c) {
  return {_mm256_set1_ps(c.decay),    _mm256_set1_ps(c.beta1), _mm256_set1_ps(c.one_minus_beta1),
          _mm256_set1_ps(c.beta2),    _mm256_set1_ps(c.one_minus_beta2),
          _mm256_set1_ps(c.sqrt_bc2), _mm256_set1_ps(c.eps),   _mm256_set1_ps(c.neg_step)};
}

BCD_TARGET_AVX2 inline __m128i bf16_rne256(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, lsb), _mm256_set1_epi32(0x7FFF)), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
  // Every lane is <= 0xFFFF, so the unsigned-saturating pack just narrows.
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

template <typename G>
BCD_TARGET_AVX2 inline __m256 load_grad256(const G* g) {
  if constexpr (std::is_same_v<G, uint16_t>) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_loadu_ps(g);
  }
}

template <typename G, bool kOut>
BCD_TARGET_AVX2 void range_avx2_impl(float* p, const G* g, float* m, float* v, int64_t n,
                                     const Coeffs& cs, uint16_t* out) {
  const Vec256 c = broadcast256(cs);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 pv = _mm256_loadu_ps(p + i);
    __m256 mv = _mm256_loadu_ps(m + i);
    __m256 vv = _mm256_loadu_ps(v + i);
    const __m256 gv = load_grad256(g + i);
    pv = _mm256_mul_ps(pv, c.decay);
    mv = _mm256_fmadd_ps(gv, c.omb1, _mm256_mul_ps(mv, c.beta1));
    vv = _mm256_fmadd_ps(_mm256_mul_ps(c.omb2, gv), gv, _mm256_mul_ps(vv, c.beta2));
    const __m256 d = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), c.sqrt_bc2), c.eps);
    pv = _mm256_add_ps(pv, _mm256_div_ps(_mm256_mul_ps(c.neg_step, mv), d));
    _mm256_storeu_ps(p + i, pv);
    _mm256_storeu_ps(m + i, mv);
    _mm256_storeu_ps(v + i, vv);
    if constexpr (kOut) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), bf16_rne256(pv));
  }
  for (; i < n; ++i) {
    adamw_one(p[i], load_grad(g, i), m[i], v[i], cs);
    if constexpr (kOut) out[i] = float_to_bf16(p[i]);
  }
}

template <typename G>
void range_avx2(float* p, const G* g, float* m, float* v, int64_t n, const Coeffs& c,
                uint16_t* out) {
  if (out) range_avx2_impl<G, true>(p, g, m, v, n, c, out);
  else range_avx2_impl<G, false>(p, g, m, v, n, c, nullptr);
}
#pragma GCC diagnostic pop
#endif  // BCD_ADAMW_X86

// ---- ISA selection ----
bool cpu_has(AdamWIsa isa) {
#if BCD_ADAMW_X86
  // libgcc's feature bits also check that the OS saves the ymm/zmm state (XGETBV).
  __builtin_cpu_init();
  switch (isa) {
    case AdamWIsa::kScalar: return true;
    case AdamWIsa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case AdamWIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return isa == AdamWIsa::kScalar;
#endif
}

AdamWIsa best_isa() {
  static const AdamWIsa best = cpu_has(AdamWIsa::kAvx512) ? AdamWIsa::kAvx512
                               : cpu_has(AdamWIsa::kAvx2) ? AdamWIsa::kAvx2
                                                          : AdamWIsa::kScalar;
  return best;
}

std::atomic<int> g_forced_isa{-1};

AdamWIsa current_isa() {
  const int f = g_forced_isa.load(std::memory_order_relaxed);
  return f >= 0 ? static_cast<AdamWIsa>(f) : best_isa();
}

// ---- Driver ----
template <typename G>
using RangeFn = void (*)(float*, const G*, float*, float*, int64_t, const Coeffs&, uint16_t*);

template <typename G>
RangeFn<G> pick_range(AdamWIsa isa) {
#if BCD_ADAMW_X86
  if (isa == AdamWIsa::kAvx512) return &range_avx512<G>;
  if (isa == AdamWIsa::kAvx2) return &range_avx2<G>;
#endif
  (void)isa;
  return &range_scalar<G>;
}

// Work is split in chunks of 16384 elements (64 KiB of each fp32 stream): big enough that a
// task streams through memory at full speed, small enough to balance over cores. The static
// partitioner gives every thread one contiguous run of chunks (friendliest to the hardware
// prefetchers, and the same split on every call). Elementwise, so results never depend on it.
constexpr int64_t kChunk = 16384;

template <typename G>
void adamw_step(float* master, const G* grad, float* m, float* v, int64_t n, const AdamWHyper& h,
                uint16_t* bf16_out) {
  BCD_CHECK(n >= 0, "n = {}", n);
  if (n == 0) return;
  BCD_CHECK(master && grad && m && v, "null buffer for {} elements", n);
  BCD_CHECK(h.step >= 1, "AdamW step count is 1-based, got {}", h.step);
  BCD_CHECK(h.beta1 >= 0 && h.beta1 < 1 && h.beta2 >= 0 && h.beta2 < 1,
            "betas must lie in [0, 1), got ({}, {})", h.beta1, h.beta2);
  const Coeffs c = adamw_detail::make_coeffs(h);
  const RangeFn<G> fn = pick_range<G>(current_isa());
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  auto run_chunks = [&](int64_t c0, int64_t c1) {
    const int64_t b = c0 * kChunk, e = std::min(n, c1 * kChunk);
    fn(master + b, grad + b, m + b, v + b, e - b, c, bf16_out ? bf16_out + b : nullptr);
  };
  if (chunks < 2) {
    run_chunks(0, chunks);  // small segments (norms, biases): not worth waking threads
    return;
  }
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, chunks),
      [&](const tbb::blocked_range<int64_t>& r) { run_chunks(r.begin(), r.end()); },
      tbb::static_partitioner());
}

}  // namespace

void adamw_step_cpu(float* master, const float* grad, float* m, float* v, int64_t n,
                    const AdamWHyper& h, uint16_t* bf16_out) {
  adamw_step<float>(master, grad, m, v, n, h, bf16_out);
}

void adamw_step_cpu_bf16grad(float* master, const uint16_t* grad, float* m, float* v, int64_t n,
                             const AdamWHyper& h, uint16_t* bf16_out) {
  adamw_step<uint16_t>(master, grad, m, v, n, h, bf16_out);
}

const char* adamw_isa_name(AdamWIsa isa) {
  switch (isa) {
    case AdamWIsa::kScalar: return "scalar";
    case AdamWIsa::kAvx2: return "avx2";
    case AdamWIsa::kAvx512: return "avx512";
  }
  return "unknown";
}

bool adamw_cpu_isa_supported(AdamWIsa isa) { return cpu_has(isa); }

void adamw_cpu_force_isa(AdamWIsa isa) {
  BCD_CHECK(adamw_cpu_isa_supported(isa), "this CPU lacks {} (best: {})", adamw_isa_name(isa),
            adamw_isa_name(best_isa()));
  g_forced_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
}

void adamw_cpu_auto_isa() { g_forced_isa.store(-1, std::memory_order_relaxed); }

const char* adamw_cpu_isa() { return adamw_isa_name(current_isa()); }

}  // namespace bcd
