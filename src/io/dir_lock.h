// An exclusive lock on a directory, held for the life of the object: <dir>/.lock, flock()ed and
// holding the holder's PID. The kernel drops the lock when the holder exits, however it exits,
// so a crashed run never leaves its directory locked.
#pragma once

#include <string>

#include "base/files.h"

namespace bcd {

class DirLock {
 public:
  // UserError naming the directory and the PID that holds it when another process does;
  // `what` says what the directory is ("run directory").
  DirLock(const std::string& dir, const std::string& what);
  ~DirLock();
  // The same UserError when another process holds `dir`'s lock now, without taking it (and
  // without creating the lock file): for a command that reads a directory before it locks it,
  // so that a busy directory is named as such rather than as the half-written run it holds.
  static void check_free(const std::string& dir, const std::string& what);
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  UniqueFd fd_;
};

}  // namespace bcd
