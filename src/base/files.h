// Files with one rule each: whole small files read into memory, small files written atomically
// and durably, directories replaced whole, and file descriptors owned (every descriptor the
// program opens sits in a UniqueFd).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace bcd {

// The bytes of `path`; UserError naming `what` and the path when it cannot be opened or read.
std::string read_file(const std::string& path, const std::string& what);

// `bytes` into `path`, atomically and durably: written to PATH.tmp-PID beside it, fsync'd,
// renamed over PATH, the directory fsync'd; a reader sees the old file or the whole new one, and
// a crash after the call keeps the new one. The temporary is removed on failure. UserError naming
// `what` and the path when it cannot be written.
void write_file_atomic(const std::string& path, std::string_view bytes, const std::string& what);

// The one loop around write(2) and pread(2): EINTR and short counts retried. write_fully: false
// (errno set) on an error, a write that takes no byte counted as ENOSPC. pread_fully: the bytes
// read, `n` unless the file ends first; -1 (errno set) on an error.
bool write_fully(int fd, const void* data, size_t n);
int64_t pread_fully(int fd, void* data, size_t n, uint64_t offset);

// Every atomic write of the program, whatever writes its bytes (an HDF5 file, a safetensors
// writer, a copy) ends here. temporary_beside: the name to write to, PATH.tmp-PID.
// commit_temporary: `tmp` (written and closed) fsync'd, renamed over `path`, and the rename made
// durable (the directory fsync'd; one that cannot be opened keeps it in cache). UserError naming
// `what` and the path on failure, the temporary removed.
std::string temporary_beside(const std::string& path);
void commit_temporary(const std::string& tmp, const std::string& path, const std::string& what);
// The program's one rename: `from` to `to` (a file or a directory, one filesystem), made durable
// by an fsync of `to`'s directory. 0, or the errno of the rename.
int rename_durably(const std::string& from, const std::string& to);

// A directory written whole or not at all: TARGET.tmp-PID, created here (a leftover of an earlier
// crashed run with this pid removed first) and removed on destruction unless commit() moved it
// into place.
class StagingDir {
 public:
  explicit StagingDir(std::filesystem::path target);
  ~StagingDir();
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

  // Moves the staging directory to the target; an existing target (only with `force`, else a
  // UserError) is renamed aside first and deleted only after the new one is in place, so some
  // complete directory is always there.
  void commit(bool force);

 private:
  std::filesystem::path target_, path_;
  bool committed_ = false;
};

// An owned file descriptor, closed on destruction (close() errors are then ignored: they carry
// no information for a file that was read or fsync'd; close() returns them where they matter).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);
  // Closes now: 0, or -1 with errno set (as ::close); 0 when nothing is open.
  int close();

 private:
  int fd_ = -1;
};

}  // namespace bcd
