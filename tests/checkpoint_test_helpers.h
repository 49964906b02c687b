// What two checkpoints must agree on for a resume to be exact (test_checkpoint.cpp,
// test_vocab_slices.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "io/checkpoint.h"

namespace bcd::test {

// Every dataset and attribute that defines the state to continue from.
inline void expect_same_state(const std::string& a, const std::string& b, const std::vector<std::string>& units,
                              const std::vector<std::string>& blocks) {
  CheckpointReader ra(a), rb(b);
  EXPECT_EQ(ra.attr_int("/", "step"), rb.attr_int("/", "step"));
  for (const char* k : {"epoch", "position", "step_in_visit", "active"})
    EXPECT_EQ(ra.attr_int("/scheduler", k), rb.attr_int("/scheduler", k)) << k;
  for (const char* k : {"epoch", "cursor", "drawn", "epoch_1", "cursor_1"}) {
    ASSERT_EQ(ra.has_attr("/rank0/loader", k), rb.has_attr("/rank0/loader", k)) << k;
    if (ra.has_attr("/rank0/loader", k)) {
      EXPECT_EQ(ra.attr_int("/rank0/loader", k), rb.attr_int("/rank0/loader", k)) << k;
    }
  }
  auto same = [&](const std::string& ds) {
    ASSERT_EQ(ra.has(ds), rb.has(ds)) << ds;
    if (!ra.has(ds)) return;
    const uint64_t n = ra.length(ds);
    ASSERT_EQ(n, rb.length(ds)) << ds;
    std::vector<float> x(n), y(n);
    ra.floats(ds, x.data(), n);
    rb.floats(ds, y.data(), n);
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), n * sizeof(float))) << ds << " differs";
  };
  for (const auto& blk : blocks) same("/blocks/" + blk);
  int with_state = 0;
  for (const auto& u : units) {
    const std::string g = "/rank0/optimizer/" + u;
    same(g + "/image");
    if (ra.has(g)) {
      ++with_state;
      EXPECT_EQ(ra.attr_int(g, "steps"), rb.attr_int(g, "steps")) << u;
    }
  }
  EXPECT_GE(with_state, 1);  // the active unit at least (with reset, only it)
}

}  // namespace bcd::test
