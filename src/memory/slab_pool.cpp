// Pinned staging slabs.
#include "memory/slab_pool.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "io/direct_io.h"
#include "base/error.h"
#ifdef BCD_HAVE_CUDA_KERNELS
#include "kernels/host_memory.h"
#endif

namespace bcd {

SlabPool::SlabPool(int count, uint64_t slab_bytes, MemoryAccounting* acct, bool page_lock)
    : slab_bytes_(align_up(slab_bytes)), in_use_(static_cast<size_t>(count), false) {
  BCD_CHECK(count >= 0, "slab count {}", count);
  const uint64_t total = bytes();
  if (total == 0) return;
  charge_ = Charge(acct, Pool::kPinned, kUseStaging, total);
#ifdef BCD_HAVE_CUDA_KERNELS
  if (page_lock) {
    base_ = static_cast<char*>(cuda_pinned_alloc(total));
    cuda_ = base_ != nullptr;
  }
#endif
  if (!base_) {
    base_ = static_cast<char*>(std::aligned_alloc(kIoAlign, total));
    if (!base_) throw std::bad_alloc();
  }
  std::memset(base_, 0, total);  // resident from the start: the pool is sized once, up front
}

SlabPool::~SlabPool() {
#ifdef BCD_HAVE_CUDA_KERNELS
  if (cuda_) {
    cuda_pinned_free(base_);
    return;
  }
#endif
  std::free(base_);
}

int SlabPool::acquire() {
  for (size_t i = 0; i < in_use_.size(); ++i)
    if (!in_use_[i]) {
      in_use_[i] = true;
      return static_cast<int>(i);
    }
  return -1;
}

void SlabPool::release(int slab) {
  BCD_CHECK(slab >= 0 && slab < count() && in_use_[slab], "release of slab {}", slab);
  in_use_[slab] = false;
}

int SlabPool::free_count() const {
  int n = 0;
  for (bool b : in_use_) n += b ? 0 : 1;
  return n;
}

}  // namespace bcd
