// Memory manager tests: accounting and budgets, the slab pool, the stager (prefetch, swap,
// write-back; host and NVMe homes; I/O errors), and BlockAdamW over NVMe homes vs host homes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <map>
#include <random>

#include "io/fault_engine.h"
#include "memory/accounting.h"
#include "memory/slab_pool.h"
#include "memory/stager.h"
#include "model/llama.h"
#include "optim/block_optimizer.h"
#include "base/error.h"
#include "staging_test_helpers.h"
#include "test_util.h"

namespace bcd {
namespace {

constexpr uint64_t kMiB = 1 << 20;

using test::error_of;
using test::train_small;
using test::Trained;
using test::StagerFixture;
using test::pattern;

// ---- Accounting ----

TEST(Accounting, ChargesReleasesAndKeepsPeaks) {
  MemoryAccounting a;
  a.set_budget(Pool::kCompute, 1000);
  {
    Charge w(&a, Pool::kCompute, static_cast<int>(StateKind::kWorking), 600);
    Charge g(&a, Pool::kCompute, static_cast<int>(StateKind::kGrad), 300);
    EXPECT_EQ(a.usage(Pool::kCompute).total, 900u);
  }
  const PoolUsage u = a.usage(Pool::kCompute);
  EXPECT_EQ(u.total, 0u);
  EXPECT_EQ(u.total_peak, 900u);
  EXPECT_EQ(u.peak[static_cast<int>(StateKind::kWorking)], 600u);
  EXPECT_EQ(a.to_json()["compute"]["peak"], 900u);
}

TEST(Accounting, OverBudgetIsRefusedWithTheNumbers) {
  MemoryAccounting a;
  a.set_budget(Pool::kHost, 2 * kMiB);
  Charge c(&a, Pool::kHost, static_cast<int>(StateKind::kAdamM), kMiB + kMiB / 2);
  const std::string e = error_of([&] { Charge d(&a, Pool::kHost, static_cast<int>(StateKind::kAdamV), kMiB); });
  EXPECT_NE(e.find("host pool would hold"), std::string::npos) << e;
  EXPECT_NE(e.find("budget is 0.002 GiB"), std::string::npos) << e;
  EXPECT_EQ(a.usage(Pool::kHost).total, kMiB + kMiB / 2);  // the refused charge left no trace
  EXPECT_LE(a.usage(Pool::kHost).total_peak, 2 * kMiB);
}

TEST(SlabPool, FixedSlabsAlignedAndCharged) {
  MemoryAccounting a;
  SlabPool p(3, 5000, &a, /*page_lock=*/false);
  EXPECT_FALSE(p.page_locked());  // a CPU run never pins, GPU or not
  EXPECT_EQ(p.slab_bytes(), 8192u);
  EXPECT_EQ(a.usage(Pool::kPinned).now[kUseStaging], 3u * 8192);
  std::vector<int> got;
  for (int i = 0; i < 3; ++i) got.push_back(p.acquire());
  EXPECT_EQ(p.acquire(), -1);
  for (int s : got) EXPECT_EQ(reinterpret_cast<uintptr_t>(p.slab(s)) % 4096, 0u);
  p.release(got[1]);
  EXPECT_EQ(p.acquire(), got[1]);
}

// The pool is anonymous memory (DESIGN.md §7: never a driver's mapping, which has failed
// O_DIRECT), untouched until a slab is used; large AlignedBuffers (host homes) likewise read as
// zero without taking memory until written.
TEST(SlabPool, SlabsAreAnonymousMemoryTouchedOnlyWhenUsed) {
  MemoryAccounting a;
  SlabPool p(2, 8 * kMiB, &a, /*page_lock=*/false);
  EXPECT_EQ(test::mapping_of(p.base()), "");
  EXPECT_EQ(test::resident_pages(p.base(), p.bytes()), 0u) << "the pool was touched at start";
  std::memset(p.slab(1), 7, 4096);
  EXPECT_EQ(test::resident_pages(p.base(), p.bytes()), 1u);
  AlignedBuffer home(64 * kMiB + 1);
  EXPECT_EQ(home.size(), 64 * kMiB + 4096);
  EXPECT_EQ(test::resident_pages(home.data(), home.size()), 0u) << "a home was zero-filled at start";
  EXPECT_EQ(home.data()[12345], 0);
  EXPECT_EQ(home.data()[home.size() - 1], 0);
  AlignedBuffer small(100);  // below the mapping threshold: heap memory, zeroed
  EXPECT_EQ(small.size(), 4096u);
  EXPECT_EQ(small.data()[99], 0);
}

// ---- Compute copies (CPU: a worker thread) ----

// copy_out then copy_in over the same compute memory: the image leaves before the next arrives,
// and fence() hands the compute side both results.
TEST(ComputeCopier, ThreadCopiesInIssueOrderAndFenceWaits) {
  auto c = make_thread_copier();
  EXPECT_FALSE(c->on_cuda());
  const uint64_t n = 24 * kMiB;
  std::vector<char> compute = pattern(n, 1), in = pattern(n, 2), out(n, 0);
  const std::vector<char> old = compute;
  const auto t_out = c->copy_out(out.data(), compute.data(), n);
  const auto t_in = c->copy_in(compute.data(), in.data(), n);
  c->fence();
  EXPECT_TRUE(c->done(t_out) && c->done(t_in));
  EXPECT_TRUE(out == old) << "copy_out must read the image before copy_in overwrites it";
  EXPECT_TRUE(compute == in);
  EXPECT_GT(c->copy_seconds(), 0.0);
  const auto t = c->copy_out(out.data(), in.data(), 4096);
  c->wait(t);
  EXPECT_TRUE(c->done(t));
  // Two switches without a fence between them: the second copy_out reads what copy_in wrote.
  std::vector<char> in2 = pattern(n, 3), out2(n, 0);
  c->copy_in(compute.data(), in2.data(), n);
  const auto t2 = c->copy_out(out2.data(), compute.data(), n);
  c->wait(t2);
  EXPECT_TRUE(out2 == in2);
}

// ---- Stager ----

class StagerHomes : public ::testing::TestWithParam<std::tuple<Tier, int>> {};

// A random visiting sequence: every image that comes back is the one that went home last.
TEST_P(StagerHomes, SwapsReturnWhatWentHome) {
  const auto [home, depth] = GetParam();
  StagerFixture f(5, home, depth);
  Stager st(f.units, f.opts, &f.acct);
  ASSERT_EQ(st.slab_count(), depth + 1);
  uint64_t largest = 0;
  for (const auto& u : f.units) largest = std::max(largest, u.bytes());
  std::vector<char> compute(largest);
  std::map<int, std::vector<char>> truth;  // what each home must give back
  std::mt19937 g(7);
  std::vector<int> seq;
  for (int i = 0; i < 40; ++i) seq.push_back(static_cast<int>(g() % 5));
  int active = -1;
  for (size_t i = 0; i < seq.size(); ++i) {
    const int to = seq[i];
    if (to == active) continue;
    const bool loaded = st.swap(active, to, compute.data());
    st.fence();  // the copies were only enqueued
    EXPECT_EQ(loaded, truth.count(to) == 1) << "visit " << i;
    if (loaded) {
      ASSERT_EQ(std::memcmp(compute.data(), truth[to].data(), f.units[to].bytes()), 0) << "visit " << i;
    }
    // "train": new contents, which must come back next time
    truth[to] = pattern(f.units[to].bytes(), static_cast<uint32_t>(i));
    std::memcpy(compute.data(), truth[to].data(), f.units[to].bytes());
    active = to;
    for (int d = 1; d <= depth && i + d < seq.size(); ++d) st.prefetch(seq[i + d]);
  }
  st.flush();
  for (auto& [u, want] : truth) {
    if (u == active) continue;
    std::vector<char> got(f.units[u].bytes());
    ASSERT_TRUE(st.get(u, got.data()));
    EXPECT_EQ(got, want) << "unit " << u;
  }
  const StagerStats& s = st.stats();
  EXPECT_GT(s.switches, 20u);
  if (home == Tier::kNvme) {
    EXPECT_GT(s.nvme_read_bytes, 0u);
    EXPECT_GT(s.nvme_write_bytes, 0u);
    EXPECT_EQ(s.host_read_bytes, 0u);
  } else {
    EXPECT_EQ(s.nvme_read_bytes + s.nvme_write_bytes, 0u);
    EXPECT_GT(s.host_read_bytes, 0u);
  }
  // the pinned pool is exactly (depth + 1) slabs of the largest image, never more
  const PoolUsage pinned = f.acct.usage(Pool::kPinned);
  EXPECT_EQ(pinned.total_peak, static_cast<uint64_t>(depth + 1) * ((largest + 4095) / 4096 * 4096));
  const PoolUsage home_pool = f.acct.usage(home == Tier::kNvme ? Pool::kNvme : Pool::kHost);
  uint64_t all = 0;
  for (const auto& u : f.units) all += u.bytes();
  EXPECT_EQ(home_pool.total, all);
}

INSTANTIATE_TEST_SUITE_P(Homes, StagerHomes,
                         ::testing::Combine(::testing::Values(Tier::kPinned, Tier::kNvme), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == Tier::kNvme ? "Nvme" : "Host") + "Depth" +
                                  std::to_string(std::get<1>(info.param));
                         });

// A Stager whose NVMe store injects `faults`.
std::unique_ptr<Stager> faulty_stager(StagerFixture& f, std::vector<Fault> faults) {
  auto plan = std::make_shared<FaultPlan>(std::move(faults));
  f.opts.engine_factory = [plan](IoOp, const EngineOptions& eo) {
    return std::make_unique<FaultEngine>(make_io_engine(eo), plan);
  };
  return std::make_unique<Stager>(f.units, f.opts, &f.acct);
}

TEST(StagerFaults, ReadErrorDuringPrefetchSurfacesAndComputeIsUntouched) {
  StagerFixture f(3, Tier::kNvme);
  auto st = faulty_stager(f, {Fault{IoOp::kRead, 1, FaultKind::kEio}});
  std::vector<char> compute(f.units[2].bytes(), 1);
  ASSERT_FALSE(st->swap(-1, 0, compute.data()));
  ASSERT_FALSE(st->swap(0, 1, compute.data()));  // unit 0 goes to NVMe
  st->fence();                                   // its copy out of the compute tier is done
  st->prefetch(0);                               // its first read fails
  ASSERT_GT(st->stats().nvme_read_bytes, 0u) << "the read must be the prefetch's";
  std::vector<char> before = compute;
  const std::string e = error_of([&] { st->swap(1, 0, compute.data()); });
  EXPECT_NE(e.find("unit.u0"), std::string::npos) << e;
  EXPECT_EQ(compute, before) << "no byte of a failed read may reach the compute tier";
}

TEST(StagerFaults, CorruptedWriteIsCaughtByTheChecksum) {
  StagerFixture f(2, Tier::kNvme);
  auto st = faulty_stager(f, {Fault{IoOp::kWrite, 1, FaultKind::kBitFlip, 12345}});
  std::vector<char> compute(f.units[1].bytes(), 3);
  ASSERT_FALSE(st->swap(-1, 0, compute.data()));
  ASSERT_FALSE(st->swap(0, 1, compute.data()));  // unit 0's image is stored with a flipped bit
  std::vector<char> before = compute;
  const std::string e = error_of([&] { st->swap(1, 0, compute.data()); });
  EXPECT_NE(e.find("checksum"), std::string::npos) << e;
  EXPECT_EQ(compute, before);
}

TEST(StagerFaults, WriteBackErrorSurfacesAtFlush) {
  StagerFixture f(2, Tier::kNvme);
  auto st = faulty_stager(f, {Fault{IoOp::kWrite, 1, FaultKind::kEnospc}});
  std::vector<char> compute(f.units[1].bytes(), 5);
  ASSERT_FALSE(st->swap(-1, 0, compute.data()));
  ASSERT_FALSE(st->swap(0, 1, compute.data()));
  const std::string e = error_of([&] { st->flush(); });
  EXPECT_NE(e.find("unit.u0"), std::string::npos) << e;
  // the failed image is never handed out as valid
  const std::string e2 = error_of([&] { st->swap(1, 0, compute.data()); });
  EXPECT_FALSE(e2.empty());
}

TEST(StagerHomes, NvmeWithoutPathsIsAClearError) {
  StagerFixture f(2, Tier::kNvme);
  f.opts.nvme_paths.clear();
  const std::string e = error_of([&] { Stager st(f.units, f.opts, &f.acct); });
  EXPECT_NE(e.find("memory.nvme_paths"), std::string::npos) << e;
}

// ---- BlockAdamW over NVMe homes: bitwise the same as over host homes ----

class NvmeEqualsHost : public ::testing::TestWithParam<std::tuple<bool, std::string, std::string, bool>> {};

TEST_P(NvmeEqualsHost, Bitwise) {
  const auto [bf16, order, blocks, keep] = GetParam();
  test::TempDir dir("bcd-staging");
  const auto dtype = bf16 ? torch::kBFloat16 : torch::kFloat32;
  const Trained a = train_small(dtype, order, blocks, keep, Tier::kPinned, dir.path());
  const Trained b = train_small(dtype, order, blocks, keep, Tier::kNvme, dir.path());
  ASSERT_EQ(a.losses, b.losses);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i) EXPECT_TRUE(torch::equal(a.weights[i], b.weights[i])) << i;
  ASSERT_EQ(a.m.size(), b.m.size());
  for (size_t i = 0; i < a.m.size(); ++i) {
    ASSERT_EQ(a.m[i].defined(), b.m[i].defined()) << i;
    if (a.m[i].defined()) {
      EXPECT_TRUE(torch::equal(a.m[i], b.m[i]) && torch::equal(a.v[i], b.v[i])) << i;
    }
  }
  // the NVMe run really went through NVMe (fp32 with reset moves nothing: masters are the weights)
  if (keep || bf16) {
    EXPECT_GT(b.staging.nvme_read_bytes, 0u);
    EXPECT_GT(a.staging.host_read_bytes, 0u);
  } else {
    EXPECT_EQ(b.staging.nvme_write_bytes, 0u);
  }
  EXPECT_EQ(a.staging.nvme_write_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, NvmeEqualsHost,
    ::testing::Combine(::testing::Bool(), ::testing::Values("random", "ascending"), ::testing::Values("layer", "attn_mlp"),
                       ::testing::Bool()),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) ? "Bf16" : "Fp32") + "_" + std::get<1>(info.param) + "_" +
             std::get<2>(info.param) + (std::get<3>(info.param) ? "_Keep" : "_Reset");
    });

// Moments survive a round trip through NVMe between visits (keep), and are zero after reset.
TEST(BlockAdamWStaging, InactiveStateReadsBackFromItsHome) {
  test::TempDir dir("bcd-staging");
  for (bool keep : {true, false}) {
    const Trained t = train_small(torch::kBFloat16, "ascending", "layer", keep, Tier::kNvme, dir.path());
    int with_moments = 0;
    for (const auto& m : t.m) with_moments += m.defined() ? 1 : 0;
    if (keep) EXPECT_EQ(with_moments, static_cast<int>(t.m.size()));
    else EXPECT_LT(with_moments, static_cast<int>(t.m.size()));
  }
}

}  // namespace
}  // namespace bcd
