// Pinned staging slabs.
#include "memory/slab_pool.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

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
  // Anonymous memory, registered with CUDA when asked (never cudaHostAlloc: its mappings belong to
  // the driver's device file, and O_DIRECT / io_uring I/O into them has failed with EFAULT on some
  // kernels). Untouched until used on a CPU run; registration pins (touches) it once, here.
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    user_error("memory: cannot allocate the {:.1f} MiB staging pool ({}); lower memory.prefetch_depth or free host "
               "memory",
               static_cast<double>(total) / (1 << 20), std::strerror(errno));
  base_ = static_cast<char*>(p);
#ifdef BCD_HAVE_CUDA_KERNELS
  if (page_lock) {
    lock_error_ = cuda_host_register(base_, total);
    cuda_ = lock_error_.empty();
  }
#else
  if (page_lock) lock_error_ = "this build has no CUDA kernels";
#endif
}

SlabPool::~SlabPool() {
  if (!base_) return;
#ifdef BCD_HAVE_CUDA_KERNELS
  if (cuda_) cuda_host_unregister(base_);
#endif
  ::munmap(base_, bytes());
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
