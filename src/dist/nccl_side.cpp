// The NCCL process group, built into the CUDA side (kernels/cuda_side.h) only: c10d's
// ProcessGroupNCCL lives in LibTorch's CUDA library, which the program does not link.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <chrono>
#include <cstdint>

#include "kernels/cuda_side.h"

namespace bcd {

namespace {

constexpr bool same_text(const char* a, const char* b) { return *a == *b && (*a == '\0' || same_text(a + 1, b + 1)); }
// dist/process_group.cpp deletes these keys, left by an earlier attempt, under their names.
static_assert(same_text(c10d::kStoreDumpKey, "exception_dump") && same_text(c10d::kStoreErrorSignalKey, "remote_error"),
              "ProcessGroupNCCL's signal keys changed: update kNcclSignalKeys in dist/process_group.cpp");

// A ProcessGroupNCCL over `store` (a c10d::Store*, shared), its collectives bounded by `timeout_ms`
// (the watchdog's): an owned c10d::Backend*. c10's errors propagate to the caller.
void* nccl_backend(void* store, int rank, int size, int64_t timeout_ms) {
  auto s = c10::intrusive_ptr<c10d::Store>::unsafe_reclaim_from_nonowning(static_cast<c10d::Store*>(store));
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = std::chrono::milliseconds(timeout_ms);
  c10::intrusive_ptr<c10d::Backend> pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(s, rank, size, opts);
  return pg.release();
}

}  // namespace

void cuda_side_parts::fill_nccl(CudaSide& t) { t.nccl_backend = &nccl_backend; }

}  // namespace bcd
