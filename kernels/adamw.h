// Fused AdamW over flat fp32 master/grad/m/v buffers on the CPU (SIMD + TBB), one call per
// block segment (DESIGN.md §4 step 4); the CUDA twin is in kernels/adamw_cuda.h.
// Host-only declarations, no torch: nvcc includes this header too.
#pragma once

#include <cstdint>

namespace bcd {

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: p *= 1 - lr * weight_decay before the Adam step
  int64_t step = 1;           // 1-based step count of THIS tensor's state, for bias correction
};

// One AdamW update over n elements: torch.optim.AdamW semantics (decoupled weight decay, bias
// correction; reference: Loshchilov & Hutter 2019, Alg. 2). master, m, v are updated in place,
// grad is read. If bf16_out != nullptr the updated master is also written there as bfloat16
// bit patterns, rounded to nearest even (as c10::BFloat16; every NaN becomes 0x7FC0).
// The arithmetic repeats torch 1.13's CPU kernels operation by operation (bitwise equal to its
// torch::optim::AdamW). Against torch 2.11's, m and v are still bitwise equal; the master
// differs in the last bits in about 5% of elements (within 1e-6 relative: tests/test_kernels.cpp
// records the count), since 2.x orders the update's roundings differently. The results are
// bitwise equal across the ISAs below and the CUDA kernel, which is what exact resume needs.
void adamw_step_cpu(float* master, const float* grad, float* m, float* v, int64_t n,
                    const AdamWHyper& h, uint16_t* bf16_out = nullptr);
// The same with a bfloat16 gradient (raw bit patterns).
void adamw_step_cpu_bf16grad(float* master, const uint16_t* grad, float* m, float* v, int64_t n,
                             const AdamWHyper& h, uint16_t* bf16_out = nullptr);

// ---- ISA selection ----
// The dispatcher picks the widest ISA the CPU (and OS) supports, once; tests and benchmarks
// can force a narrower one to check every code path on one machine.
enum class AdamWIsa { kScalar, kAvx2, kAvx512 };

const char* adamw_isa_name(AdamWIsa isa);  // "scalar", "avx2", "avx512"
bool adamw_cpu_isa_supported(AdamWIsa isa);
// BCD_CHECKs that the ISA is supported. Not thread-safe against concurrent adamw_step_* calls.
void adamw_cpu_force_isa(AdamWIsa isa);
void adamw_cpu_auto_isa();                 // undo adamw_cpu_force_isa
const char* adamw_cpu_isa();               // what the next call will use

}  // namespace bcd
