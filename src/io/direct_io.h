// Primitives for direct (O_DIRECT) file I/O: the 4 KiB alignment rule, an aligned heap buffer,
// an owned file descriptor, and opening a data file with a buffered fallback where O_DIRECT can't work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/files.h"

namespace bcd {

// O_DIRECT wants offsets, lengths and buffer addresses aligned to the logical block size; 4 KiB
// covers every NVMe/SATA drive in use (512 B and 4 KiB sectors) and the page size.
constexpr uint64_t kIoAlign = 4096;

inline uint64_t align_up(uint64_t n, uint64_t a = kIoAlign) { return (n + a - 1) / a * a; }
inline bool is_aligned(uint64_t n, uint64_t a = kIoAlign) { return n % a == 0; }
inline bool is_aligned(const void* p, uint64_t a = kIoAlign) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// Memory aligned to kIoAlign that reads as zero, size rounded up to a multiple of kIoAlign.
// From kMappedFrom bytes on it is an anonymous mapping whose pages are touched (and take memory)
// only when first written: allocating a large buffer costs no time and commits nothing.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr, o.size_ = 0; }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }  // the rounded-up size
  static constexpr size_t kMappedFrom = size_t{1} << 20;

 private:
  void release();
  char* data_ = nullptr;
  size_t size_ = 0;
};

struct DataFile {
  UniqueFd fd;
  bool direct = false;  // opened with O_DIRECT
};

// Opens `path` read-write (created when `create`, truncated when `truncate`). With `want_direct`
// it uses O_DIRECT unless the filesystem is tmpfs/ramfs (files live in memory: O_DIRECT gains
// nothing, and kernels before 6.6 refuse it) or refuses O_DIRECT (EINVAL); then it opens buffered
// and prints one warning line on stderr naming the path and why. UserError naming the path and
// the failed operation when the file can't be opened at all.
DataFile open_data_file(const std::string& path, bool want_direct, bool create, bool truncate);

// strerror() of a positive or negative errno.
std::string errno_text(int err);

}  // namespace bcd
