// Aligned buffers, owned descriptors and O_DIRECT-with-fallback opening of data files.
#include "io/direct_io.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "base/error.h"

namespace bcd {

// ---- AlignedBuffer ----

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(align_up(bytes)) {
  if (size_ == 0) return;
  if (size_ >= kMappedFrom) {
    // Fresh anonymous pages read as zero and take memory only when first written: a 7B run's
    // host homes (~72 GB) cost nothing until a unit is first written back.
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<char*>(p);
    return;
  }
  data_ = static_cast<char*>(std::aligned_alloc(kIoAlign, size_));
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, size_);
}

void AlignedBuffer::release() {
  if (!data_) return;
  if (size_ >= kMappedFrom) ::munmap(data_, size_);
  else std::free(data_);
  data_ = nullptr, size_ = 0;
}

AlignedBuffer::~AlignedBuffer() { release(); }

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_, size_ = o.size_;
    o.data_ = nullptr, o.size_ = 0;
  }
  return *this;
}

// ---- Opening data files ----

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

namespace {

// Why O_DIRECT should not even be tried on the filesystem holding `path`, or "" if it should.
std::string memory_filesystem(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct statfs sf {};
  if (::statfs(dir.c_str(), &sf) != 0) return "";  // open() below reports a missing directory
  if (sf.f_type == TMPFS_MAGIC) return "tmpfs keeps files in memory, O_DIRECT has nothing to bypass";
  if (sf.f_type == RAMFS_MAGIC) return "ramfs keeps files in memory, O_DIRECT has nothing to bypass";
  return "";
}

}  // namespace

DataFile open_data_file(const std::string& path, bool want_direct, bool create, bool truncate) {
  int flags = O_RDWR | O_CLOEXEC;
  if (create) flags |= O_CREAT;
  if (truncate) flags |= O_TRUNC;
  DataFile f;
  std::string why_buffered;
  if (want_direct) why_buffered = memory_filesystem(path);
  if (want_direct && why_buffered.empty()) {
    f.fd.reset(::open(path.c_str(), flags | O_DIRECT, 0644));
    if (f.fd) {
      f.direct = true;
      return f;
    }
    if (errno != EINVAL) user_error("open {}: {}", path, errno_text(errno));
    why_buffered = "the filesystem refuses O_DIRECT (" + errno_text(EINVAL) + ")";
  }
  f.fd.reset(::open(path.c_str(), flags, 0644));
  if (!f.fd) user_error("open {}: {}", path, errno_text(errno));
  if (want_direct) fmt::print(stderr, "bcdtrain: warning: {}: {}; using buffered I/O\n", path, why_buffered);
  return f;
}

}  // namespace bcd
