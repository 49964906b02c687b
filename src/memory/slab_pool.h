// The pinned staging pool: a fixed number of equal slabs, allocated once (DESIGN.md §2: never
// one pinned allocation per tensor). Slabs are 4 KiB aligned and sized in 4 KiB multiples, so
// they are O_DIRECT buffers too. Anonymous memory (mmap), page-locked with cudaHostRegister when
// asked for and a CUDA device is usable (DESIGN.md §7: never cudaHostAlloc, whose mappings have
// failed O_DIRECT with EFAULT); a CPU run never pins memory it does not need pinned, even on a
// machine with a GPU. Not thread-safe: one owner (the stager) hands slabs out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memory/accounting.h"

namespace bcd {

class SlabPool {
 public:
  SlabPool() = default;
  // Charges count * slab_bytes (rounded up to 4 KiB) to the pinned pool of `acct`.
  // `page_lock`: the slabs feed CUDA copies (cudaHostRegister; page_locked() says if it worked,
  // lock_error() why not). UserError when the memory cannot be mapped.
  SlabPool(int count, uint64_t slab_bytes, MemoryAccounting* acct, bool page_lock);
  ~SlabPool();
  SlabPool(const SlabPool&) = delete;
  SlabPool& operator=(const SlabPool&) = delete;

  int count() const { return static_cast<int>(in_use_.size()); }
  uint64_t slab_bytes() const { return slab_bytes_; }
  char* slab(int i) const { return base_ + static_cast<uint64_t>(i) * slab_bytes_; }
  char* base() const { return base_; }
  uint64_t bytes() const { return slab_bytes_ * in_use_.size(); }
  bool page_locked() const { return cuda_; }
  const std::string& lock_error() const { return lock_error_; }

  int acquire();             // a free slab, or -1 when every slab is in use
  void release(int slab);
  int free_count() const;

 private:
  char* base_ = nullptr;
  uint64_t slab_bytes_ = 0;
  bool cuda_ = false;
  std::string lock_error_;
  std::vector<bool> in_use_;
  Charge charge_;
};

}  // namespace bcd
