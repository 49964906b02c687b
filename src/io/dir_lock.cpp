// Directory locks by flock(2) on <dir>/.lock.
#include "io/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "base/error.h"
#include "base/files.h"

namespace bcd {

namespace {

// Takes the lock of `fd` (<dir>/.lock), or throws UserError naming the holder (the caller's
// UniqueFd closes it); `exclusive` false takes a shared lock, which only a holder of the exclusive
// one refuses.
void take_lock(int fd, bool exclusive, const std::string& dir, const std::string& path, const std::string& what) {
  if (::flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0) return;
  const int err = errno;
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (err != EWOULDBLOCK) user_error("{}: cannot lock the {} ({})", path, what, std::strerror(err));
  const std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("unknown");
  user_error("{}: the {} is in use by another bcdtrain process (pid {}); wait for it to end or choose another "
             "directory",
             dir, what, pid.substr(0, pid.find_first_of("\n ")));
}

}  // namespace

DirLock::DirLock(const std::string& dir, const std::string& what) {
  const std::string path = dir + "/.lock";
  fd_.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd_) user_error("{}: cannot open the {}'s lock file ({})", path, what, std::strerror(errno));
  take_lock(fd_.get(), true, dir, path, what);
  // The PID is for the message of a refused second process; the lock holds without it.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_.get(), 0) == 0) (void)!::pwrite(fd_.get(), pid.data(), pid.size(), 0);
}

void DirLock::check_free(const std::string& dir, const std::string& what) {
  const std::string path = dir + "/.lock";
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return;  // never locked (or unreadable: the real lock will say)
  take_lock(fd.get(), false, dir, path, what);
  ::flock(fd.get(), LOCK_UN);
}

DirLock::~DirLock() {
  if (fd_) ::flock(fd_.get(), LOCK_UN);
}

}  // namespace bcd
