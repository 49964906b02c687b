// Whole-file reads, atomic writes, owned descriptors (base/files.h).
#include "base/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace bcd {

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) user_error("cannot read {} {} (expected a readable file)", what, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) user_error("error while reading {} {}", what, path);
  return ss.str();
}

bool write_fully(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return false;
    if (w == 0) {
      errno = ENOSPC;
      return false;
    }
    p += w, n -= static_cast<size_t>(w);
  }
  return true;
}

int64_t pread_fully(int fd, void* data, size_t n, uint64_t offset) {
  auto* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, p + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return static_cast<int64_t>(got);
}

std::string temporary_beside(const std::string& path) { return path + ".tmp-" + std::to_string(::getpid()); }

void commit_temporary(const std::string& tmp, const std::string& path, const std::string& what) {
  auto fail = [&](const char* step) {
    const int err = errno;
    std::remove(tmp.c_str());
    user_error("{} {}: cannot {} ({})", what, path, step, std::strerror(err));
  };
  {
    UniqueFd fd(::open(tmp.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) fail("open its temporary file to fsync it");
    if (::fsync(fd.get()) != 0) fail("fsync");
  }
  if (const int err = rename_durably(tmp, path)) {
    errno = err;
    fail("rename the temporary file into place");
  }
}

int rename_durably(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) return errno;
  const size_t slash = to.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : to.substr(0, slash);
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d) ::fsync(d.get());  // the rename's durability; a directory that cannot be opened keeps it in cache
  return 0;
}

void write_file_atomic(const std::string& path, std::string_view bytes, const std::string& what) {
  const std::string tmp = temporary_beside(path);
  auto fail = [&](const char* step) {
    const int err = errno;
    std::remove(tmp.c_str());
    user_error("{} {}: cannot {} ({})", what, path, step, std::strerror(err));
  };
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) fail("create a temporary file beside it");
    if (!write_fully(fd.get(), bytes.data(), bytes.size())) fail("write");
    if (fd.close() != 0) fail("close");
  }
  commit_temporary(tmp, path, what);
}

// ---- StagingDir ----

namespace fs = std::filesystem;

StagingDir::StagingDir(fs::path target)
    : target_(std::move(target)), path_(target_.string() + ".tmp-" + std::to_string(::getpid())) {
  std::error_code ec;
  fs::remove_all(path_, ec);  // a leftover of an earlier crashed run with our pid
  fs::create_directories(path_, ec);
  if (ec) user_error("cannot create directory {}: {}", path_.string(), ec.message());
}

StagingDir::~StagingDir() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
}

void StagingDir::commit(bool force) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(target_))) {
    if (!force) user_error("output directory {} already exists (pass --force to replace it)", target_.string());
    fs::path old = target_.string() + ".old-" + std::to_string(::getpid());
    fs::remove_all(old, ec);
    if (const int err = rename_durably(target_.string(), old.string()))
      user_error("cannot move the existing {} aside: {}", target_.string(), std::strerror(err));
    if (const int err = rename_durably(path_.string(), target_.string())) {
      rename_durably(old.string(), target_.string());
      user_error("cannot move {} into place at {}: {}", path_.string(), target_.string(), std::strerror(err));
    }
    committed_ = true;
    fs::remove_all(old, ec);
    return;
  }
  if (const int err = rename_durably(path_.string(), target_.string()))
    user_error("cannot move {} into place at {}: {}", path_.string(), target_.string(), std::strerror(err));
  committed_ = true;
}

// ---- UniqueFd ----

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int UniqueFd::close() {
  if (fd_ < 0) return 0;
  const int rc = ::close(fd_);
  fd_ = -1;
  return rc;
}

}  // namespace bcd
