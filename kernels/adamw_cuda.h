// Fused AdamW on the GPU: the CUDA twin of adamw_step_cpu (kernels/adamw.h), one launch per
// block segment. Includable from plain C++: no CUDA headers, the stream is forward-declared.
// Defined in the CUDA side (kernels/cuda_side.h); the program calls it through the side's table.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/adamw.h"

struct CUstream_st;  // cudaStream_t is `CUstream_st*` (driver_types.h)

namespace bcd {

// One AdamW update over n elements of device memory, enqueued on `stream` (nullptr: the legacy
// default stream); returns without synchronising. master, m, v: fp32, updated in place. grad:
// fp32, or bfloat16 bit patterns when grad_is_bf16. bf16_out (optional): receives the updated
// master rounded to bfloat16 in the same pass (the working copy of a GPU run, DESIGN.md §1).
// Same arithmetic as adamw_step_cpu, IEEE-rounded operation by operation (no fast-math, no
// contraction), so the two agree bitwise. Uses float4 loads and stores when every buffer allows.
void adamw_step_cuda(float* master, const void* grad, bool grad_is_bf16, float* m, float* v,
                     int64_t n, const AdamWHyper& h, uint16_t* bf16_out, CUstream_st* stream);

// Why the fused AdamW cannot run on CUDA device `device` ("" when it can): e.g. a GPU whose
// architecture the build compiled no kernel image for. Checked before a run puts state there.
std::string adamw_cuda_unsupported_reason(int device);

}  // namespace bcd
