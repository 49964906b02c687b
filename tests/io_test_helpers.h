// Shared helpers of the src/io tests: byte patterns, plain pread/pwrite, draining an engine.
#pragma once

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>
#include <tuple>
#include <vector>

#include "base/bytes.h"
#include "io/direct_io.h"
#include "io/extent_store.h"
#include "io/fault_engine.h"
#include "io/io_engine.h"
#include "io/iobench.h"
#include "io/thread_engine.h"
#include "base/error.h"
#include "test_util.h"


namespace bcd::io_test {

using test::TempDir;

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;

// ---- Helpers ----

inline void fill_pattern(void* buf, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  auto* p = static_cast<unsigned char*>(buf);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = static_cast<unsigned char>(x >> 32);
  }
}

// Index of the first differing byte, or -1.
inline int64_t first_mismatch(const void* a, const void* b, size_t n) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (size_t i = 0; i < n; ++i)
    if (x[i] != y[i]) return static_cast<int64_t>(i);
  return -1;
}

inline void pwrite_all(int fd, const void* buf, size_t n, uint64_t off) {
  ASSERT_EQ(::pwrite(fd, buf, n, static_cast<off_t>(off)), static_cast<ssize_t>(n)) << std::strerror(errno);
}

inline void pread_all(int fd, void* buf, size_t n, uint64_t off) {
  ASSERT_EQ(::pread(fd, buf, n, static_cast<off_t>(off)), static_cast<ssize_t>(n)) << std::strerror(errno);
}

// Skips the calling test when io_uring can't be set up here, saying why.
#define SKIP_WITHOUT_URING(kind)                                                   \
  do {                                                                             \
    std::string why_;                                                              \
    if ((kind) == EngineKind::kUring && !uring_available(&why_))                   \
      GTEST_SKIP() << "io_uring unavailable on this machine: " << why_;            \
  } while (0)

// Submits every request, then waits for all; returns completions by tag.
inline std::vector<IoCompletion> run_all(IoEngine& engine, const std::vector<IoRequest>& reqs) {
  std::vector<IoCompletion> by_tag(reqs.size(), IoCompletion{~0ull, 1});
  EXPECT_EQ(engine.submit(reqs.data(), reqs.size()), 0);
  std::vector<IoCompletion> out(reqs.size());
  size_t got = 0;
  while (got < reqs.size()) {
    const size_t n = engine.wait(out.data(), out.size(), 1);
    EXPECT_GT(n, 0u);
    if (n == 0) break;
    for (size_t i = 0; i < n; ++i) by_tag.at(out[i].tag) = out[i];
    got += n;
  }
  EXPECT_EQ(engine.pending(), 0u);
  return by_tag;
}

}  // namespace bcd::io_test
