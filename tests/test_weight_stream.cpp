// WeightStream and HostWeights (memory/weight_stream.h) on their own: every acquire hands out
// the block's own bytes whatever the order of uses, an announced order is prefetched (no miss
// after the first pass, the next pass included), nested uses share a buffer, an invalidated
// block is copied again, NVMe homes stream through staging buffers and a failed read reaches
// no compute buffer, and a shared host copy is one memory seen by every mapping.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/direct_io.h"
#include "io/fault_engine.h"
#include "memory/compute_copy.h"
#include "memory/weight_stream.h"
#include "test_util.h"
#ifdef BCD_HAVE_CUDA_KERNELS
#include "kernels/host_memory.h"
#endif

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
    std::vector<StreamSource> hp;
    std::vector<uint64_t> bytes;
    for (auto& h : homes) hp.push_back(StreamSource{h.empty() ? nullptr : h.data()}), bytes.push_back(h.size());
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

// The CPU copier, with a record of what each copy went into and what each fence waited for.
class RecordingCopier final : public ComputeCopier {
 public:
  struct Log {
    std::map<const void*, Token> last_into;  // each buffer's latest copy
    std::vector<std::pair<Token, Token>> fences;  // (the token fenced, the latest issued then)
    Token issued = 0;
  };
  explicit RecordingCopier(Log* log) : log_(log) {}
  Token copy_out(void* pinned, const void* compute, uint64_t bytes) override { return note(pinned, c_->copy_out(pinned, compute, bytes)); }
  Token copy_in(void* compute, const void* pinned, uint64_t bytes) override { return note(compute, c_->copy_in(compute, pinned, bytes)); }
  Token zero(void* compute, uint64_t bytes) override { return note(compute, c_->zero(compute, bytes)); }
  bool done(Token t) override { return c_->done(t); }
  void wait(Token t) override { c_->wait(t); }
  void fence() override { fence(log_->issued); }
  void fence(Token t) override {
    log_->fences.emplace_back(t, log_->issued);
    c_->fence(t);
  }
  double copy_seconds() override { return c_->copy_seconds(); }
  double wait_seconds() override { return c_->wait_seconds(); }
  bool on_cuda() const override { return false; }

 private:
  Token note(const void* dst, Token t) {
    log_->last_into[dst] = t;
    log_->issued = t;
    return t;
  }
  Log* log_;
  std::unique_ptr<ComputeCopier> c_ = make_thread_copier();
};

// A use waits for its own window buffer's copy, not for the prefetches issued after it into the
// other buffers (with a window of 3 or more, the stream's latest copy is a later layer's).
TEST(WeightStream, AUseWaitsForItsOwnCopyOnly) {
  const uint64_t bytes = 4096;
  std::vector<std::vector<char>> homes(8, std::vector<char>(bytes)), window(4, std::vector<char>(bytes));
  std::vector<StreamSource> hp;
  for (auto& h : homes) hp.push_back(StreamSource{h.data()});
  std::vector<void*> slots;
  for (auto& w : window) slots.push_back(w.data());
  RecordingCopier::Log log;
  WeightStream stream(hp, std::vector<uint64_t>(homes.size(), bytes), slots, bytes,
                      std::make_unique<RecordingCopier>(&log));
  std::vector<int> order(homes.size());
  std::iota(order.begin(), order.end(), 0);
  stream.expect(order);
  int earlier = 0;  // fences that did not wait for the latest copy: prefetches were ahead
  for (int b : order) {
    const size_t before = log.fences.size();
    const void* p = stream.acquire(b);
    ASSERT_EQ(log.fences.size(), before + 1) << "block " << b;
    const auto [fenced, latest] = log.fences.back();
    EXPECT_EQ(fenced, log.last_into.at(p)) << "block " << b << ": the fence is not its buffer's copy";
    earlier += fenced < latest;
    stream.release(b);
  }
  EXPECT_GT(earlier, 0) << "no use found later copies issued before it: the test shows nothing";
  EXPECT_GE(stream.stats().copy_wait_s, 0.0);
  EXPECT_EQ(stream.stats().acquires, order.size());
}

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

// Blocks 1..n-1 homed on an extent store (O_DIRECT where the filesystem allows), with faults.
struct NvmeFixture {
  NvmeFixture(int n_blocks, std::vector<Fault> faults, uint64_t block_bytes = 3 * 4096 + 512)
      : dir("bcd-wstream"), plan(std::make_shared<FaultPlan>(std::move(faults))) {
    store = std::make_unique<ExtentStore>(
        std::vector<std::string>{dir.path()}, StoreOptions{}, [this](IoOp, const EngineOptions& eo) -> std::unique_ptr<IoEngine> {
          return std::make_unique<FaultEngine>(make_io_engine(eo), plan);
        });
    const uint64_t slot = (block_bytes + 4095) / 4096 * 4096;
    std::vector<StreamSource> src(n_blocks);
    std::vector<uint64_t> bytes(n_blocks, 0);
    AlignedBuffer buf(slot);
    for (int b = 1; b < n_blocks; ++b) {
      for (uint64_t i = 0; i < block_bytes; ++i) buf.data()[i] = static_cast<char>(b * 13 + i * 5);
      homes.emplace_back(buf.data(), buf.data() + block_bytes);
      src[b] = StreamSource{nullptr, store.get(), store->create("w." + std::to_string(b), block_bytes)};
      store->write(src[b].object, buf.data());
      bytes[b] = block_bytes;
    }
    homes.insert(homes.begin(), std::vector<char>());
    for (int s = 0; s < 2; ++s) window.emplace_back(slot, 0), staging.emplace_back(slot);
    std::vector<void*> slots, stage;
    for (int s = 0; s < 2; ++s) slots.push_back(window[s].data()), stage.push_back(staging[s].data());
    stream = std::make_unique<WeightStream>(src, bytes, slots, slot, make_thread_copier(), stage);
  }
  test::TempDir dir;
  std::shared_ptr<FaultPlan> plan;
  std::unique_ptr<ExtentStore> store;
  std::vector<std::vector<char>> homes, window;
  std::vector<AlignedBuffer> staging;
  std::unique_ptr<WeightStream> stream;
};

TEST(WeightStream, NvmeHomesStreamThroughStagingBuffers) {
  NvmeFixture f(6, {});
  std::vector<int> order = {1, 2, 3, 4, 5, 5, 4, 3};
  for (int pass = 0; pass < 2; ++pass) {
    f.stream->expect(order);
    for (int b : order) {
      const void* p = f.stream->acquire(b);
      ASSERT_EQ(std::memcmp(p, f.homes[b].data(), f.homes[b].size()), 0) << "block " << b << " pass " << pass;
      f.stream->release(b);
    }
  }
  EXPECT_EQ(f.stream->stats().misses, 0u);
  EXPECT_EQ(f.stream->stats().nvme_bytes, f.stream->stats().bytes);
}

// The 3rd read fails (EIO), then a later one returns a flipped bit: each use of a block whose read
// failed throws a UserError naming the object, and its compute buffer never sees the bad bytes.
TEST(WeightStream, AFailedNvmeReadStopsTheUseBeforeItsBytesAreUsed) {
  for (const Fault& fault : {Fault{IoOp::kRead, 3, FaultKind::kEio}, Fault{IoOp::kRead, 3, FaultKind::kBitFlip, 77}}) {
    NvmeFixture f(6, {fault});
    f.stream->expect({1, 2, 3, 4, 5});
    int failed = -1;
    std::string what;
    for (int b = 1; b <= 5 && failed < 0; ++b) {
      try {
        const void* p = f.stream->acquire(b);
        ASSERT_EQ(std::memcmp(p, f.homes[b].data(), f.homes[b].size()), 0) << "block " << b;
        f.stream->release(b);
      } catch (const UserError& e) {
        failed = b, what = e.what();
      }
    }
    ASSERT_GT(failed, 0) << to_string(fault.kind) << ": no use failed";
    EXPECT_NE(what.find("w."), std::string::npos) << what;
    // The failed read's bytes went to no compute buffer: each holds nothing yet or a block's exact bytes.
    for (const auto& w : f.window) {
      bool exact = std::all_of(w.begin(), w.end(), [](char c) { return c == 0; });
      for (int b = 1; b <= 5; ++b) exact = exact || std::memcmp(w.data(), f.homes[b].data(), f.homes[b].size()) == 0;
      EXPECT_TRUE(exact) << to_string(fault.kind) << ": a window buffer holds bytes of no block";
    }
    // A later use reads again: the fault was one request, so the block comes back whole.
    f.stream->expect({});
    for (int b = 1; b <= 5; ++b) {
      const void* p = f.stream->acquire(b);
      EXPECT_EQ(std::memcmp(p, f.homes[b].data(), f.homes[b].size()), 0) << "block " << b;
      f.stream->release(b);
    }
  }
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

bool no_cuda_device() {
#ifdef BCD_HAVE_CUDA_KERNELS
  return !cuda_device_usable();
#else
  return true;
#endif
}

// A host copy that cannot be page-locked for a GPU's copies is refused, naming what and why:
// copies from pageable memory are synchronous, and the stream's overlap would be gone without a
// word. (Here no CUDA device is usable, or the build has no CUDA kernels: registration fails.)
TEST(HostWeights, ACopyThatCannotBePageLockedForTheGpuIsRefused) {
  if (!no_cuda_device()) GTEST_SKIP() << "a CUDA device is usable here: registration succeeds";
  for (bool shared : {false, true}) {
    const std::string name = "/bcdtrain-test-lock-" + std::to_string(::getpid());
    const std::string err = test::error_of([&] {
      if (shared) HostWeights::create_shared(name, 1 << 20, true);
      else HostWeights::make_private(1 << 20, true);
    });
    EXPECT_NE(err.find("could not be page-locked"), std::string::npos) << err;
    EXPECT_NE(err.find(shared ? "the shared host copy " + name : "the host copy"), std::string::npos) << err;
    EXPECT_NE(err.find("stream_weights"), std::string::npos) << err;
    ::shm_unlink(name.c_str());
  }
  HostWeights plain = HostWeights::make_private(1 << 20, false);  // a CPU run locks nothing
  EXPECT_NE(plain.data(), nullptr);
}

}  // namespace
}  // namespace bcd
