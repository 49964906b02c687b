// Errors: always-on internal checks (BCD_CHECK) and user-facing errors (UserError).
// Internal failures abort with file:line; user errors become one stderr line and exit code 2.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace bcd {

// Bad input from the user: config, flags, data, checkpoints. main() prints what() and exits 2.
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& msg) : std::runtime_error(msg) {}
};

// A storage device failed under the run (EIO, ENOSPC, a short transfer, a checksum mismatch of
// data read back): still the user's to fix, and the trainer keeps what it can before stopping.
class IoError : public UserError {
 public:
  explicit IoError(const std::string& msg) : UserError(msg) {}
};

// An internal invariant broke: a bug or an unexpected failure of a system call.
class InternalError : public std::runtime_error {
 public:
  explicit InternalError(const std::string& msg) : std::runtime_error(msg) {}
};

[[noreturn]] void fail(const char* expr, const char* file, int line, const std::string& detail);

template <typename... Args>
[[noreturn]] void user_error(fmt::format_string<Args...> f, Args&&... args) {
  throw UserError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace bcd

// Always on, release builds included (never assert()).
#define BCD_CHECK(cond, ...)                                                         \
  do {                                                                               \
    if (!(cond)) ::bcd::fail(#cond, __FILE__, __LINE__, ::fmt::format("" __VA_ARGS__)); \
  } while (0)

#define BCD_CHECK_STATUS(x, ok, to_str)                                  \
  do {                                                                   \
    auto s_ = (x);                                                       \
    if (s_ != (ok)) ::bcd::fail(#x, __FILE__, __LINE__, to_str(s_));     \
  } while (0)
