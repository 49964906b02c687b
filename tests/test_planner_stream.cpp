// Memory planner tests of the weight stream (memory.stream_weights): what streams, the bytes of
// the compute tier, host and NVMe homes, the stream model (bytes per step, exposed copy time)
// and its refusals, and the shipped 13B and 70B configs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "memory/planner.h"
#include "base/config.h"
#include "base/error.h"
#include "planner_test_helpers.h"
#include "test_util.h"

namespace bcd {
namespace {

using namespace plantest;

// ---- Weight stream (memory.stream_weights) ----

ModelConfig llama2_13b() {
  ModelConfig m = llama2_7b();
  m.d_model = 5120;
  m.n_layers = 40;
  m.n_heads = 40;
  m.n_kv_heads = 40;
  m.d_ff = 13824;
  m.activation_checkpointing = true;
  return m;
}

MemoryConfig streaming(MemoryConfig m, const char* mode, int64_t depth = 2) {
  m.stream_weights = *parse_choice<StreamWeights>(mode);  // the names a config file gives
  m.stream_depth = depth;
  return m;
}

uint64_t working_of(const TierUsage& t) { return t.by_kind[static_cast<int>(StateKind::kWorking)]; }

// Exposed seconds of one pass of `uses` with the window warm from the pass before.
double steady_exposed(const std::vector<StreamUse>& uses, int depth) {
  return std::max(0.0, (stream_exposed_seconds(uses, depth, 3) - stream_exposed_seconds(uses, depth, 1)) / 2);
}

// The default (auto) streams nothing when everything fits: the plan and its report are
// byte for byte those of stream_weights = "off".
TEST(PlannerStream, AutoStreamsNothingWhenTheWeightsFit) {
  ModelConfig m = llama2_7b();
  m.activation_checkpointing = true;
  BcdConfig b;
  b.enabled = true;
  const MemoryConfig mem = budgets(24 * kGiB, 6 * kGiB, 64 * kGiB, {"/nvme"});
  const MemoryPlan off = plan_memory(m, b, bf16_train(1, 2048), streaming(mem, "off"));
  const MemoryPlan aut = plan_memory(m, b, bf16_train(1, 2048), streaming(mem, "auto"));
  ASSERT_TRUE(off.fits) << off.why_not;
  EXPECT_FALSE(aut.stream.on());
  EXPECT_EQ(aut.stream.window_bytes() + aut.stream.active_bytes + aut.stream.home_bytes, 0u);
  EXPECT_EQ(format_plan(aut), format_plan(off));
  const std::pair<const TierUsage*, const TierUsage*> tiers[] = {
      {&aut.compute, &off.compute}, {&aut.pinned, &off.pinned}, {&aut.host, &off.host}, {&aut.nvme, &off.nvme}};
  for (const auto& [a, o] : tiers) {
    EXPECT_EQ(a->by_kind, o->by_kind);
    EXPECT_EQ(a->total(), o->total());
    EXPECT_EQ(a->budget, o->budget);
  }
  EXPECT_EQ(format_plan(off).find("weight stream"), std::string::npos);
}

// stream_weights = "on": the compute tier holds embed, head and the rotary tables, `depth`
// window buffers of one layer and the active buffer (the largest unit's streamed layers, each
// block once); the host tier holds this rank's share of the one copy on the machine.
class PlannerStreamBytes : public ::testing::TestWithParam<std::tuple<const char*, int, int, int>> {};

TEST_P(PlannerStreamBytes, ComputeAndHostWorkingBytes) {
  const auto [blocks, lpb, ranks, depth] = GetParam();
  SCOPED_TRACE(fmt::format("blocks {} layers_per_block {} local ranks {} depth {}", blocks, lpb, ranks, depth));
  ModelConfig m = small_shape(0);
  m.n_layers = 5;
  m.activation_checkpointing = true;
  BcdConfig b;
  b.enabled = true;
  b.blocks = *parse_choice<BlockKind>(blocks);
  b.layers_per_block = lpb;
  const TrainConfig t = bf16_train(2, 16);
  const MemoryConfig mem = streaming(budgets(kGiB, kGiB, 4 * kGiB, {}), "on", depth);
  const MemoryPlan p = plan_memory(m, b, t, mem, 1, false, ranks, {1e6, 1});  // a link fast enough to keep up
  ASSERT_TRUE(p.fits) << p.why_not;
  const std::vector<BlockShape> shapes = block_shapes(m);
  const uint64_t layer = static_cast<uint64_t>(shapes[1].numel) * 2;
  const uint64_t resident = static_cast<uint64_t>(shapes.front().numel + shapes.back().numel) * 2 + rope_table_bytes(m, Dtype::kBf16, t.seq_len);
  const std::string kind = blocks;
  // one unit of everything; layers_per_block layers; half a layer (its block is one buffer)
  const uint64_t active = kind == "whole" ? 5 * layer : kind == "layer" ? static_cast<uint64_t>(lpb) * layer : layer;
  EXPECT_EQ(p.stream.streamed_count(), 5);
  EXPECT_EQ(p.stream.slot_bytes, layer);
  EXPECT_EQ(p.stream.active_bytes, active);
  EXPECT_EQ(p.stream.home_bytes, 5 * layer);
  EXPECT_EQ(p.stream.sharers, ranks);
  EXPECT_EQ(working_of(p.compute), resident + static_cast<uint64_t>(depth) * layer + active);
  EXPECT_EQ(working_of(p.host), (5 * layer + ranks - 1) / ranks);
  EXPECT_EQ(p.home_bytes(Tier::kPinned, StateKind::kWorking), 5 * layer);
  for (size_t i = 0; i < p.blocks.size(); ++i) {
    const bool is_layer = i > 0 && i + 1 < p.blocks.size();
    EXPECT_TRUE(p.blocks[i].at(StateKind::kWorking).has_home);
    EXPECT_EQ(p.blocks[i].at(StateKind::kWorking).home, is_layer ? Tier::kPinned : Tier::kCompute) << p.blocks[i].name;
    EXPECT_EQ(p.stream.home[i], is_layer ? Tier::kPinned : Tier::kCompute) << p.blocks[i].name;
  }
  EXPECT_NE(format_plan(p).find("working host (streamed)"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Units, PlannerStreamBytes,
                         ::testing::Combine(::testing::Values("layer", "attn_mlp", "whole"), ::testing::Values(1, 2),
                                            ::testing::Values(1, 3, 7), ::testing::Values(2, 3)),
                         [](const auto& info) {
                           return fmt::format("{}_lpb{}_ranks{}_depth{}", std::get<0>(info.param), std::get<1>(info.param),
                                              std::get<2>(info.param), std::get<3>(info.param));
                         });

// 13B's 24.2 GiB of working weights on a 24 GiB card: auto streams the fewest bottom layers that
// make the compute tier fit and keeps the top ones (used twice above the active unit) resident;
// the host holds their weights first, so more master/moments go to NVMe than without them.
// With streamed layers and grad_accum > 1 a step runs every micro-batch through the frozen layers
// first, so a unit above layer 0 holds grad_accum - 1 prefix outputs (B x T x C) while it trains:
// the plan counts them (it did not), and a run without streaming does not hold them.
TEST(PlannerStream, HeldPrefixesOfTheOtherMicroBatchesAreCounted) {
  ModelConfig m = llama2_7b();
  m.activation_checkpointing = true;
  BcdConfig b;
  b.enabled = true;
  const MemoryConfig mem = budgets(80 * kGiB, 6 * kGiB, 64 * kGiB, {"/nvme"});
  TrainConfig t = bf16_train(1, 2048);
  t.grad_accum = 64;
  const MemoryPlan on = plan_memory(m, b, t, streaming(mem, "on")), off = plan_memory(m, b, t, streaming(mem, "off"));
  ASSERT_TRUE(on.stream.on());
  const uint64_t held = 63ull * 2048 * static_cast<uint64_t>(m.d_model) * 2;
  uint64_t want = 0, plain = 0;
  for (const UnitShape& u : on.units) {
    const uint64_t a = estimate_activation_bytes(m, t, u);
    plain = std::max(plain, a);
    want = std::max(want, a + (u.first_layer >= 1 ? held : 0));
  }
  EXPECT_EQ(on.compute.activations, want);
  EXPECT_GT(want, plain) << "63 held prefixes outweigh the embedding's deeper graph";
  EXPECT_GE(on.units[static_cast<size_t>(on.deepest_unit)].first_layer, 1);
  EXPECT_EQ(off.compute.activations, plain);
  t.grad_accum = 1;
  EXPECT_EQ(plan_memory(m, b, t, streaming(mem, "on")).compute.activations, plain);
}

TEST(PlannerStream, AutoStreamsTheBottomLayersAndKeepsTheTopResident) {
  BcdConfig b;
  b.enabled = true;
  TrainConfig t = bf16_train(2, 2048);
  t.grad_accum = 4;
  const MemoryConfig mem = budgets(24 * kGiB, 8 * kGiB, 56 * kGiB, {"/nvme"});
  const StreamRates gpu{25, 80};
  const MemoryPlan off = plan_memory(llama2_13b(), b, t, streaming(mem, "off"), 1, true, 1, gpu);
  const MemoryPlan p = plan_memory(llama2_13b(), b, t, streaming(mem, "auto"), 1, true, 1, gpu);
  EXPECT_FALSE(off.fits);
  ASSERT_TRUE(p.fits) << p.why_not;
  const int n = p.stream.streamed_count();
  EXPECT_GT(n, 0);
  EXPECT_LT(n, 40);
  for (int l = 0; l < 40; ++l) EXPECT_EQ(p.stream.streamed[l + 1], l < n) << "layer." << l;
  EXPECT_FALSE(p.stream.streamed.front());
  EXPECT_FALSE(p.stream.streamed.back());
  const uint64_t layer = 317204480ull * 2;  // 4*5120^2 + 3*5120*13824 + 2*5120, bf16
  EXPECT_EQ(p.stream.slot_bytes, layer);
  EXPECT_EQ(p.stream.active_bytes, layer);
  // the largest number of resident layers: one more would not fit
  EXPECT_LE(p.compute.total(), p.compute.budget);
  EXPECT_GT(p.compute.total() + layer, p.compute.budget);
  EXPECT_EQ(working_of(p.compute), working_of(off.compute) - static_cast<uint64_t>(n) * layer + 3 * layer);
  EXPECT_EQ(working_of(p.host), static_cast<uint64_t>(n) * layer);
  EXPECT_LE(p.host.total(), p.host.budget);
  EXPECT_GT(p.nvme.total(), off.nvme.total());
  EXPECT_EQ(p.host.total() + p.nvme.total(), off.host.total() + off.nvme.total() + working_of(p.host));
  EXPECT_TRUE(p.stream.keeps_up);
  const std::string report = format_plan(p);
  EXPECT_NE(report.find(fmt::format("weight stream: {} of 40 decoder layers streamed from host memory (layer.0 .. "
                                    "layer.{}), {} resident (layer.{} .. layer.39)",
                                    n, n - 1, 40 - n, n)),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("\n  keeps up: "), std::string::npos) << report;
  // "on" streams all 40, and needs less of the GPU
  const MemoryPlan on = plan_memory(llama2_13b(), b, t, streaming(mem, "on"), 1, true, 1, gpu);
  EXPECT_EQ(on.stream.streamed_count(), 40);
  EXPECT_EQ(working_of(on.compute), working_of(p.compute) - static_cast<uint64_t>(40 - n) * layer);
}

// When even streaming every layer leaves the compute tier over budget, auto says so with numbers.
TEST(PlannerStream, AutoThatCannotFitSaysWhy) {
  BcdConfig b;
  b.enabled = true;
  const MemoryPlan p = plan_memory(llama2_13b(), b, bf16_train(2, 2048), budgets(8 * kGiB, 8 * kGiB, 56 * kGiB, {"/x"}));
  EXPECT_FALSE(p.fits);
  EXPECT_FALSE(p.stream.on());
  EXPECT_NE(p.why_not.find("compute tier needs"), std::string::npos) << p.why_not;
  EXPECT_NE(p.why_not.find("even with all 40 decoder layers' weights streamed"), std::string::npos) << p.why_not;
}

// Backward recomputes a frozen layer with its weights fetched again: no streaming without
// activation checkpointing, whether asked (on) or needed (auto).
TEST(PlannerStream, NeedsActivationCheckpointing) {
  BcdConfig b;
  b.enabled = true;
  ModelConfig m = llama2_13b();
  m.activation_checkpointing = false;
  const MemoryConfig mem = budgets(24 * kGiB, 8 * kGiB, 56 * kGiB, {"/nvme"});
  for (const char* mode : {"auto", "on"}) {
    const MemoryPlan p = plan_memory(m, b, bf16_train(1, 512), streaming(mem, mode), 1, true, 1, {25, 80});
    EXPECT_FALSE(p.fits) << mode;
    EXPECT_NE(p.why_not.find("model.activation_checkpointing = true"), std::string::npos) << mode << ": " << p.why_not;
  }
}

TEST(PlannerStream, HostMustHoldTheStreamedWeights) {
  BcdConfig b;
  b.enabled = true;
  MemoryConfig host_only = streaming(budgets(24 * kGiB, 8 * kGiB, 16 * kGiB, {"/x"}), "on");
  host_only.stream_home = Home::kHost;  // "auto" homes what does not fit on NVMe (LayersThatDoNotFitHostMemoryStreamFromNvme)
  const MemoryPlan p = plan_memory(llama2_13b(), b, bf16_train(2, 2048), host_only, 1, true, 1, {25, 80});
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.why_not.find("the streamed weights' host copy needs 23.63 GiB per rank"), std::string::npos) << p.why_not;
  // two local ranks share the machine's one copy
  const MemoryPlan two = plan_memory(llama2_13b(), b, bf16_train(2, 2048),
                                     streaming(budgets(24 * kGiB, 8 * kGiB, 20 * kGiB, {"/x"}), "on"), 1, true, 2, {25, 80});
  EXPECT_TRUE(two.fits) << two.why_not;
  EXPECT_EQ(working_of(two.host), 40 * 317204480ull);
  EXPECT_EQ(two.host.by_kind[static_cast<int>(StateKind::kMaster)], 0u) << "no host room left for master/moments";
}

// Streamed layers that do not fit host memory are homed on the NVMe tier, the bottom ones (read
// least) first, each rank its own copy there, read through depth + 1 pinned buffers of a layer;
// "nvme" sends every streamed layer there, "host" refuses instead, and the NVMe-homed layers'
// copies run at the slower of the link and the drive.
TEST(PlannerStream, LayersThatDoNotFitHostMemoryStreamFromNvme) {
  BcdConfig b;
  b.enabled = true;
  const TrainConfig t = bf16_train(2, 2048);
  const uint64_t layer = 2 * 317204480ull;
  const uint64_t stage = 3 * ((layer + 4095) / 4096 * 4096);
  const MemoryConfig mem = streaming(budgets(24 * kGiB, 12 * kGiB, 24 * kGiB, {"/nvme"}), "on");
  const MemoryPlan p = plan_memory(llama2_13b(), b, t, mem, 1, true, 1, {25, 80, 6});
  ASSERT_TRUE(p.stream.on());
  const StreamPlan& s = p.stream;
  int first_host = -1, on_nvme = 0;
  for (int l = 0; l < 40; ++l) {
    const Tier home = s.home[l + 1];
    ASSERT_TRUE(home == Tier::kPinned || home == Tier::kNvme) << "layer " << l;
    if (home == Tier::kNvme) {
      ++on_nvme;
      EXPECT_LT(first_host, 0) << "layer." << l << " on NVMe above a host-homed layer";
    } else if (first_host < 0) {
      first_host = l;
    }
    EXPECT_EQ(p.blocks[l + 1].at(StateKind::kWorking).home, home);
  }
  ASSERT_GT(on_nvme, 0);
  ASSERT_LT(on_nvme, 40);
  EXPECT_EQ(s.nvme_bytes, static_cast<uint64_t>(on_nvme) * layer);
  EXPECT_EQ(working_of(p.nvme), s.nvme_bytes);
  EXPECT_EQ(working_of(p.host), static_cast<uint64_t>(40 - on_nvme) * layer);
  EXPECT_EQ(s.staging_bytes, stage);
  // one more host-homed layer would not have fit host memory less the pinned pool
  EXPECT_GT(working_of(p.host) + layer, 24 * kGiB - 12 * kGiB);
  EXPECT_LE(working_of(p.host), 24 * kGiB - 12 * kGiB);
  const std::string report = format_plan(p);
  EXPECT_NE(report.find("working nvme (streamed)"), std::string::npos) << report;
  EXPECT_NE(report.find(fmt::format("host memory ({}) and the NVMe tier ({})", 40 - on_nvme, on_nvme)), std::string::npos)
      << report;
  EXPECT_NE(report.find("at 6 GB/s (memory.stream_nvme_gbps) through 3 pinned buffers"), std::string::npos) << report;
  // The pinned pool holds the units' slabs and the read buffers.
  MemoryConfig off = mem;
  off.stream_weights = StreamWeights::kOff;
  off.compute_bytes = Bytes{1ull << 50, false};
  EXPECT_EQ(p.pinned.staging, plan_memory(llama2_13b(), b, t, off, 1, true).pinned.staging + stage);

  // "nvme": every streamed layer there, none in host memory; a slower drive shows in the copy time
  MemoryConfig all = mem;
  all.stream_home = Home::kNvme;
  const MemoryPlan n = plan_memory(llama2_13b(), b, t, all, 1, true, 1, {25, 80, 6});
  EXPECT_EQ(n.stream.nvme_bytes, 40 * layer);
  EXPECT_EQ(working_of(n.host), 0u);
  const uint64_t bytes = n.stream.per_unit[n.stream.worst_unit].bytes;
  EXPECT_NEAR(n.stream.copy_s_per_step, static_cast<double>(bytes) / 6e9, 1e-6 * n.stream.copy_s_per_step);
  // "host": refused when the copy does not fit
  MemoryConfig host = mem;
  host.stream_home = Home::kHost;
  const MemoryPlan h = plan_memory(llama2_13b(), b, t, host, 1, true, 1, {25, 80, 6});
  EXPECT_FALSE(h.fits);
  EXPECT_EQ(h.stream.nvme_bytes, 0u);
  EXPECT_NE(h.why_not.find("the streamed weights' host copy needs"), std::string::npos) << h.why_not;
  // NVMe homes need NVMe paths
  MemoryConfig nopath = all;
  nopath.nvme_paths.clear();
  nopath.home = Home::kHost;
  nopath.host_bytes = Bytes{1ull << 45, false};
  const MemoryPlan np = plan_memory(llama2_13b(), b, t, nopath, 1, true, 1, {25, 80, 6});
  EXPECT_FALSE(np.fits);
  EXPECT_NE(np.why_not.find("of streamed layers' weights are homed on NVMe (memory.stream_home = \"nvme\") and "
                            "memory.nvme_paths is empty"),
            std::string::npos)
      << np.why_not;
}

// Copies at `gbps` against compute at `tflops`: too few tokens per micro-batch leave the copies
// exposed; the plan refuses that unless memory.accept_slow_stream, and says so either way.
TEST(PlannerStream, SlowStreamIsRefusedUnlessAccepted) {
  BcdConfig b;
  b.enabled = true;
  TrainConfig t = bf16_train(1, 512);
  t.grad_accum = 2;
  MemoryConfig mem = streaming(budgets(24 * kGiB, 8 * kGiB, 56 * kGiB, {"/nvme"}), "auto");
  const MemoryPlan slow = plan_memory(llama2_13b(), b, t, mem, 1, true, 1, {25, 80});
  ASSERT_TRUE(slow.stream.on());
  EXPECT_FALSE(slow.stream.keeps_up);
  EXPECT_FALSE(slow.fits);
  EXPECT_GT(slow.stream.exposed_s_per_step, 0.10 * slow.stream.compute_s_per_step);
  for (const char* s : {"the weight stream cannot keep up", "at 25 GB/s", "at 80 TFLOP/s", "exposed",
                        "train.batch_size x train.seq_len, now 512", "memory.accept_slow_stream = true"})
    EXPECT_NE(slow.why_not.find(s), std::string::npos) << s << " in " << slow.why_not;
  mem.accept_slow_stream = true;
  const MemoryPlan accepted = plan_memory(llama2_13b(), b, t, mem, 1, true, 1, {25, 80});
  EXPECT_TRUE(accepted.fits) << accepted.why_not;
  EXPECT_NE(format_plan(accepted).find("\n  cannot keep up: exposed copy time is over 10% of compute "
                                       "(memory.accept_slow_stream: the copies will be exposed)\n"),
            std::string::npos)
      << format_plan(accepted);
  // memory.stream_gbps, where given, overrides the caller's rate: a fast enough link keeps up
  mem.accept_slow_stream = false;
  mem.stream_gbps = 1000;
  const MemoryPlan fast = plan_memory(llama2_13b(), b, t, mem, 1, true, 1, {25, 80});
  EXPECT_TRUE(fast.fits) << fast.why_not;
  EXPECT_EQ(fast.stream.gbps, 1000);
  EXPECT_TRUE(fast.stream.keeps_up);
}

// Bytes per step on a 3-layer model, every layer streamed, units embed, layer.0-2, head, 3
// micro-batches a step: per micro-batch a layer from the active unit up is copied once, one above
// it twice (forward and recompute), its own never; the layers below it run the step's 3
// micro-batches in one use, copied once a step (runtime/trainer.cpp).
TEST(PlannerStream, BytesPerStepHandComputed) {
  ModelConfig m = small_shape(0);
  m.activation_checkpointing = true;
  BcdConfig b;
  b.enabled = true;
  TrainConfig t = bf16_train(2, 16);
  t.grad_accum = 3;
  const StreamRates rates{2, 0.5};
  const MemoryPlan p = plan_memory(m, b, t, streaming(budgets(kGiB, kGiB, kGiB, {}), "on"), 1, false, 1, rates);
  ASSERT_EQ(p.units.size(), 5u);
  const uint64_t lb = static_cast<uint64_t>(block_shapes(m)[1].numel) * 2;
  //                 embed    layer.0  layer.1      layer.2  head
  const uint64_t copies[] = {3 * 6, 3 * 4, 1 + 3 * 2, 2, 3};
  ASSERT_EQ(p.stream.per_unit.size(), 5u);
  for (int u = 0; u < 5; ++u) {
    EXPECT_EQ(p.stream.per_unit[u].bytes, copies[u] * lb) << p.units[u].name;
    EXPECT_DOUBLE_EQ(p.stream.per_unit[u].copy_s, static_cast<double>(copies[u] * lb) / 2e9) << p.units[u].name;
  }
  EXPECT_EQ(p.stream.worst_unit, 0);
  EXPECT_EQ(p.stream.bytes_per_step, 18 * lb);
  EXPECT_DOUBLE_EQ(p.stream.copy_s_per_step, static_cast<double>(18 * lb) / 2e9);
  // The head unit runs the three layers forward only, each for the 3 micro-batches in one use:
  // C = 48, D = 8, H = 6, KV = 2, F = 100, 32 tokens
  const double matrices = (6 + 2 * 2) * 8 * 48 + 48 * 6 * 8 + 3 * 100 * 48;
  const double fwd = 32 * (2 * matrices + 2.0 * 2.0 * 6 * 8 * 17 / 2) / 0.5e12;
  const double copy = static_cast<double>(lb) / 2e9;
  EXPECT_DOUBLE_EQ(p.stream.per_unit[4].compute_s, 3 * 3 * fwd);
  EXPECT_DOUBLE_EQ(p.stream.per_unit[4].exposed_s, steady_exposed({{3 * fwd, copy}, {3 * fwd, copy}, {3 * fwd, copy}}, 2));
  // layer.2 active: layers 0 and 1 (copied once) for the 3 micro-batches, then per micro-batch
  // layer 2 forward and backward (its own)
  const double bwd = 2 * fwd + 32 * (2.0 * 2.0 * 6 * 8 * 17 / 2) / 0.5e12;
  EXPECT_DOUBLE_EQ(p.stream.per_unit[3].compute_s, 3 * (3 * fwd + bwd));
  // (the plan counts below a nanosecond per second of compute as none: the sums' rounding)
  EXPECT_NEAR(p.stream.per_unit[3].exposed_s,
              steady_exposed({{3 * fwd, copy}, {3 * fwd, copy}, {fwd, 0}, {bwd, 0}, {fwd, 0}, {bwd, 0}, {fwd, 0}, {bwd, 0}}, 2),
              1e-9 * p.stream.per_unit[3].compute_s);
  // embed active: every layer with autograd, each micro-batch copying all three twice
  EXPECT_DOUBLE_EQ(p.stream.per_unit[0].exposed_s,
                   steady_exposed({{fwd, copy}, {fwd, copy}, {fwd, copy}, {bwd, copy}, {bwd, copy}, {bwd, copy},
                                   {fwd, copy}, {fwd, copy}, {fwd, copy}, {bwd, copy}, {bwd, copy}, {bwd, copy},
                                   {fwd, copy}, {fwd, copy}, {fwd, copy}, {bwd, copy}, {bwd, copy}, {bwd, copy}}, 2));
}

TEST(PlannerStream, ExposedSecondsHandComputed) {
  // copy 3 > compute 1: copies back to back, compute waits for each: ends at 3 * 3 + 1
  EXPECT_DOUBLE_EQ(stream_exposed_seconds({{1, 3}, {1, 3}, {1, 3}}, 2), 10 - 3);
  // copy 1 < compute 3: only the first copy shows
  EXPECT_DOUBLE_EQ(stream_exposed_seconds({{3, 1}, {3, 1}, {3, 1}}, 2), 1);
  // max(0, copy - compute before) per use at depth 2: 2 + (2 - 1) + (2 - 1.5)
  EXPECT_DOUBLE_EQ(stream_exposed_seconds({{1, 2}, {1.5, 2}, {4, 2}}, 2), 2 + 1 + 0.5);
  // a resident layer's compute between two streamed uses hides copy time too
  EXPECT_DOUBLE_EQ(stream_exposed_seconds({{1, 2}, {1, 0}, {1, 2}}, 2), 2);
  // a deeper window lets copies run ahead behind a long compute; with two buffers the third
  // copy waits for the first use's compute, and the two short uses after it wait 0.5 each
  const std::vector<StreamUse> burst = {{10, 1}, {0.5, 1}, {0.5, 1}, {0.5, 1}};
  EXPECT_DOUBLE_EQ(stream_exposed_seconds(burst, 3), 1);
  EXPECT_DOUBLE_EQ(stream_exposed_seconds(burst, 2), 1 + 0.5 + 0.5);
  EXPECT_DOUBLE_EQ(stream_exposed_seconds({}, 2), 0);
  // Passes back to back (the window prefetches the next pass): once warm, copies that hide
  // show no more; copies longer than compute show their difference every pass (3 x (3 - 1))
  EXPECT_DOUBLE_EQ(stream_exposed_seconds({{3, 1}, {3, 1}, {3, 1}}, 2, 3), 1);
  EXPECT_DOUBLE_EQ(stream_exposed_seconds({{1, 3}, {1, 3}, {1, 3}}, 2, 3), 7 + 2 * 6);
  EXPECT_DOUBLE_EQ(steady_exposed({{3, 1}, {3, 1}, {3, 1}}, 2), 0);
  EXPECT_DOUBLE_EQ(steady_exposed({{1, 3}, {1, 3}, {1, 3}}, 2), 6);
}

TEST(PlannerStream, RatesByDevice) {
  MemoryConfig mem;
  TrainConfig t;
  t.dtype = Dtype::kBf16;
  StreamRates r = resolve_stream_rates(mem, t, false, std::nullopt);
  EXPECT_EQ(r.gbps, 10);
  EXPECT_EQ(r.tflops, 0.1);
  r = resolve_stream_rates(mem, t, true, std::nullopt);
  EXPECT_EQ(r.gbps, 25);
  EXPECT_EQ(r.tflops, 80);
  EXPECT_EQ(resolve_stream_rates(mem, t, true, 165.2).tflops, 82.6);
  t.peak_tflops = 100;
  EXPECT_EQ(resolve_stream_rates(mem, t, true, 165.2).tflops, 50);
  mem.stream_gbps = 12;
  mem.stream_tflops = 30;
  r = resolve_stream_rates(mem, t, true, 165.2);
  EXPECT_EQ(r.gbps, 12);
  EXPECT_EQ(r.tflops, 30);
  EXPECT_EQ(resolve_stream_rates(mem, t, false, std::nullopt).gbps, 12);
}

// The shipped configs that need the stream: one rank of a 13B run and one of four of a 70B run,
// at the rates `bcdtrain plan` assumes for a GPU it does not see.
TEST(PlannerStream, ShippedStreamingConfigsFit) {
  struct Case {
    const char* file;
    int ranks;
  };
  for (const Case c : {Case{"configs/llama2-13b-1x4090.toml", 1}, Case{"configs/llama2-70b-4x4090.toml", 4}}) {
    SCOPED_TRACE(c.file);
    const Config cfg = load_config(test::source_path(c.file), {});
    const StreamRates rates = resolve_stream_rates(cfg.memory, cfg.train, true, std::nullopt);
    for (bool fused : {false, true}) {
      const MemoryPlan p = plan_memory(cfg.model, cfg.bcd, cfg.train, cfg.memory, c.ranks, fused, c.ranks, rates);
      EXPECT_TRUE(p.fits) << p.why_not;
      EXPECT_TRUE(p.stream.on());
      EXPECT_TRUE(p.stream.keeps_up);
      EXPECT_LE(p.compute.total(), p.compute.budget);
      EXPECT_LE(p.host.total(), p.host.budget);
    }
  }
}

}  // namespace
}  // namespace bcd
