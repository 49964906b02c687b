// Normal numbers for weight initialisation, counter-based: element i of a stream is a pure
// function of (key, i), so any slice of a stream can be drawn by any thread in any order, and the
// numbers do not depend on the thread count, the SIMD width or the machine. Philox-4x32-10
// (Salmon et al., SC'11: the generator of cuRAND and of PyTorch's CUDA draws) on the counter i/4
// gives 4 uniform words; Box-Muller turns each pair into two normals. log, sin and cos are
// polynomials evaluated in plain IEEE fp32 operations (no libm, no contraction: see
// CMakeLists.txt), so scalar and vector bodies give the same bits.
#pragma once

#include <cstdint>
#include <vector>

namespace bcd {

// out[j] = sd * N(0, 1) number `first + j` of stream `key`, for j in [0, n). Runs on the
// calling thread (callers spread slices over threads: the result is the same).
void fill_normal(float* out, int64_t n, uint64_t key, uint64_t first, float sd);

// One whole stream to draw: out[0, n) = sd * numbers 0 .. n - 1 of stream `key`.
struct NormalDraw {
  float* out;
  int64_t n;
  uint64_t key;
  float sd;
};
// Every draw, in slices of 1M numbers spread over TBB's threads (the result does not depend on
// how they are spread).
void fill_normals(const std::vector<NormalDraw>& draws);

namespace detail {
// For tests: Philox-4x32-10 of one counter (ctr: 4 words, replaced by the output), and
// fill_normal's scalar body (what every SIMD body must equal bit for bit).
void philox4x32_10(uint32_t ctr[4], const uint32_t key[2]);
void fill_normal_scalar(float* out, int64_t n, uint64_t key, uint64_t first, float sd);
}  // namespace detail

}  // namespace bcd
