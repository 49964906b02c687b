// Fused CPU AdamW (kernels/adamw.h) against torch::optim::AdamW, in every ISA this CPU has and
// at sizes that hit each SIMD tail; the bf16 gradient path, the bf16 working copy, ISA agreement.
// The copy streams' bookkeeping (kernels/copy_ledger.h) with events finished by hand.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/copy_ledger.h"
#include "kernels/random_normal.h"
#include "base/error.h"

namespace bcd {
namespace {

// ---- Normal numbers for initialisation (kernels/random_normal.h) ----

// Random123's known-answer vectors for Philox-4x32-10 (kat_vectors): counter, key, output.
TEST(RandomNormal, PhiloxGivesTheReferenceVectors) {
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}, {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    uint32_t c[4] = {k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]};
    detail::philox4x32_10(c, k.key);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(c[i], k.out[i]) << "word " << i << " of counter " << std::hex << k.ctr[0];
  }
}

// Element i of a stream is the same whichever slice draws it and whichever body (this CPU's
// SIMD one, or the scalar one) computes it: the init does not depend on threads or machines.
TEST(RandomNormal, AnySliceAndEveryBodyGiveTheSameNumbers) {
  const int64_t n = 5000;
  std::vector<float> whole(n), scalar(n);
  fill_normal(whole.data(), n, 0x1234abcd5678ULL, 0, 0.02f);
  detail::fill_normal_scalar(scalar.data(), n, 0x1234abcd5678ULL, 0, 0.02f);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(whole[i], scalar[i]) << "element " << i;
  for (int64_t first : {1, 3, 63, 64, 65, 1001}) {
    std::vector<float> part(777);
    fill_normal(part.data(), 777, 0x1234abcd5678ULL, static_cast<uint64_t>(first), 0.02f);
    for (int64_t i = 0; i < 777; ++i) ASSERT_EQ(part[i], whole[first + i]) << "slice from " << first << ", element " << i;
  }
  std::vector<float> other(64);
  fill_normal(other.data(), 64, 0x1234abcd5679ULL, 0, 0.02f);
  EXPECT_NE(std::memcmp(other.data(), whole.data(), 64 * sizeof(float)), 0) << "another key, the same numbers";
}

// 2^21 draws: mean, variance, fourth moment and tails of N(0, 1) within a few standard errors.
TEST(RandomNormal, MomentsAndTailsAreThoseOfANormal) {
  const int64_t n = int64_t{1} << 21;
  std::vector<float> z(n);
  fill_normal(z.data(), n, 7, 0, 1.0f);
  double m1 = 0, m2 = 0, m4 = 0;
  int64_t over3 = 0, over4 = 0;
  for (float x : z) {
    m1 += x, m2 += static_cast<double>(x) * x, m4 += static_cast<double>(x) * x * x * x;
    over3 += std::fabs(x) > 3.0f, over4 += std::fabs(x) > 4.0f;
  }
  m1 /= n, m2 /= n, m4 /= n;
  EXPECT_NEAR(m1, 0.0, 5 * std::sqrt(1.0 / n));
  EXPECT_NEAR(m2, 1.0, 5 * std::sqrt(2.0 / n));
  EXPECT_NEAR(m4, 3.0, 5 * std::sqrt(96.0 / n));
  const double p3 = 2.6998e-3, p4 = 6.334e-5;  // P(|Z| > 3), P(|Z| > 4)
  EXPECT_NEAR(static_cast<double>(over3) / n, p3, 5 * std::sqrt(p3 / n));
  EXPECT_NEAR(static_cast<double>(over4) / n, p4, 5 * std::sqrt(p4 / n));
}

const AdamWIsa kIsas[] = {AdamWIsa::kScalar, AdamWIsa::kAvx2, AdamWIsa::kAvx512};
// 1: tail only; 15/16/17: around one AVX-512 vector (and two AVX2 ones); 1000003: 62 TBB
// chunks of 16384 elements, the last one partial, ending in a 3-element SIMD tail.
const int64_t kSizes[] = {1, 15, 16, 17, 1000003};
constexpr double kTol = 1e-6;

// Runs the kernels with one ISA for the life of the object.
class ForcedIsa {
 public:
  explicit ForcedIsa(AdamWIsa isa) { adamw_cpu_force_isa(isa); }
  ~ForcedIsa() { adamw_cpu_auto_isa(); }
  ForcedIsa(const ForcedIsa&) = delete;
  ForcedIsa& operator=(const ForcedIsa&) = delete;
};

// Relative error per element, |a - r| / max(|r|, rms(r)): plain relative error, except that
// elements far below the tensor's scale (m where it nearly cancels) are measured against the
// scale, where one rounding step of the inputs would otherwise read as a huge relative error.
struct Mismatch {
  double max_rel = 0;
  int64_t worst = -1;      // element with max_rel
  int64_t differing = 0;   // elements not bitwise equal
  std::string str(const float* a, const float* r) const {
    if (worst < 0) return "identical";
    return fmt::format("max rel err {:.3g} at [{}] (got {:.9g}, want {:.9g}); {} elements differ",
                       max_rel, worst, a[worst], r[worst], differing);
  }
};

Mismatch compare(const float* a, const float* r, int64_t n) {
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) sq += static_cast<double>(r[i]) * r[i];
  const double rms = std::sqrt(sq / static_cast<double>(std::max<int64_t>(n, 1)));
  Mismatch mm;
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(&a[i], &r[i], sizeof(float)) == 0) continue;
    ++mm.differing;
    const double den = std::max(std::fabs(static_cast<double>(r[i])), rms);
    const double rel = std::fabs(static_cast<double>(a[i]) - r[i]) / (den > 0 ? den : 1.0);
    if (mm.worst < 0 || !(rel <= mm.max_rel)) mm.max_rel = rel, mm.worst = i;  // NaN counts as worst
  }
  return mm;
}

const uint16_t* bf16_bits(const torch::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}

std::string isa_size_name(const ::testing::TestParamInfo<std::tuple<AdamWIsa, int64_t>>& info) {
  return fmt::format("{}_n{}", adamw_isa_name(std::get<0>(info.param)), std::get<1>(info.param));
}

// ---- Against torch::optim::AdamW ----
class AdamWVsTorch : public ::testing::TestWithParam<std::tuple<AdamWIsa, int64_t>> {};

TEST_P(AdamWVsTorch, TwentyStepsWithDecay) {
  const auto [isa, n] = GetParam();
  if (!adamw_cpu_isa_supported(isa)) GTEST_SKIP() << "this CPU lacks " << adamw_isa_name(isa);
  ForcedIsa forced(isa);
  ASSERT_STREQ(adamw_cpu_isa(), adamw_isa_name(isa));

  torch::manual_seed(1234 + n);
  torch::Tensor p_ref = torch::randn({n});
  torch::Tensor master = p_ref.clone(), m = torch::zeros({n}), v = torch::zeros({n});
  AdamWHyper h;
  h.beta1 = 0.9f, h.beta2 = 0.95f, h.eps = 1e-8f, h.weight_decay = 0.1f;
  torch::optim::AdamW opt({p_ref}, torch::optim::AdamWOptions(1e-3).betas({h.beta1, h.beta2})
                                       .eps(h.eps).weight_decay(h.weight_decay));
  for (int64_t t = 1; t <= 20; ++t) {
    // A learning-rate schedule, so nothing may be cached between calls; large enough steps
    // that the update, not the initial value, dominates the master weights' error.
    h.lr = 0.01f * (1.0f + 0.05f * static_cast<float>(t));
    h.step = t;
    static_cast<torch::optim::AdamWOptions&>(opt.param_groups()[0].options()).lr(h.lr);
    // Gradient scales spread over decades, so v spans many binades and eps matters somewhere.
    torch::Tensor g = torch::randn({n}) * torch::exp(2 * torch::randn({n}));
    p_ref.mutable_grad() = g;
    opt.step();
    adamw_step_cpu(master.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(),
                   v.data_ptr<float>(), n, h);

    const auto& st = static_cast<const torch::optim::AdamWParamState&>(*opt.state().begin()->second);
    const struct {
      const char* name;
      const torch::Tensor& got;
      const torch::Tensor& want;
    } checks[] = {{"master", master, p_ref}, {"m", m, st.exp_avg()}, {"v", v, st.exp_avg_sq()}};
    for (const auto& c : checks) {
      const float* a = c.got.data_ptr<float>();
      const float* r = c.want.data_ptr<float>();
      const Mismatch mm = compare(a, r, n);
      ASSERT_LE(mm.max_rel, kTol) << c.name << " at step " << t << ": " << mm.str(a, r);
      if (t == 20) RecordProperty(std::string(c.name) + "_differing", std::to_string(mm.differing));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(IsaBySize, AdamWVsTorch,
                         ::testing::Combine(::testing::ValuesIn(kIsas), ::testing::ValuesIn(kSizes)),
                         isa_size_name);

// A non-decayed segment (norms, biases): torch skips the decay multiply altogether.
TEST(AdamW, NoDecayMatchesTorch) {
  const int64_t n = 4099;
  torch::manual_seed(7);
  torch::Tensor p_ref = torch::randn({n});
  torch::Tensor master = p_ref.clone(), m = torch::zeros({n}), v = torch::zeros({n});
  AdamWHyper h;
  h.lr = 0.02f, h.weight_decay = 0.0f;
  torch::optim::AdamW opt({p_ref}, torch::optim::AdamWOptions(h.lr).weight_decay(0.0));
  for (int64_t t = 1; t <= 5; ++t) {
    h.step = t;
    torch::Tensor g = torch::randn({n});
    p_ref.mutable_grad() = g;
    opt.step();
    adamw_step_cpu(master.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(),
                   v.data_ptr<float>(), n, h);
  }
  const Mismatch mm = compare(master.data_ptr<float>(), p_ref.data_ptr<float>(), n);
  EXPECT_LE(mm.max_rel, kTol) << mm.str(master.data_ptr<float>(), p_ref.data_ptr<float>());
}

// ---- bf16 gradients and the bf16 working copy ----
class AdamWBf16 : public ::testing::TestWithParam<std::tuple<AdamWIsa, int64_t>> {};

TEST_P(AdamWBf16, GradPathEqualsFp32PathAndCopyEqualsTorchCast) {
  const auto [isa, n] = GetParam();
  if (!adamw_cpu_isa_supported(isa)) GTEST_SKIP() << "this CPU lacks " << adamw_isa_name(isa);
  ForcedIsa forced(isa);

  torch::manual_seed(99 + n);
  torch::Tensor master_a = torch::randn({n}), master_b = master_a.clone();
  torch::Tensor m_a = torch::zeros({n}), v_a = torch::zeros({n});
  torch::Tensor m_b = torch::zeros({n}), v_b = torch::zeros({n});
  torch::Tensor out_a = torch::empty({n}, torch::kBFloat16), out_b = torch::empty({n}, torch::kBFloat16);
  AdamWHyper h;
  h.lr = 0.01f, h.weight_decay = 0.1f;
  for (int64_t t = 1; t <= 5; ++t) {
    h.step = t;
    const torch::Tensor g16 = torch::randn({n}).to(torch::kBFloat16);
    const torch::Tensor g32 = g16.to(torch::kFloat32);  // exactly the bf16 values
    auto* oa = reinterpret_cast<uint16_t*>(out_a.data_ptr<at::BFloat16>());
    auto* ob = reinterpret_cast<uint16_t*>(out_b.data_ptr<at::BFloat16>());
    adamw_step_cpu(master_a.data_ptr<float>(), g32.data_ptr<float>(), m_a.data_ptr<float>(),
                   v_a.data_ptr<float>(), n, h, oa);
    adamw_step_cpu_bf16grad(master_b.data_ptr<float>(), bf16_bits(g16), m_b.data_ptr<float>(),
                            v_b.data_ptr<float>(), n, h, ob);
    ASSERT_TRUE(torch::equal(master_a, master_b)) << "master differs at step " << t;
    ASSERT_TRUE(torch::equal(m_a, m_b)) << "m differs at step " << t;
    ASSERT_TRUE(torch::equal(v_a, v_b)) << "v differs at step " << t;
    ASSERT_EQ(std::memcmp(oa, ob, n * sizeof(uint16_t)), 0) << "bf16 copy differs at step " << t;
    const torch::Tensor want = master_a.to(torch::kBFloat16);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(oa[i], bf16_bits(want)[i]) << "bf16 copy of master[" << i << "] = "
                                           << master_a[i].item<float>() << " at step " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(IsaBySize, AdamWBf16,
                         ::testing::Combine(::testing::ValuesIn(kIsas), ::testing::ValuesIn(kSizes)),
                         isa_size_name);

// Rounding corner cases through the kernel: with lr = 0, wd = 0 and g = 0 the update leaves
// master unchanged, so the bf16 copy is just the conversion of the chosen values.
class AdamWBf16Rounding : public ::testing::TestWithParam<AdamWIsa> {};

TEST_P(AdamWBf16Rounding, MatchesTorchOnTiesOverflowAndSpecials) {
  const AdamWIsa isa = GetParam();
  if (!adamw_cpu_isa_supported(isa)) GTEST_SKIP() << "this CPU lacks " << adamw_isa_name(isa);
  ForcedIsa forced(isa);
  const uint32_t patterns[] = {
      0x3F808000,  // tie, kept LSB even: rounds down
      0x3F818000,  // tie, kept LSB odd: rounds up
      0x3F808001, 0x3F807FFF, 0xBF818000,
      0x7F7FFFFF,  // FLT_MAX: rounds to +inf
      0xFF7FFFFF, 0x7F800000, 0xFF800000,  // -FLT_MAX, +-inf
      0x00000001, 0x00008000, 0x00018000, 0x807FFFFF,  // subnormals
      0x00000000, 0x80000000, 0x3F800000,
  };
  const int64_t n = 67;  // patterns repeated across SIMD bodies and the tail
  std::vector<float> master(n), zeros(n, 0.0f), m(n, 0.0f), v(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = patterns[i % std::size(patterns)];
    std::memcpy(&master[i], &u, sizeof u);
  }
  const std::vector<float> before = master;
  std::vector<uint16_t> out(n);
  AdamWHyper h;
  h.lr = 0.0f, h.weight_decay = 0.0f;
  adamw_step_cpu(master.data(), zeros.data(), m.data(), v.data(), n, h, out.data());
  ASSERT_EQ(std::memcmp(master.data(), before.data(), n * sizeof(float)), 0);
  const torch::Tensor want = torch::from_blob(master.data(), {n}).to(torch::kBFloat16);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &master[i], sizeof u);
    EXPECT_EQ(out[i], bf16_bits(want)[i]) << fmt::format("float bits {:#010x}", u);
  }

  // NaN: every NaN becomes 0x7FC0, as c10::BFloat16's scalar conversion does.
  std::vector<float> nan_master(n, std::nanf("")), nz(n, 0.0f), nm(n, 0.0f), nv(n, 0.0f);
  adamw_step_cpu(nan_master.data(), nz.data(), nm.data(), nv.data(), n, h, out.data());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[i], 0x7FC0) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Isa, AdamWBf16Rounding, ::testing::ValuesIn(kIsas),
                         [](const ::testing::TestParamInfo<AdamWIsa>& info) {
                           return std::string(adamw_isa_name(info.param));
                         });

// ---- ISAs agree bitwise ----
// Every path performs the same IEEE operations in the same order, so any difference means a
// path diverged (e.g. the compiler contracted a multiply-add the scalar path rounds twice).
TEST(AdamW, IsasAgreeBitwiseAtAnyAlignment) {
  const int64_t n = 3 * 16384 + 21;
  for (int64_t offset : {0, 1, 3}) {  // start off the 64-byte alignment Block guarantees
    torch::manual_seed(5);
    const torch::Tensor p0 = torch::randn({n + offset}), g = torch::randn({n + offset});
    const torch::Tensor g16 = g.to(torch::kBFloat16);
    torch::Tensor ref_p, ref_m, ref_v, ref_out;
    for (AdamWIsa isa : kIsas) {
      if (!adamw_cpu_isa_supported(isa)) continue;
      ForcedIsa forced(isa);
      torch::Tensor p = p0.clone(), m = torch::zeros_like(p0), v = torch::zeros_like(p0);
      torch::Tensor out = torch::zeros({n + offset}, torch::kBFloat16);
      auto* o = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()) + offset;
      AdamWHyper h;
      h.lr = 0.01f, h.weight_decay = 0.1f;
      for (int64_t t = 1; t <= 3; ++t) {
        h.step = t;
        float* pp = p.data_ptr<float>() + offset;
        float* mp = m.data_ptr<float>() + offset;
        float* vp = v.data_ptr<float>() + offset;
        if (t == 2) adamw_step_cpu_bf16grad(pp, bf16_bits(g16) + offset, mp, vp, n, h, o);
        else adamw_step_cpu(pp, g.data_ptr<float>() + offset, mp, vp, n, h, o);
      }
      if (!ref_p.defined()) {
        ref_p = p, ref_m = m, ref_v = v, ref_out = out;
        continue;
      }
      EXPECT_TRUE(torch::equal(p, ref_p)) << adamw_isa_name(isa) << " offset " << offset << ": master";
      EXPECT_TRUE(torch::equal(m, ref_m)) << adamw_isa_name(isa) << " offset " << offset << ": m";
      EXPECT_TRUE(torch::equal(v, ref_v)) << adamw_isa_name(isa) << " offset " << offset << ": v";
      EXPECT_TRUE(torch::equal(out, ref_out)) << adamw_isa_name(isa) << " offset " << offset << ": bf16";
    }
  }
}

// ---- Dispatch and argument checks ----
TEST(AdamW, DispatcherPicksTheWidestIsa) {
  const AdamWIsa best = adamw_cpu_isa_supported(AdamWIsa::kAvx512) ? AdamWIsa::kAvx512
                        : adamw_cpu_isa_supported(AdamWIsa::kAvx2) ? AdamWIsa::kAvx2
                                                                   : AdamWIsa::kScalar;
  EXPECT_STREQ(adamw_cpu_isa(), adamw_isa_name(best));
  EXPECT_TRUE(adamw_cpu_isa_supported(AdamWIsa::kScalar));
  RecordProperty("isa", adamw_cpu_isa());
}

TEST(AdamW, RejectsBadArguments) {
  float x = 1, g = 1, m = 0, v = 0;
  AdamWHyper h;
  h.step = 0;
  EXPECT_THROW(adamw_step_cpu(&x, &g, &m, &v, 1, h), InternalError);
  h.step = 1;
  EXPECT_THROW(adamw_step_cpu(&x, &g, &m, &v, -1, h), InternalError);
  EXPECT_THROW(adamw_step_cpu(nullptr, &g, &m, &v, 1, h), InternalError);
  adamw_step_cpu(nullptr, nullptr, nullptr, nullptr, 0, h);  // empty segment: a no-op
  h.beta2 = 1.0f;
  EXPECT_THROW(adamw_step_cpu(&x, &g, &m, &v, 1, h), InternalError);
}

// ---- The copy streams' ledger ----

// Events finished by hand: the test plays the GPU. An event is an index into `done`.
struct HandEvents {
  using Event = int;
  std::vector<bool>* done;
  std::vector<double>* at;  // when each event completed, in seconds
  bool fail = false;        // finished() reports an error status
  Event create() {
    done->push_back(false);
    at->push_back(0);
    return static_cast<int>(done->size()) - 1;
  }
  bool finished(Event e) {
    if (fail) throw std::runtime_error("sticky error");
    return (*done)[e];
  }
  double seconds(Event a, Event b) { return (*at)[b] - (*at)[a]; }
  void destroy(Event) {}
};

struct HandLedger {
  std::vector<bool> done;
  std::vector<double> at;
  CopyLedger<HandEvents> ledger{HandEvents{&done, &at}};
  // The copy `c` ran from `start` to `end` seconds.
  void finish(const CopyLedger<HandEvents>::Copy& c, double start, double end) {
    done[c.start] = done[c.end] = true;
    at[c.start] = start, at[c.end] = end;
  }
};

// The weight stream on CUDA: copies learned finished only through fences (no done() or wait()),
// each copy finishing while the next few are issued. The ledger holds the copies in flight, not
// one entry and two events per copy ever issued, and its events are reused.
TEST(CopyLedger, FencedCopiesLeaveNoEventsBehind) {
  HandLedger h;
  constexpr int kInFlight = 3, kCopies = 10000;
  std::vector<CopyLedger<HandEvents>::Copy> issued;
  size_t most_live = 0;
  for (int i = 0; i < kCopies; ++i) {
    if (i >= kInFlight) h.finish(issued[i - kInFlight], i, i + 0.5);  // a copy lands kInFlight issues later
    auto [t, c] = h.ledger.open();
    // A reused event starts unfinished, as cudaEventRecord makes it.
    h.done[c.start] = h.done[c.end] = false;
    EXPECT_EQ(t, static_cast<uint64_t>(i + 1));
    issued.push_back(c);
    most_live = std::max(most_live, h.ledger.live_copies());
  }
  EXPECT_LE(most_live, static_cast<size_t>(kInFlight + 1));
  EXPECT_LE(h.ledger.events_created(), 2u * (kInFlight + 1)) << "events are created anew instead of reused";
  EXPECT_EQ(h.ledger.events_held(), h.ledger.events_created());
  // Every copy that finished was retired and its time counted: 0.5 s each.
  EXPECT_DOUBLE_EQ(h.ledger.seconds(), 0.5 * (kCopies - kInFlight));
}

TEST(CopyLedger, RetiredCopiesAreForgottenAndCounted) {
  HandLedger h;
  auto [t1, c1] = h.ledger.open();
  auto [t2, c2] = h.ledger.open();
  ASSERT_NE(h.ledger.find(t1), nullptr);
  h.finish(c2, 1.0, 3.0);
  h.ledger.sweep();  // finds t2 finished, not t1
  EXPECT_EQ(h.ledger.find(t2), nullptr);
  EXPECT_NE(h.ledger.find(t1), nullptr);
  EXPECT_DOUBLE_EQ(h.ledger.seconds(), 2.0);
  h.ledger.retire(t1);  // the owner waited on it
  h.ledger.retire(t1);  // twice is harmless
  EXPECT_EQ(h.ledger.live_copies(), 0u);
  EXPECT_EQ(h.ledger.events_held(), 4u);
  (void)c1;
}

// The compute side's waits: timed between their two events once the second has finished (never
// before), their events reused, and none left behind.
TEST(CopyLedger, WaitsAreTimedOnceFinishedAndTheirEventsReused) {
  HandLedger h;
  auto w1 = h.ledger.open_wait();
  auto w2 = h.ledger.open_wait();
  EXPECT_DOUBLE_EQ(h.ledger.waited_seconds(), 0.0);
  h.done[w1.start] = true, h.at[w1.start] = 1.0;
  EXPECT_DOUBLE_EQ(h.ledger.waited_seconds(), 0.0) << "a wait was counted before the stream went on";
  h.done[w1.end] = true, h.at[w1.end] = 1.25;
  EXPECT_DOUBLE_EQ(h.ledger.waited_seconds(), 0.25);
  EXPECT_EQ(h.ledger.pending_waits(), 1u);
  h.done[w2.start] = h.done[w2.end] = true, h.at[w2.start] = 2.0, h.at[w2.end] = 2.5;
  EXPECT_DOUBLE_EQ(h.ledger.waited_seconds(), 0.75);
  EXPECT_EQ(h.ledger.pending_waits(), 0u);
  const uint64_t created = h.ledger.events_created();
  for (int i = 0; i < 100; ++i) {
    auto w = h.ledger.open_wait();
    h.done[w.start] = h.done[w.end] = true;
    h.at[w.start] = h.at[w.end] = 0;
  }
  EXPECT_EQ(h.ledger.events_created(), created) << "waits' events are created anew instead of reused";
  EXPECT_EQ(h.ledger.events_held(), h.ledger.events_created());
}

TEST(CopyLedger, AnErrorStatusIsNotSweptAway) {
  HandLedger h;
  h.ledger.open();
  h.ledger.events().fail = true;  // e.g. an illegal address reported by the event query
  EXPECT_THROW(h.ledger.open(), std::runtime_error);
}

}  // namespace
}  // namespace bcd
