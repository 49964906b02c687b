// Counter-based normal numbers (kernels/random_normal.h): Philox-4x32-10 (AVX-512, AVX2 or
// scalar: integer words, the same on all) and Box-Muller in plain fp32 arithmetic, 16 counters at
// a time in loops the compiler vectorizes, one body per ISA (target_clones); built with
// -ffp-contract=off and -fno-math-errno (CMakeLists.txt) so every body rounds alike.
#include "kernels/random_normal.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#define BCD_RANDOM_X86 1
#define BCD_TARGET_AVX512 __attribute__((target("avx512f")))
#define BCD_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define BCD_RANDOM_X86 0
#endif

namespace bcd {

namespace detail {

// Philox-4x32-10's constants (Random123: philox.h).
constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;
constexpr int kLanes = 16;  // counters per batch: one AVX-512 register of each word

inline uint32_t as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ln(u) for u in (0, 1] (never subnormal here: u >= 2^-24). u = 2^e m, m in [sqrt(1/2), sqrt(2));
// ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172: the series to s^9 is within 4e-10.
inline float log_unit(float u) {
  const uint32_t bits = as_uint(u);
  int32_t e = static_cast<int32_t>(bits >> 23) - 127;
  float m = as_float((bits & 0x007FFFFFu) | 0x3F800000u);  // [1, 2)
  const bool big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  e += big ? 1 : 0;
  const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  const float p = s * (2.0f + s2 * (0.666666667f + s2 * (0.4f + s2 * (0.285714286f + s2 * 0.222222222f))));
  const float ef = static_cast<float>(e);
  return ef * 0.693145752f + (p + ef * 1.42860677e-6f);  // ln 2 = 0.693145752 + 1.42860677e-6
}

// (cos, sin) of 2 pi u, from t = 4u in [0, 4): the nearest quadrant q and x = (t - q) pi/2 in
// about [-pi/4, pi/4], where Taylor to x^9 (sin) and x^10 (cos) is within 2e-9.
inline void cos_sin_turn(float t, float* c_out, float* s_out) {
  const int32_t q = static_cast<int32_t>(t + 0.5f);
  const float x = (t - static_cast<float>(q)) * 1.57079633f, x2 = x * x;
  const float s = x * (1.0f + x2 * (-0.166666667f + x2 * (8.33333333e-3f + x2 * (-1.98412698e-4f + x2 * 2.75573192e-6f))));
  const float c = 1.0f + x2 * (-0.5f + x2 * (4.16666667e-2f + x2 * (-1.38888889e-3f + x2 * (2.48015873e-5f +
                                                                                         x2 * -2.75573192e-7f))));
  const int32_t m = q & 3;  // rotate (c, s) by q quarter turns
  const float cc = (m & 1) ? s : c, ss = (m & 1) ? c : s;
  *c_out = (m == 1 || m == 2) ? -cc : cc;
  *s_out = m >= 2 ? -ss : ss;
}

// Two normals from two uniform words: u1 in (0, 1] from a's top 24 bits, the angle from b's.
inline void box_muller(uint32_t a, uint32_t b, float* z0, float* z1) {
  const float u1 = static_cast<float>((a >> 8) + 1u) * 5.96046448e-8f;  // 2^-24
  const float t = static_cast<float>(b >> 8) * 2.38418579e-7f;          // 4 * 2^-24
  const float r = __builtin_sqrtf(-2.0f * log_unit(u1));
  float c, s;
  cos_sin_turn(t, &c, &s);
  *z0 = r * c;
  *z1 = r * s;
}

// ---- Philox on kLanes counters at once (c0..c3: the words of each counter, in and out) ----

inline void philox_scalar(uint32_t* c0, uint32_t* c1, uint32_t* c2, uint32_t* c3, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    for (int j = 0; j < kLanes; ++j) {
      const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c0[j], p1 = static_cast<uint64_t>(kPhiloxM1) * c2[j];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[j] ^ k0, n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[j] ^ k1;
      c1[j] = static_cast<uint32_t>(p1), c3[j] = static_cast<uint32_t>(p0);
      c0[j] = n0, c2[j] = n2;
    }
    k0 += kPhiloxW0, k1 += kPhiloxW1;
  }
}

#if BCD_RANDOM_X86
// GCC 12's AVX-512 headers self-initialise their undefined vectors (`__m512i __Y = __Y;`), which
// -Wuninitialized flags once inlined; a false positive, fixed in GCC 13 (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The compilers do not vectorize the 32 x 32 -> 64 products of a round: the even and odd lanes'
// products by hand (vpmuludq), their low and high words blended back into lane order.
BCD_TARGET_AVX512 void philox_avx512(uint32_t* c0, uint32_t* c1, uint32_t* c2, uint32_t* c3, uint32_t k0, uint32_t k1) {
  __m512i x0 = _mm512_loadu_si512(c0), x1 = _mm512_loadu_si512(c1), x2 = _mm512_loadu_si512(c2),
          x3 = _mm512_loadu_si512(c3);
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(kPhiloxM0)), m1 = _mm512_set1_epi32(static_cast<int>(kPhiloxM1));
  const __mmask16 odd = 0xAAAA;
  for (int round = 0; round < 10; ++round) {
    const __m512i e0 = _mm512_mul_epu32(x0, m0), o0 = _mm512_mul_epu32(_mm512_srli_epi64(x0, 32), m0);
    const __m512i e2 = _mm512_mul_epu32(x2, m1), o2 = _mm512_mul_epu32(_mm512_srli_epi64(x2, 32), m1);
    const __m512i lo0 = _mm512_mask_blend_epi32(odd, e0, _mm512_slli_epi64(o0, 32));
    const __m512i hi0 = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(e0, 32), o0);
    const __m512i lo2 = _mm512_mask_blend_epi32(odd, e2, _mm512_slli_epi64(o2, 32));
    const __m512i hi2 = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(e2, 32), o2);
    const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi2, x1), _mm512_set1_epi32(static_cast<int>(k0)));
    const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, x3), _mm512_set1_epi32(static_cast<int>(k1)));
    x0 = n0, x1 = lo2, x2 = n2, x3 = lo0;
    k0 += kPhiloxW0, k1 += kPhiloxW1;
  }
  _mm512_storeu_si512(c0, x0), _mm512_storeu_si512(c1, x1), _mm512_storeu_si512(c2, x2), _mm512_storeu_si512(c3, x3);
}

BCD_TARGET_AVX2 void philox_avx2(uint32_t* c0, uint32_t* c1, uint32_t* c2, uint32_t* c3, uint32_t k0, uint32_t k1) {
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(kPhiloxM0)), m1 = _mm256_set1_epi32(static_cast<int>(kPhiloxM1));
  for (int half = 0; half < kLanes; half += 8) {
    __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c0 + half));
    __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c1 + half));
    __m256i x2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c2 + half));
    __m256i x3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c3 + half));
    uint32_t a = k0, b = k1;
    for (int round = 0; round < 10; ++round) {
      const __m256i e0 = _mm256_mul_epu32(x0, m0), o0 = _mm256_mul_epu32(_mm256_srli_epi64(x0, 32), m0);
      const __m256i e2 = _mm256_mul_epu32(x2, m1), o2 = _mm256_mul_epu32(_mm256_srli_epi64(x2, 32), m1);
      const __m256i lo0 = _mm256_blend_epi32(e0, _mm256_slli_epi64(o0, 32), 0xAA);
      const __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(e0, 32), o0, 0xAA);
      const __m256i lo2 = _mm256_blend_epi32(e2, _mm256_slli_epi64(o2, 32), 0xAA);
      const __m256i hi2 = _mm256_blend_epi32(_mm256_srli_epi64(e2, 32), o2, 0xAA);
      const __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi2, x1), _mm256_set1_epi32(static_cast<int>(a)));
      const __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, x3), _mm256_set1_epi32(static_cast<int>(b)));
      x0 = n0, x1 = lo2, x2 = n2, x3 = lo0;
      a += kPhiloxW0, b += kPhiloxW1;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c0 + half), x0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c1 + half), x1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c2 + half), x2);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c3 + half), x3);
  }
}
#pragma GCC diagnostic pop
#endif

using PhiloxFn = void (*)(uint32_t*, uint32_t*, uint32_t*, uint32_t*, uint32_t, uint32_t);
PhiloxFn pick_philox() {
#if BCD_RANDOM_X86
  if (__builtin_cpu_supports("avx512f")) return philox_avx512;
  if (__builtin_cpu_supports("avx2")) return philox_avx2;
#endif
  return philox_scalar;
}

// Box-Muller on the kLanes counters' words, times sd, counter-major into z (4 per counter).
__attribute__((target_clones("avx512f", "avx2", "default"))) void normals_of(const uint32_t* c0, const uint32_t* c1,
                                                                           const uint32_t* c2, const uint32_t* c3,
                                                                           float sd, float* z) {
  float z0[kLanes], z1[kLanes], z2[kLanes], z3[kLanes];
  for (int j = 0; j < kLanes; ++j) {
    box_muller(c0[j], c1[j], &z0[j], &z1[j]);
    box_muller(c2[j], c3[j], &z2[j], &z3[j]);
  }
  for (int j = 0; j < kLanes; ++j) {
    z[4 * j] = z0[j] * sd, z[4 * j + 1] = z1[j] * sd, z[4 * j + 2] = z2[j] * sd, z[4 * j + 3] = z3[j] * sd;
  }
}

// The 4 normals of counters first_counter .. + kLanes - 1, counter-major, times sd, into z.
void draw_lanes(uint64_t first_counter, uint32_t key0, uint32_t key1, float sd, float* z) {
  static const PhiloxFn philox = pick_philox();
  alignas(64) uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int j = 0; j < kLanes; ++j) {
    const uint64_t ctr = first_counter + static_cast<uint64_t>(j);
    c0[j] = static_cast<uint32_t>(ctr), c1[j] = static_cast<uint32_t>(ctr >> 32), c2[j] = 0, c3[j] = 0;
  }
  philox(c0, c1, c2, c3, key0, key1);
  normals_of(c0, c1, c2, c3, sd, z);
}

void philox4x32_10(uint32_t ctr[4], const uint32_t key[2]) {
  uint32_t c0[kLanes] = {ctr[0]}, c1[kLanes] = {ctr[1]}, c2[kLanes] = {ctr[2]}, c3[kLanes] = {ctr[3]};
  philox_scalar(c0, c1, c2, c3, key[0], key[1]);
  ctr[0] = c0[0], ctr[1] = c1[0], ctr[2] = c2[0], ctr[3] = c3[0];
}

void fill_normal_scalar(float* out, int64_t n, uint64_t key, uint64_t first, float sd) {
  const uint32_t key2[2] = {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)};
  for (int64_t j = 0; j < n; ++j) {
    const uint64_t e = first + static_cast<uint64_t>(j);
    uint32_t ctr[4] = {static_cast<uint32_t>(e / 4), static_cast<uint32_t>((e / 4) >> 32), 0, 0};
    philox4x32_10(ctr, key2);
    float z[4];
    box_muller(ctr[0], ctr[1], &z[0], &z[1]);
    box_muller(ctr[2], ctr[3], &z[2], &z[3]);
    out[j] = z[e % 4] * sd;
  }
}

}  // namespace detail

void fill_normal(float* out, int64_t n, uint64_t key, uint64_t first, float sd) {
  constexpr uint64_t kBatch = 4 * detail::kLanes;  // elements per draw_lanes call
  const uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  float z[kBatch];
  uint64_t at = first;
  const uint64_t end = first + static_cast<uint64_t>(n);
  while (at < end) {
    const uint64_t batch = at / kBatch;  // batches start at multiples of kBatch: any slicing agrees
    const uint64_t lo = at - batch * kBatch, hi = std::min<uint64_t>(kBatch, end - batch * kBatch);
    if (lo == 0 && hi == kBatch) {
      detail::draw_lanes(batch * detail::kLanes, k0, k1, sd, out + (at - first));
    } else {
      detail::draw_lanes(batch * detail::kLanes, k0, k1, sd, z);
      std::memcpy(out + (at - first), z + lo, (hi - lo) * sizeof(float));
    }
    at = batch * kBatch + hi;
  }
}

void fill_normals(const std::vector<NormalDraw>& draws) {
  constexpr int64_t kSlice = int64_t{1} << 20;  // 4 MiB of fp32: a layer's matrices spread over every core
  std::vector<std::pair<size_t, int64_t>> slices;  // (draw, first number)
  for (size_t d = 0; d < draws.size(); ++d)
    for (int64_t at = 0; at < draws[d].n; at += kSlice) slices.emplace_back(d, at);
  tbb::parallel_for(tbb::blocked_range<size_t>(0, slices.size()), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t i = r.begin(); i < r.end(); ++i) {
      const NormalDraw& d = draws[slices[i].first];
      const int64_t at = slices[i].second;
      fill_normal(d.out + at, std::min(kSlice, d.n - at), d.key, static_cast<uint64_t>(at), d.sd);
    }
  });
}

}  // namespace bcd
