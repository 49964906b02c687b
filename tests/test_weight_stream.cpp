// WeightStream and HostWeights (memory/weight_stream.h) on their own: every acquire hands out
// the block's own bytes whatever the order of uses, an announced order is prefetched (no miss
// after the first pass, the next pass included), nested uses share a buffer, an invalidated
// block is copied again, and a shared host copy is one memory seen by every mapping.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "memory/weight_stream.h"

namespace bcd {
namespace {

// Blocks 0..n-1; the odd ones (and block 0) resident, the rest streamed with distinct bytes.
struct Fixture {
  explicit Fixture(int n_blocks, int depth, uint64_t block_bytes = 4096) : slot(block_bytes) {
    for (int b = 0; b < n_blocks; ++b) {
      const bool streamed = b > 0 && b % 2 == 0;
      homes.emplace_back(streamed ? block_bytes - 64 * (b % 3) : 0);
      for (size_t i = 0; i < homes.back().size(); ++i) homes.back()[i] = static_cast<char>(b * 31 + i * 7);
    }
    window.resize(depth, std::vector<char>(block_bytes));
    std::vector<const void*> hp;
    std::vector<uint64_t> bytes;
    for (auto& h : homes) hp.push_back(h.empty() ? nullptr : h.data()), bytes.push_back(h.size());
    std::vector<void*> slots;
    for (auto& w : window) slots.push_back(w.data());
    stream = std::make_unique<WeightStream>(hp, bytes, slots, block_bytes, make_thread_copier());
  }
  // acquire -> the bytes must be the home's, then release
  void use(int b) {
    const void* p = stream->acquire(b);
    ASSERT_EQ(std::memcmp(p, homes[b].data(), homes[b].size()), 0) << "block " << b;
    stream->release(b);
  }
  std::vector<int> streamed() const {
    std::vector<int> s;
    for (size_t b = 0; b < homes.size(); ++b)
      if (!homes[b].empty()) s.push_back(static_cast<int>(b));
    return s;
  }
  uint64_t slot;
  std::vector<std::vector<char>> homes, window;
  std::unique_ptr<WeightStream> stream;
};

class WeightStreamDepth : public ::testing::TestWithParam<int> {};

TEST_P(WeightStreamDepth, AnnouncedPassesMissOnlyAtTheStart) {
  Fixture f(14, GetParam());
  // forward up, then a backward recomputing the upper half top down: as LlamaModel announces
  std::vector<int> order;
  for (int b = 1; b < 14; ++b) order.push_back(b);
  for (int b = 13; b >= 7; --b) order.push_back(b);
  for (int pass = 0; pass < 3; ++pass) {
    f.stream->expect(order);
    for (int b : order)
      if (f.stream->streamed(b)) f.use(b);
  }
  // expect() prefetched the first uses; later passes were prefetched by the one before
  EXPECT_EQ(f.stream->stats().misses, 0u);
  uint64_t per_pass = 0;
  for (int b : order)
    if (f.stream->streamed(b)) per_pass += f.homes[b].size();
  // each use copied once at most, plus what a window holding the pass's repeated blocks saves
  EXPECT_LE(f.stream->stats().bytes, 3 * per_pass);
  EXPECT_GT(f.stream->stats().bytes, 0u);
}

TEST_P(WeightStreamDepth, AnyOrderOfUsesGetsTheRightBytes) {
  Fixture f(20, GetParam());
  const std::vector<int> s = f.streamed();
  std::mt19937 rng(7);
  std::vector<int> announced = s;
  for (int round = 0; round < 20; ++round) {
    std::shuffle(announced.begin(), announced.end(), rng);
    f.stream->expect(announced);
    // uses that follow the announcement only in part
    std::vector<int> uses = announced;
    if (round % 2) std::shuffle(uses.begin(), uses.end(), rng);
    uses.resize(uses.size() - round % 3);
    for (int b : uses) f.use(b);
  }
  EXPECT_GT(f.stream->stats().misses, 0u);  // a shuffled order cannot all be on its way
}

INSTANTIATE_TEST_SUITE_P(Window, WeightStreamDepth, ::testing::Values(2, 3, 5),
                         [](const auto& info) { return "depth" + std::to_string(info.param); });

TEST(WeightStream, NestedUsesShareOneBuffer) {
  Fixture f(8, 2);
  f.stream->expect({2, 4, 6, 4});
  void* a = f.stream->acquire(4);
  void* b = f.stream->acquire(4);  // the checkpointed backward holds the block through its recompute
  EXPECT_EQ(a, b);
  EXPECT_TRUE(f.stream->held(4));
  void* c = f.stream->acquire(6);
  EXPECT_NE(c, a);
  EXPECT_EQ(std::memcmp(c, f.homes[6].data(), f.homes[6].size()), 0);
  f.stream->release(6);
  f.stream->release(4);
  EXPECT_TRUE(f.stream->held(4));
  f.stream->release(4);
  EXPECT_FALSE(f.stream->held(4));
  EXPECT_THROW(f.stream->release(4), std::exception);
  EXPECT_THROW(f.stream->acquire(3), std::exception);  // resident: not the stream's
}

TEST(WeightStream, AWindowFullOfHeldBlocksIsAnError) {
  Fixture f(8, 2);
  f.stream->acquire(2);
  f.stream->acquire(4);
  EXPECT_THROW(f.stream->acquire(6), std::exception);
}

TEST(WeightStream, AnInvalidatedBlockIsCopiedAgain) {
  Fixture f(8, 3);
  const std::vector<int> order = {2, 4, 6};
  f.stream->expect(order);
  for (int b : order) f.use(b);
  // block 4 was trained elsewhere and its home rewritten: the window's copy is stale
  for (auto& c : f.homes[4]) c = static_cast<char>(c ^ 0x5a);
  f.stream->invalidate(4);
  f.stream->expect(order);
  for (int b : order) f.use(b);
}

TEST(HostWeights, ASharedCopyIsOneMemoryForEveryMapping) {
  const std::string name = "/bcdtrain-test-" + std::to_string(::getpid());
  HostWeights a = HostWeights::create_shared(name, 100000, false);
  HostWeights b = HostWeights::attach_shared(name, 100000, false);
  ASSERT_NE(a.data(), b.data());
  std::iota(a.data(), a.data() + 100000, 0);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), 100000), 0);
  b.data()[99999] = 42;
  EXPECT_EQ(a.data()[99999], 42);
  a.unlink_name();
  // the name is gone, the mappings stay
  EXPECT_LT(::shm_open(name.c_str(), O_RDWR, 0600), 0);
  EXPECT_EQ(b.data()[99999], 42);
  EXPECT_THROW(HostWeights::attach_shared(name, 100000, false), UserError);
}

TEST(HostWeights, AttachingToASmallerSegmentIsRefused) {
  const std::string name = "/bcdtrain-test-small-" + std::to_string(::getpid());
  HostWeights a = HostWeights::create_shared(name, 4096, false);
  const std::string err = [&] {
    try {
      HostWeights::attach_shared(name, 1 << 20, false);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  a.unlink_name();
  EXPECT_NE(err.find(name), std::string::npos) << err;
}

}  // namespace
}  // namespace bcd
