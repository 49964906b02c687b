// Memory planner tests: block layouts against real LlamaModel blocks, units against make_units,
// tier placement rules, budgets and the `bcdtrain plan` command on the shipped configs. The
// weight stream's plans are in test_planner_stream.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <tuple>

#include "memory/planner.h"
#include "model/llama.h"
#include "optim/bcd_scheduler.h"
#include "optim/block_optimizer.h"
#include "base/config.h"
#include "base/error.h"
#include "planner_test_helpers.h"
#include "runtime/machine.h"
#include "test_util.h"

namespace bcd {
namespace {

using namespace plantest;

// ---- Shapes ----

class PlannerShape : public ::testing::TestWithParam<int> {};

TEST_P(PlannerShape, BlockLayoutsMatchLlamaModel) {
  const ModelConfig cfg = small_shape(GetParam());
  LlamaModel model(cfg);
  const std::vector<BlockShape> shapes = block_shapes(cfg);
  ASSERT_EQ(static_cast<int>(shapes.size()), model.n_blocks());
  int64_t params = 0;
  for (int b = 0; b < model.n_blocks(); ++b) {
    const Block& blk = model.block(b);
    SCOPED_TRACE("variant " + std::to_string(GetParam()) + " block " + blk.name());
    EXPECT_EQ(shapes[b].name, blk.name());
    EXPECT_EQ(shapes[b].numel, blk.numel());
    int64_t real = 0;
    for (const auto& s : blk.slots()) real += s.numel();
    EXPECT_EQ(shapes[b].params, real);
    ASSERT_EQ(shapes[b].segments.size(), blk.segments().size());
    for (size_t s = 0; s < blk.segments().size(); ++s) {
      EXPECT_EQ(shapes[b].segments[s].begin, blk.segments()[s].begin);
      EXPECT_EQ(shapes[b].segments[s].end, blk.segments()[s].end);
      EXPECT_EQ(shapes[b].segments[s].part, blk.segments()[s].part);
      EXPECT_EQ(shapes[b].segments[s].decay, blk.segments()[s].decay);
    }
    params += real;
  }
  EXPECT_EQ(count_params(cfg), model.num_params());
  EXPECT_EQ(count_params(cfg), params);
  EXPECT_EQ(static_cast<int64_t>(cfg.n_params()), params);  // the bound checks' count in double
}

// make_units is unit_shapes; what must agree is the state the optimizer lays out for each unit
// and the gradient window it trains, which the planner counts.
TEST_P(PlannerShape, UnitsMatchTheOptimizersLayout) {
  const ModelConfig cfg = small_shape(GetParam());
  LlamaModel model(cfg);
  for (BlockKind blocks : {BlockKind::kLayer, BlockKind::kAttnMlp, BlockKind::kWhole}) {
    for (int64_t slices : {1, 4}) {
      BcdConfig b;
      b.enabled = true;
      b.blocks = blocks;
      b.vocab_slices = slices;
      SCOPED_TRACE(std::string(name_of(blocks)) + " vocab_slices " + std::to_string(slices));
      const auto shapes = unit_shapes(cfg, b);
      BlockAdamW opt(model, make_units(model, b), OptimConfig{}, true);
      std::vector<int64_t> trained(model.n_blocks(), 0);
      for (size_t u = 0; u < shapes.size(); ++u) {
        SCOPED_TRACE(shapes[u].name);
        EXPECT_EQ(opt.unit_elems(static_cast<int>(u)), shapes[u].state_elems);
        opt.activate(static_cast<int>(u));
        int64_t window = 0;
        for (const auto& p : shapes[u].pieces) {
          const Block& blk = model.block(p.block);
          EXPECT_EQ(blk.grad_begin(), p.begin);
          EXPECT_EQ(blk.grad_end(), p.end);
          window += blk.grad().numel();
          if (p.part == Part::kNone) trained[p.block] += p.end - p.begin;
        }
        EXPECT_EQ(window, shapes[u].grad_elems);
      }
      // Slices tile their blocks: every element of embed and head is trained by exactly one unit.
      if (blocks != BlockKind::kWhole) {
        EXPECT_EQ(trained.front(), model.block(0).numel());
        EXPECT_EQ(trained.back(), model.block(model.n_blocks() - 1).numel());
      }
      const bool sliced = slices > 1 && blocks != BlockKind::kWhole;
      EXPECT_EQ(shapes.front().name, sliced ? "embed.0" : blocks == BlockKind::kWhole ? "model" : "embed");
      if (blocks != BlockKind::kWhole) {
        EXPECT_EQ(shapes.back().name, sliced && !cfg.tie_embeddings ? "head.3" : "head");
      }
    }
  }
  BcdConfig too_many;
  too_many.enabled = true;
  too_many.vocab_slices = cfg.vocab_size + 1;
  EXPECT_THROW(unit_shapes(cfg, too_many), UserError);
}

INSTANTIATE_TEST_SUITE_P(Variants, PlannerShape, ::testing::Values(0, 1, 2, 3, 4));

TEST(Planner, Llama2_7bParameterCount) {
  EXPECT_EQ(count_params(llama2_7b()), 6738415616);
  int64_t padded = 0;
  for (const auto& b : block_shapes(llama2_7b())) padded += b.numel;
  EXPECT_GE(padded, 6738415616);
  EXPECT_LT(padded, 6738415616 + 34 * 4 * 16);
}

TEST(Planner, RequiresVocabSize) {
  ModelConfig m = llama2_7b();
  m.vocab_size = 0;
  EXPECT_THROW(block_shapes(m), UserError);
}

// A shape from a flag or a file that no machine holds is refused before the per-block tables
// are built (n_layers = 1e9 took all memory there) or an element count wraps.
TEST(Planner, ShapesBeyondAnyMachineAreRefused) {
  ModelConfig layers = llama2_7b();
  layers.n_layers = 1000000000;
  EXPECT_NE(test::error_of([&] { block_shapes(layers); }).find("n_layers 1000000000 is beyond"), std::string::npos);
  ModelConfig wide = llama2_7b();
  wide.d_model = int64_t{1} << 40;
  wide.n_heads = 1;
  EXPECT_NE(test::error_of([&] { block_shapes(wide); }).find("beyond any machine"), std::string::npos);
  ModelConfig longer = llama2_7b();
  longer.max_seq_len = int64_t{1} << 50;
  EXPECT_NE(test::error_of([&] { block_shapes(longer); }).find("max_seq_len"), std::string::npos);
}

// Llama-2-7B, checkpointed, trained by BCD on a 24 GiB card with 6 GiB pinned, 64 GiB of host
// memory and an NVMe drive, without weight streaming: streamed layers would make room for what
// the tests below add to the compute tier.
struct Unstreamed7b {
  ModelConfig m = llama2_7b();
  BcdConfig b;
  MemoryConfig mem = budgets(24 * kGiB, 6 * kGiB, 64 * kGiB, {"/nvme"});
  Unstreamed7b() {
    m.activation_checkpointing = true;
    b.enabled = true;
    mem.stream_weights = StreamWeights::kOff;
  }
};

// The rotary tables (2 x positions x head_dim, working dtype) are in the compute tier: a long
// max_seq_len once passed the plan and then allocated hundreds of GB. They now hold the run's
// sequences (train.seq_len rounded up to 4096), not the declared context: that costs nothing
// until a run uses it.
TEST(Planner, RotaryTablesAreCountedOnCompute) {
  auto [m, b, mem] = Unstreamed7b();
  const MemoryPlan a = plan_memory(m, b, bf16_train(1, 2048), mem);
  m.max_seq_len = 4096 + (int64_t{1} << 24);
  const MemoryPlan declared = plan_memory(m, b, bf16_train(1, 2048), mem);
  const int w = static_cast<int>(StateKind::kWorking);
  EXPECT_EQ(declared.compute.by_kind[w], a.compute.by_kind[w]);
  const MemoryPlan longer = plan_memory(m, b, bf16_train(1, int64_t{1} << 20), mem);
  EXPECT_EQ(longer.compute.by_kind[w] - a.compute.by_kind[w], uint64_t{2} * ((int64_t{1} << 20) - 4096) * 128 * 2);
  EXPECT_TRUE(a.fits) << a.why_not;
  EXPECT_TRUE(declared.fits) << declared.why_not;
  EXPECT_FALSE(longer.fits);
  EXPECT_NE(longer.why_not.find("compute tier needs"), std::string::npos) << longer.why_not;
}

// A fused attention kernel (scaled_dot_product_attention on a GPU with LibTorch 2.x) keeps no
// T x T scores: at 8k context the scores alone would be 16 GiB for one layer of a 7B model, and
// counting them refused a run that fits a 24 GiB card.
TEST(Planner, FusedAttentionCountsNoScoreMatrix) {
  auto [m, b, mem] = Unstreamed7b();
  m.max_seq_len = 8192;
  const TrainConfig t = bf16_train(1, 8192);
  UnitShape top;
  top.first_layer = static_cast<int>(m.n_layers) - 1;  // one layer with autograd
  m.activation_checkpointing = false;  // the estimates: every activation kept
  const uint64_t scores = estimate_activation_bytes(m, t, top, false) - estimate_activation_bytes(m, t, top, true);
  EXPECT_EQ(scores, uint64_t{8192} * ((2 * 2 + 4) * 32 * 8192 - 4 * 32));  // per token: scores, probs, cast; vs one fp32 LSE per head
  m.activation_checkpointing = true;
  const MemoryPlan fused = plan_memory(m, b, t, mem, 1, /*fused_attention=*/true);
  const MemoryPlan materialised = plan_memory(m, b, t, mem, 1, /*fused_attention=*/false);
  EXPECT_TRUE(fused.fits) << fused.why_not;
  EXPECT_FALSE(materialised.fits);
  EXPECT_LT(fused.compute.activations + 15 * kGiB, materialised.compute.activations);
}

// On a GPU the plan counts what the CUDA runtime holds beside the caching allocator (context,
// cuBLAS workspaces, NCCL buffers with several ranks) in the compute tier and says so: a plan
// that fits the allocator's cap but not the device is refused, naming that share.
TEST(Planner, TheCudaRuntimesOwnMemoryIsCountedOnCompute) {
  auto [m, b, mem] = Unstreamed7b();
  const TrainConfig t = bf16_train(1, 2048);
  const MemoryPlan cpu = plan_memory(m, b, t, mem, 1, true);
  const CudaReserve one = cuda_runtime_reserve(1), two = cuda_runtime_reserve(2);
  EXPECT_EQ(one.nccl, 0u);
  EXPECT_GT(two.nccl, 0u);
  EXPECT_EQ(two.total(), one.total() + kNcclBytes);
  const MemoryPlan gpu = plan_memory(m, b, t, mem, 1, true, 1, {}, two);
  EXPECT_EQ(gpu.compute.total(), cpu.compute.total() + two.total());
  EXPECT_EQ(gpu.compute.reserved, two.total());
  EXPECT_NE(format_plan(gpu).find("the CUDA runtime's own"), std::string::npos) << format_plan(gpu);
  EXPECT_EQ(format_plan(cpu).find("the CUDA runtime's own"), std::string::npos);
  // A budget between the two totals: the CPU plan fits it, the GPU plan does not, and says why.
  mem.compute_bytes.value = cpu.compute.total() + two.total() / 2;
  EXPECT_TRUE(plan_memory(m, b, t, mem, 1, true).fits);
  const MemoryPlan tight = plan_memory(m, b, t, mem, 1, true, 1, {}, two);
  EXPECT_FALSE(tight.fits);
  EXPECT_NE(tight.why_not.find("the CUDA runtime's own"), std::string::npos) << tight.why_not;
}

// A look-ahead so deep that its pool size wraps 64 bits is refused, not a tiny pool.
TEST(Planner, HugePrefetchDepthDoesNotWrap) {
  BcdConfig b;
  b.enabled = true;
  MemoryConfig mem = budgets(24 * kGiB, 0, 64 * kGiB, {"/nvme"});
  mem.pinned_bytes.is_auto = true;
  mem.prefetch_depth = int64_t{1} << 62;
  const MemoryPlan p = plan_memory(llama2_7b(), b, bf16_train(1, 512), mem);
  EXPECT_FALSE(p.fits);
  EXPECT_GE(p.pinned.staging, uint64_t{1} << 61);
}

// ---- Placement and budgets ----

TEST(Planner, FullAdamW7bDoesNotFit24GiB) {
  ModelConfig m = llama2_7b();
  m.activation_checkpointing = true;
  BcdConfig b;
  b.enabled = false;
  const MemoryPlan p = plan_memory(m, b, bf16_train(1, 2048), budgets(24 * kGiB, 0, 64 * kGiB, {}));
  // working 2 + master 4 + m 4 + v 4 + grad 4 (the fp32 sum over micro-batches) bytes per
  // parameter, all on the GPU, and 2 (autograd's bf16 buffer) per parameter of the norms: the
  // matrices' gradients, the embedding table's too, go straight into the sum (model/block.h)
  const double autograd = (2 * 32 + 1) * 4096;
  const double per_param = static_cast<double>(p.compute.total() - p.compute.activations) / static_cast<double>(p.params);
  EXPECT_NEAR(per_param, 18.0 + 2 * autograd / static_cast<double>(p.params), 0.001);
  EXPECT_EQ(p.pinned.staging, 0u);
  EXPECT_EQ(p.host.total(), 0u);
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.why_not.find("compute tier needs"), std::string::npos) << p.why_not;
  EXPECT_NE(p.why_not.find("memory.compute_bytes is 24.00 GiB"), std::string::npos) << p.why_not;
  EXPECT_NE(p.why_not.find(fmt::format("{:.2f} GiB", static_cast<double>(p.compute.total()) / kGiB)), std::string::npos);
}

TEST(Planner, BcdPlacesActiveUnitOnCompute) {
  ModelConfig m = llama2_7b();
  m.activation_checkpointing = true;
  BcdConfig b;
  b.enabled = true;
  const MemoryPlan p = plan_memory(m, b, bf16_train(1, 2048), budgets(24 * kGiB, 6 * kGiB, 64 * kGiB, {"/nvme"}));
  ASSERT_TRUE(p.fits) << p.why_not;
  ASSERT_EQ(p.units.size(), 34u);
  EXPECT_EQ(p.units[p.largest_unit].name, "layer.0");
  EXPECT_EQ(p.units[p.deepest_unit].name, "embed");
  const int64_t layer = 202383360;  // 4*4096^2 + 3*4096*11008 + 2*4096, a multiple of 16
  EXPECT_EQ(p.compute.by_kind[static_cast<int>(StateKind::kAdamM)], static_cast<uint64_t>(layer) * 4);
  // the fp32 sum, and autograd's bf16 buffer for the two norms only (the matrices sum directly)
  EXPECT_EQ(p.compute.by_kind[static_cast<int>(StateKind::kGrad)], static_cast<uint64_t>(layer) * 4 + 2 * 2 * 4096);
  EXPECT_EQ(p.pinned.staging, 2u * 12 * layer);
  // every byte of inactive master/m/v has exactly one home: host or NVMe
  uint64_t state = 0;
  for (const auto& blk : p.blocks) {
    EXPECT_EQ(blk.at(StateKind::kWorking).home, Tier::kCompute);
    EXPECT_FALSE(blk.at(StateKind::kGrad).has_home);
    for (StateKind k : {StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV}) {
      EXPECT_TRUE(blk.at(k).has_home);
      EXPECT_NE(blk.at(k).home, Tier::kCompute);
      state += blk.at(k).bytes;
    }
  }
  EXPECT_EQ(p.host.total() + p.nvme.total(), state);
  EXPECT_LE(p.host.total(), p.host.budget);
  EXPECT_EQ(p.host.total(), p.home_bytes(Tier::kPinned, StateKind::kMaster) * 3);
  EXPECT_GT(p.nvme.total(), 0u);
}

TEST(Planner, ResetNeedsNoHomeForMoments) {
  ModelConfig m = llama2_7b();
  m.activation_checkpointing = true;
  BcdConfig b;
  b.enabled = true;
  b.state_on_switch = StateOnSwitch::kReset;
  // 30 GiB of host for resident copies: all 25.1 GiB of masters fit, so nothing goes to NVMe
  const MemoryPlan p = plan_memory(m, b, bf16_train(1, 2048), budgets(24 * kGiB, 4 * kGiB, 34 * kGiB, {}));
  ASSERT_TRUE(p.fits) << p.why_not;
  EXPECT_EQ(p.nvme.total(), 0u);
  EXPECT_EQ(p.host.by_kind[static_cast<int>(StateKind::kAdamM)], 0u);
  EXPECT_EQ(p.host.by_kind[static_cast<int>(StateKind::kAdamV)], 0u);
  // Llama-2-7B's segments are all multiples of Block::kAlign: padded size = parameters
  EXPECT_EQ(p.host.by_kind[static_cast<int>(StateKind::kMaster)], static_cast<uint64_t>(p.params) * 4);
  for (const auto& blk : p.blocks) {
    EXPECT_FALSE(blk.at(StateKind::kAdamM).has_home) << blk.name;
    EXPECT_FALSE(blk.at(StateKind::kAdamV).has_home) << blk.name;
    EXPECT_EQ(blk.at(StateKind::kMaster).home, Tier::kPinned) << blk.name;
  }
  // the active unit still has its moments on the GPU; the staging pool moves masters only
  EXPECT_GT(p.compute.by_kind[static_cast<int>(StateKind::kAdamM)], 0u);
  EXPECT_EQ(p.pinned.staging, uint64_t{2} * 4 * 202383360);
}

// The planner reads no machine: "auto" sizes are the run's to resolve (runtime/machine.h), as a
// CPU run does from /proc/meminfo, shared among the machine's ranks; a plan of unresolved sizes
// is refused as an internal error, not completed behind the caller's back.
TEST(Planner, ReadsNoMachineTheRunResolvesAutoSizes) {
  auto [m, b, mem] = Unstreamed7b();
  const TrainConfig t = bf16_train(1, 2048);
  MemoryConfig host = mem, compute = mem;
  host.host_bytes = {};
  compute.compute_bytes = {};
  EXPECT_THROW(plan_memory(m, b, t, host), InternalError);
  EXPECT_THROW(plan_memory(m, b, t, compute), InternalError);
  MemoryConfig one = compute, two = compute;
  one.host_bytes = two.host_bytes = {};
  share_machine_memory(one, torch::kCPU, 1);
  share_machine_memory(two, torch::kCPU, 2);
  EXPECT_FALSE(one.host_bytes.is_auto || one.compute_bytes.is_auto);
  EXPECT_GT(one.host_bytes.value, 0u);
  EXPECT_EQ(one.compute_bytes.value, meminfo_bytes("MemTotal"));
  EXPECT_EQ(two.compute_bytes.value, meminfo_bytes("MemTotal") / 2);
  EXPECT_NO_THROW(plan_memory(m, b, t, one));
  // Given sizes stay as given.
  MemoryConfig given = mem;
  share_machine_memory(given, torch::kCPU, 2);
  EXPECT_EQ(given.host_bytes.value, mem.host_bytes.value);
  EXPECT_EQ(given.compute_bytes.value, mem.compute_bytes.value);
}

// Four ranks sharing the block state (dist.shard_state) on one 4 x 24 GiB workstation: each
// plans a quarter of every unit's master and moments, so what did not fit the host alone (the
// test above: 25 GiB of masters + 50 GiB of moments) fits it without NVMe.
TEST(Planner, ShardedStateIsAQuarterPerRankOfFour) {
  ModelConfig m = llama2_7b();
  m.activation_checkpointing = true;
  BcdConfig b;
  b.enabled = true;
  const MemoryConfig mem = budgets(24 * kGiB, 6 * kGiB, 34 * kGiB, {});
  const MemoryPlan one = plan_memory(m, b, bf16_train(1, 2048), mem);
  const MemoryPlan four = plan_memory(m, b, bf16_train(1, 2048), mem, 4);
  EXPECT_FALSE(one.fits);
  ASSERT_TRUE(four.fits) << four.why_not;
  EXPECT_EQ(four.shards, 4);
  EXPECT_EQ(four.nvme.total(), 0u);
  const int64_t layer = 202383360;  // a multiple of 4: every rank's slice is exactly a quarter
  for (StateKind k : {StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV})
    EXPECT_EQ(four.compute.by_kind[static_cast<int>(k)], static_cast<uint64_t>(layer)) << state_kind_name(k);
  EXPECT_EQ(four.compute.by_kind[static_cast<int>(StateKind::kGrad)], static_cast<uint64_t>(layer) * 4 + 2 * 2 * 4096)
      << "the gradient (its fp32 sum, and the norms' bf16 buffer) stays whole: it is all-reduced";
  EXPECT_EQ(four.pinned.staging, 2u * 3 * layer);
  EXPECT_EQ(four.host.total(), static_cast<uint64_t>(four.params) * 3) << "12 bytes/param over 4 ranks";
  EXPECT_NE(format_plan(four).find("sharded over 4 ranks"), std::string::npos);
}

TEST(Planner, NvmeNeededWithoutPathsIsRefused) {
  ModelConfig m = llama2_7b();
  m.activation_checkpointing = true;
  BcdConfig b;
  b.enabled = true;
  const MemoryPlan p = plan_memory(m, b, bf16_train(1, 2048), budgets(24 * kGiB, 6 * kGiB, 16 * kGiB, {}));
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.why_not.find("memory.nvme_paths"), std::string::npos) << p.why_not;
}

TEST(Planner, StagingPoolMustFitPinnedBytes) {
  BcdConfig b;
  b.enabled = true;
  MemoryConfig mem = budgets(24 * kGiB, 1 * kGiB, 64 * kGiB, {"/nvme"});
  mem.prefetch_depth = 2;
  const MemoryPlan p = plan_memory(llama2_7b(), b, bf16_train(1, 512), mem);
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.why_not.find("memory.pinned_bytes"), std::string::npos) << p.why_not;
  EXPECT_EQ(p.pinned.staging, uint64_t{3} * 12 * 202383360);
}

TEST(Planner, ActivationEstimateGrowsWithDepthAndShrinksWithCheckpointing) {
  ModelConfig m = llama2_7b();
  BcdConfig bcd;
  bcd.enabled = true;
  const TrainConfig t = bf16_train(1, 2048);
  const auto units = unit_shapes(m, bcd);
  const uint64_t embed = estimate_activation_bytes(m, t, units.front());
  const uint64_t head = estimate_activation_bytes(m, t, units.back());
  EXPECT_GT(embed, head);
  // the fused head + loss only: one chunk, 256 MiB / (V * 10 bytes) = 838 tokens, and the final
  // hidden states' gradient (B*T*C*w)
  const double hidden_grad = 2048.0 * 4096 * 2;
  EXPECT_EQ(head, static_cast<uint64_t>(838.0 * 32000 * 10 + hidden_grad));
  ModelConfig chunked = m;
  chunked.loss_chunk_tokens = 100;
  EXPECT_EQ(estimate_activation_bytes(chunked, t, units.back()), static_cast<uint64_t>(100.0 * 32000 * 10 + hidden_grad));
  chunked.loss_chunk_tokens = 1 << 20;  // at most the micro-batch: every logit at once
  EXPECT_EQ(estimate_activation_bytes(chunked, t, units.back()), static_cast<uint64_t>(2048.0 * 32000 * 10 + hidden_grad));
  m.activation_checkpointing = true;
  EXPECT_LT(estimate_activation_bytes(m, t, units.front()), embed / 8);
  // an explicit activation_bytes replaces the estimate
  MemoryConfig mem = budgets(24 * kGiB, 0, 64 * kGiB, {"/x"});
  mem.activation_bytes = {123, false};
  mem.pinned_bytes = {};
  EXPECT_EQ(plan_memory(m, bcd, t, mem).compute.activations, 123u);
}

TEST(Planner, LowramConfigKeepsMastersAndMomentsOnNvme) {
  Config cfg = load_config(test::source_path("configs/llama2-7b-lowram.toml"), {});
  const MemoryPlan p = plan_memory(cfg.model, cfg.bcd, cfg.train, cfg.memory);
  ASSERT_TRUE(p.fits) << p.why_not;
  for (const auto& blk : p.blocks)
    for (StateKind k : {StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV}) {
      EXPECT_TRUE(blk.at(k).has_home) << blk.name;
      EXPECT_EQ(blk.at(k).home, Tier::kNvme) << blk.name << " " << state_kind_name(k);
    }
  EXPECT_EQ(p.host.total(), 0u);
  EXPECT_EQ(p.nvme.total(), static_cast<uint64_t>(p.params) * 12);  // layer blocks need no padding
}

// ---- Config and CLI ----

TEST(PlannerConfig, SizesParseAndRoundTrip) {
  Config cfg = load_config("", {"--memory.compute_bytes=\"24GiB\"", "--memory.pinned_bytes=1000",
                                "--memory.host_bytes=\"1.5GB\""});
  EXPECT_EQ(cfg.memory.compute_bytes.value, 24 * kGiB);
  EXPECT_FALSE(cfg.memory.compute_bytes.is_auto);
  EXPECT_EQ(cfg.memory.pinned_bytes.value, 1000u);
  EXPECT_EQ(cfg.memory.host_bytes.value, 1500000000u);
  EXPECT_TRUE(cfg.memory.activation_bytes.is_auto);
  const std::string toml = config_to_toml(cfg);
  EXPECT_NE(toml.find("compute_bytes = '24GiB'"), std::string::npos) << toml;
  Config back;
  apply_config_text(back, toml, "dump");
  EXPECT_EQ(back.memory.compute_bytes.value, 24 * kGiB);
  EXPECT_EQ(back.memory.host_bytes.value, 1500000000u);
  EXPECT_TRUE(back.memory.activation_bytes.is_auto);
}

TEST(PlannerCli, ShippedConfigsFit) {
  struct Case {
    const char* file;
    const char* args;
    bool streams;
  };
  for (const Case c : {Case{"configs/llama2-7b-1x4090.toml", "", false}, Case{"configs/llama3-8b-4x4090.toml", "", false},
                       Case{"configs/llama3-8b-1x4090.toml", "", false}, Case{"configs/llama3.1-8b-1x4090.toml", "", false},
                       Case{"configs/qwen3-8b-1x4090.toml", "", false},
                       Case{"configs/llama2-7b-lowram.toml", "", false}, Case{"configs/llama2-13b-1x4090.toml", "", true},
                       Case{"configs/llama2-70b-4x4090.toml", "", true}}) {
    const auto r = test::run_bcdtrain("plan --config " + test::source_path(c.file) + c.args);
    EXPECT_EQ(r.exit_code, 0) << c.file << "\n" << r.output;
    EXPECT_NE(r.output.find("\nfits\n"), std::string::npos) << c.file << "\n" << r.output;
    EXPECT_NE(r.output.find("pinned staging"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("weight stream:") != std::string::npos, c.streams) << c.file << "\n" << r.output;
    if (c.streams) {
      EXPECT_NE(r.output.find("\n  keeps up: "), std::string::npos) << c.file << "\n" << r.output;
    }
  }
}

// Llama-3-8B, Llama-3.1-8B and Qwen3-8B on one 24 GiB card with every block trained: the
// embedding and the head are among the units (as vocabulary slices), a layer is the largest unit,
// and the plan leaves headroom on the GPU.
TEST(PlannerCli, EightBOn1x4090TrainsEveryBlockWithHeadroom) {
  for (const auto& [file, units, last_layer] :
       {std::tuple<const char*, const char*, const char*>{"configs/llama3-8b-1x4090.toml", "40", "layer.31"},
        {"configs/llama3.1-8b-1x4090.toml", "40", "layer.31"}, {"configs/qwen3-8b-1x4090.toml", "44", "layer.35"}}) {
    SCOPED_TRACE(file);
    const auto r = test::run_bcdtrain("plan --config " + test::source_path(file));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string(units) + " BCD unit(s); largest unit 'layer.0'"), std::string::npos) << r.output;
    const size_t at = r.output.find("\ncompute ");
    ASSERT_NE(at, std::string::npos) << r.output;
    std::istringstream row(r.output.substr(at + 9, r.output.find('\n', at + 1) - at - 9));
    std::vector<double> cols;
    for (double x; row >> x;) cols.push_back(x);
    ASSERT_EQ(cols.size(), 10u) << r.output;
    EXPECT_GE(cols[9], 3.0) << "GiB of headroom on the GPU";
    const Config cfg = load_config(test::source_path(file), {});
    std::vector<std::string> names;
    for (const UnitShape& u : unit_shapes(cfg.model, cfg.bcd)) names.push_back(u.name);
    for (const char* u : {"embed.0", "embed.3", last_layer, "head.0", "head.3"})
      EXPECT_NE(std::find(names.begin(), names.end(), u), names.end()) << u;
  }
}

// `plan` and a run plan through one function (runtime/run_plan.h): for every shipped config, the
// plan `bcdtrain plan` prints is the one `train --dry-run` (a run's own setup, stopped before it
// allocates) prints, on the same data and machine. The overrides make each config plannable by
// both here: a CPU run on the demo corpus, short windows, an NVMe directory that exists, one rank,
// and a fixed host budget (auto is MemAvailable, which moves between two calls).
TEST(PlannerCli, PlanAndARunPrintTheSamePlanForEveryShippedConfig) {
  test::TempDir dir("bcd-plan-same");
  ASSERT_EQ(test::prepare_fortunes(dir.file("data")).exit_code, 0);
  std::filesystem::create_directories(dir.file("nvme"));
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(test::source_path("configs"))) {
    if (e.path().extension() != ".toml") continue;
    ++n;
    const std::string args = "--config " + e.path().string() + " --data.path=" + dir.file("data") +
                             " --train.device=cpu --train.seq_len=64 --model.init_from=\"''\" --dist.nproc=1" +
                             " --memory.nvme_paths=\"['" + dir.file("nvme") + "']\" --memory.host_bytes=16GiB --train.run_dir=" + dir.file("run");
    const auto plan = test::run_shell(std::string(BCD_BINARY) + " plan " + args + " 2>/dev/null");
    const auto run = test::run_shell(std::string(BCD_BINARY) + " train --dry-run " + args + " 2>/dev/null");
    EXPECT_NE(plan.output.find("\ncompute"), std::string::npos) << e.path() << "\n" << plan.output;
    EXPECT_EQ(plan.output, run.output) << e.path();
    EXPECT_EQ(plan.exit_code, run.exit_code) << e.path();
    EXPECT_FALSE(std::filesystem::exists(dir.file("run"))) << "a dry run wrote its run directory";
  }
  EXPECT_EQ(n, 11) << "configs/ holds another number of configs: this test covers them all";
}

TEST(PlannerCli, SmallGpuIsRefusedNamingCompute) {
  const std::string cmd = "plan --config " + test::source_path("configs/llama2-7b-1x4090.toml") +
                          " --memory.compute_bytes=12GiB";
  auto r = test::run_bcdtrain(cmd + " --memory.stream_weights=off");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("does not fit: compute tier needs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("memory.compute_bytes is 12.00 GiB"), std::string::npos) << r.output;
  // auto streams the bottom 18 layers to fit 12 GiB (fused attention on CUDA: no scores kept; the
  // CUDA runtime's own 0.69 GiB counted); at 25 GB/s and 80 TFLOP/s their copies hide (the
  // layers below the active unit are copied once a step for its 8 micro-batches), but not on a
  // 12 GB/s link, where the embedding's steps (every layer with autograd: two copies a layer a
  // micro-batch) expose them: refused for that, with the knobs
  r = test::run_bcdtrain(cmd);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("weight stream: 18 of 32 decoder layers streamed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("keeps up: the copies hide behind compute"), std::string::npos) << r.output;
  r = test::run_bcdtrain(cmd + " --memory.stream_gbps=12");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("does not fit: the weight stream cannot keep up: with unit 'embed' active"), std::string::npos)
      << r.output;
  r = test::run_bcdtrain(cmd + " --memory.stream_gbps=12 --memory.accept_slow_stream=true");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cannot keep up: exposed copy time is over 10% of compute (memory.accept_slow_stream"),
            std::string::npos)
      << r.output;
}

TEST(PlannerCli, MissingNvmePathsIsRefused) {
  const auto r = test::run_bcdtrain("plan --config " + test::source_path("configs/llama2-7b-lowram.toml") +
                                    " '--memory.nvme_paths=[]'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("memory.nvme_paths"), std::string::npos) << r.output;
}

TEST(PlannerCli, BadSizesNameTheKey) {
  test::TempDir dir;
  test::write_text(dir.file("m.toml"), "[model]\nvocab_size = 100\n[memory]\nhost_bytes = \"12 bananas\"\n");
  auto r = test::run_bcdtrain("plan --config " + dir.file("m.toml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("[memory] host_bytes: expected a size like \"24GiB\" or \"auto\", got \"12 bananas\""),
            std::string::npos)
      << r.output;
  test::write_text(dir.file("ok.toml"), "[model]\nvocab_size = 100\n");
  r = test::run_bcdtrain("plan --config " + dir.file("ok.toml") + " --memory.compute_bytes=-5");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("[memory] compute_bytes: expected a size"), std::string::npos) << r.output;
  r = test::run_bcdtrain("plan --config " + dir.file("ok.toml") + " --memory.host_bytes=true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("[memory] host_bytes"), std::string::npos) << r.output;
}

TEST(PlannerCli, NeedsVocabSize) {
  const auto r = test::run_bcdtrain("plan --model.n_layers=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("vocab_size"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace bcd
