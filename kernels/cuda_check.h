// CUDA_CHECK: the always-on status check (base/error.h) instantiated for the CUDA runtime.
// The caller includes <cuda_runtime_api.h>; this header pulls in no CUDA itself.
#pragma once

#include "base/error.h"

#define CUDA_CHECK(x) BCD_CHECK_STATUS(x, cudaSuccess, cudaGetErrorString)
