// Data-parallel training over real processes on loopback (c10d Gloo), against the single-process
// run: 2 ranks x b give 1 rank x 2b, a stopped run resumes exactly (and on one rank), a killed
// rank stops the run. Where ranks come from: test_dist_launch.cpp; under torchrun:
// test_dist_torchrun.cpp.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "base/config.h"
#include "base/error.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "model/weights.h"
#include "dist/launcher.h"
#include "dist/process_group.h"
#include "dist/run_identity.h"
#include "runtime/run_setup.h"
#include "data_parallel_fixture.h"
#include "dist_test_helpers.h"
#include "test_util.h"

namespace bcd {
namespace {

using namespace disttest;
using test::error_of;
using test::read_metrics;
namespace fs = std::filesystem;

// Two 2-rank runs of `steps` steps, the second with `other` on top of `extra`: bitwise the same
// losses and final weights, and gradient norms within `norm_tol` (relative; 0: bitwise). Their
// metrics (empty after a failure).
std::pair<std::vector<nlohmann::json>, std::vector<nlohmann::json>> bitwise_pair(
    const std::string& a, const std::string& b, int steps, const std::string& extra, const std::string& other,
    double norm_tol = 0.0) {
  const std::string common = " --train.steps=" + std::to_string(steps) + extra;
  auto ra = test::run_bcdtrain("launch --nproc 2 " + DataParallel::train(a, 4, common));
  EXPECT_EQ(ra.exit_code, 0) << ra.output;
  auto rb = test::run_bcdtrain("launch --nproc 2 " + DataParallel::train(b, 4, common + other));
  EXPECT_EQ(rb.exit_code, 0) << rb.output;
  if (ra.exit_code != 0 || rb.exit_code != 0) return {};
  auto ma = read_metrics(DataParallel::path(a) + "/metrics.jsonl"), mb = read_metrics(DataParallel::path(b) + "/metrics.jsonl");
  EXPECT_EQ(ma.size(), static_cast<size_t>(steps));
  EXPECT_EQ(mb.size(), static_cast<size_t>(steps));
  for (size_t i = 0; i < std::min(ma.size(), mb.size()); ++i) {
    EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << i + 1;
    const double na = ma[i]["grad_norm"].get<double>(), nb = mb[i]["grad_norm"].get<double>();
    if (norm_tol == 0.0) {
      EXPECT_EQ(na, nb) << "step " << i + 1;
    } else {
      EXPECT_NEAR(na, nb, norm_tol * nb) << "step " << i + 1;
    }
  }
  expect_weights_close(DataParallel::path(a) + "/model.h5", DataParallel::path(b) + "/model.h5", 0.0);
  return {ma, mb};
}

// ---- Ranks started by hand must run the same run ----

// Two ranks started by hand, as torchrun starts them (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), rank r with `extra[r]` on top of the same small run: their exit codes and logs.
struct HandStarted {
  int code[2] = {-1, -1};
  std::string log[2];
  double seconds = 0;  // until both ended
};
HandStarted start_by_hand(const std::string& run, const std::string& extra0, const std::string& extra1) {
  HandStarted h;
  ScopedEnv env({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(free_port())}});
  const std::string extra[2] = {extra0, extra1};
  std::vector<test::Background> ranks;
  ranks.reserve(2);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r) {
    ::setenv("RANK", std::to_string(r).c_str(), 1);
    ranks.emplace_back(DataParallel::train(run, 4, " --train.steps=3 --dist.timeout_s=60" + extra[r]),
                       DataParallel::path(run + "-rank" + std::to_string(r) + ".log"));
  }
  for (int r = 0; r < 2; ++r) {
    h.code[r] = ranks[static_cast<size_t>(r)].wait();
    h.log[r] = test::read_text(DataParallel::path(run + "-rank" + std::to_string(r) + ".log"));
  }
  h.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return h;
}

// One rank with another learning rate used to train along silently (config.toml recording rank
// 0's): now both stop before the first step, each with the one line naming the key, both values
// and the ranks.
TEST_F(DataParallel, RanksStartedWithAnotherLearningRateStopBeforeTheFirstStep) {
  const HandStarted h = start_by_hand("hand-lr", "", " --train.lr=0.5");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(h.code[r], 2) << "rank " << r << ":\n" << h.log[r];
    EXPECT_NE(h.log[r].find("train.lr: 0.002 on rank 0; 0.5 on rank 1"), std::string::npos) << h.log[r];
    EXPECT_NE(h.log[r].find("rank " + std::to_string(r) + " of 2: the ranks were started on different runs"),
              std::string::npos) << h.log[r];
    EXPECT_EQ(lines_of(h.log[r]).size(), 1u) << h.log[r];
  }
  EXPECT_FALSE(fs::exists(path("hand-lr") + "/metrics.jsonl")) << "a step ran";
}

// Another model shape used to end in SIGABRT inside Gloo (a collective of other sizes): now the
// same one line and exit 2, before any collective.
TEST_F(DataParallel, RanksStartedWithAnotherModelShapeStopWithoutAnAbort) {
  const HandStarted h = start_by_hand("hand-layers", "", " --model.n_layers=2");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(h.code[r], 2) << "rank " << r << ":\n" << h.log[r];
    EXPECT_NE(h.log[r].find("model.n_layers: 4 on rank 0; 2 on rank 1"), std::string::npos) << h.log[r];
    EXPECT_EQ(h.log[r].find("gloo"), std::string::npos) << h.log[r];
    EXPECT_EQ(lines_of(h.log[r]).size(), 1u) << h.log[r];
  }
}

// A rank whose setup fails before the ranks compare their runs says why in its own line; the
// other learns it at once (not after dist.timeout_s) and says which rank left, whichever it is.
TEST_F(DataParallel, ARankThatFailsBeforeTheComparisonStopsTheOtherAtOnce) {
  const HandStarted a = start_by_hand("hand-gone1", "", " --data.path=" + path("no-such-data"));
  EXPECT_EQ(a.code[1], 2) << a.log[1];
  EXPECT_NE(a.log[1].find("no-such-data"), std::string::npos) << a.log[1];
  EXPECT_EQ(a.code[0], 2) << a.log[0];
  EXPECT_NE(a.log[0].find("rank 0 of 2: rank 1 stopped before the ranks compared their runs"), std::string::npos)
      << a.log[0];
  EXPECT_LT(a.seconds, 30.0) << "it waited for the 60 s timeout";
  const HandStarted b = start_by_hand("hand-gone0", " --data.path=" + path("no-such-data"), "");
  EXPECT_EQ(b.code[0], 2) << b.log[0];
  EXPECT_NE(b.log[0].find("no-such-data"), std::string::npos) << b.log[0];
  EXPECT_EQ(b.code[1], 2) << b.log[1];
  EXPECT_NE(b.log[1].find("rank 1 of 2: rank 0, which serves the rendezvous store, stopped before the ranks compared "
                          "their runs"),
            std::string::npos)
      << b.log[1];
  EXPECT_LT(b.seconds, 30.0) << "it waited for the 60 s timeout";
}

struct Variant {
  const char* name;
  const char* extra;
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class DataParallelVariants : public DataParallel, public ::testing::WithParamInterface<Variant> {};

TEST_P(DataParallelVariants, TwoRanksGiveOneRankWithTwiceTheBatch) {
  const Variant v = GetParam();
  std::string extra = std::string(" --train.steps=10 ") + v.extra;
  if (const size_t at = extra.find("@INST@"); at != std::string::npos) extra.replace(at, 6, path("inst"));
  if (std::string(v.name).find("Nvme") != std::string::npos) {
    fs::create_directories(path(std::string("nvme-") + v.name));
    extra += " --memory.home=nvme --memory.nvme_paths='[\"" + path(std::string("nvme-") + v.name) + "\"]'";
  }
  const std::string r1 = std::string("one-") + v.name, r2 = std::string("two-") + v.name;
  auto one = test::run_bcdtrain(train(r1, 8, extra));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = test::run_bcdtrain("launch --nproc 2 " + train(r2, 4, extra));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto m1 = read_metrics(path(r1) + "/metrics.jsonl"), m2 = read_metrics(path(r2) + "/metrics.jsonl");
  ASSERT_EQ(m1.size(), 10u);
  ASSERT_EQ(m2.size(), 10u) << "rank 0 alone writes metrics.jsonl";
  for (size_t i = 0; i < m1.size(); ++i) {
    for (const char* k : {"loss", "grad_norm"})
      EXPECT_NEAR(m2[i][k].get<double>(), m1[i][k].get<double>(), 1e-5 * std::abs(m1[i][k].get<double>()))
          << k << " at step " << i + 1;
    EXPECT_EQ(m2[i]["tokens"], m1[i]["tokens"]) << "tokens count every rank";
    if (m1[i].contains("block")) {
      EXPECT_EQ(m2[i]["block"], m1[i]["block"]);
    }
    if (m1[i].contains("val_loss")) {
      EXPECT_NEAR(m2[i]["val_loss"].get<double>(), m1[i]["val_loss"].get<double>(), 1e-5) << "step " << i + 1;
    }
  }
  // Rounding (one rank sums 2B sequences' gradients at once, two ranks B each, then reduce) moves
  // gradient elements near zero, where Adam's 1/sqrt(v) turns it into movement
  // (expect_weights_close): up to 2.3e-5 of a layer's norm at the end with the fused head +
  // loss (BcdKeep's layer.2; every step's loss and gradient norm agree to 1e-5 above). An error in
  // what is reduced would move the losses, and the weights by far more.
  expect_weights_close(path(r1) + "/model.h5", path(r2) + "/model.h5", 5e-5);
  // The gradient went out in buckets while backward ran, rebuilt for every new trainable set
  // (a visit starts at steps 1, 4, 7 and 10; full AdamW never changes its set).
  const auto& last = m2.back();
  const bool bcd = std::string(v.extra).find("enabled=false") == std::string::npos;
  EXPECT_EQ(last["comm_bucket_rebuilds"].get<int>(), bcd ? 4 : 1);
  EXPECT_GT(last["comm_buckets"].get<int>(), 1) << "64KiB buckets split every unit";
  EXPECT_GT(last["comm_buckets_in_backward"].get<int>(), 0);
  EXPECT_GT(last["comm_bytes_total"].get<double>(), 0);
  EXPECT_FALSE(m1.back().contains("comm_bytes_total")) << "one rank has no communication";
  // Sharded, each rank holds half of the block state: the optimizer's count, the compute image
  // (master/m/v) and the homes (host copies or NVMe objects); replicated, all of it.
  const bool sharded = std::string(v.extra).find("shard_state=false") == std::string::npos;
  EXPECT_EQ(last.contains("comm_gather_ms_total"), sharded);
  const double share = sharded ? 0.5 : 1.0;
  EXPECT_EQ(last["optim_state_bytes"].get<double>(), share * m1.back()["optim_state_bytes"].get<double>());
  const auto& mem1 = m1.back()["memory"];
  const auto& mem2 = last["memory"];
  for (const char* kind : {"master", "m", "v"}) {
    if (mem1["compute"].contains(kind)) {
      EXPECT_EQ(mem2["compute"][kind].get<double>(), share * mem1["compute"][kind].get<double>()) << kind;
    }
  }
  int homes = 0;
  for (const char* pool : {"host", "nvme"}) {
    const double b1 = mem1[pool]["total"].get<double>(), b2 = mem2[pool]["total"].get<double>();
    homes += b1 > 0;
    EXPECT_NEAR(b2, share * b1, 4096.0 * 16) << pool << " (NVMe objects round up to 4 KiB extents)";
  }
  const bool keep = std::string(v.extra).find("keep") != std::string::npos;
  EXPECT_EQ(homes, bcd && keep ? 1 : 0) << "fp32 BCD with keep: inactive units' moments have a home (host or NVMe)";
}

INSTANTIATE_TEST_SUITE_P(
    Variants, DataParallelVariants,
    ::testing::Values(
        Variant{"BcdKeep", "--bcd.enabled=true --bcd.state_on_switch=keep"},
        Variant{"BcdKeepReplicated", "--bcd.state_on_switch=keep --dist.shard_state=false"},
        Variant{"BcdResetHalves", "--bcd.state_on_switch=reset --bcd.blocks=attn_mlp --bcd.layers_per_block=1"},
        Variant{"BcdResetReplicated", "--bcd.state_on_switch=reset --dist.shard_state=false"},
        Variant{"BcdKeepNvme", "--bcd.state_on_switch=keep --bcd.order=ascending"},
        Variant{"BcdKeepNvmeReplicated", "--bcd.state_on_switch=keep --dist.shard_state=false"},
        // Vocabulary slices: their rows' gradients reach the reducer outside autograd's hooks (the
        // last visit's head.2 holds the final norm, whose bucket goes out in backward).
        Variant{"BcdKeepVocabSlices", "--bcd.state_on_switch=keep --bcd.vocab_slices=3 --bcd.order=fixed "
                                      "--bcd.fixed_order='[\"embed.0\", \"head.1\", \"embed.2\", \"head.2\"]'"},
        // The loss divides by the global batch's count of answer tokens, not each rank's own.
        Variant{"BcdKeepInstructionData", "--bcd.state_on_switch=keep --data.path=@INST@"},
        Variant{"FullAdamW", "--bcd.enabled=false"},
        Variant{"FullAdamWReplicated", "--bcd.enabled=false --dist.shard_state=false"}),
    [](const auto& info) { return std::string(info.param.name); });

// Sharding changes who updates which element, not the arithmetic: with bf16 working weights
// (fp32 masters in the sharded state, bf16 on the wire) the run is bitwise the replicated one.
// Only the gradient norm is summed in other pieces (each rank's ranges, then over the ranks), so
// it may differ in the last bits, and with it a clipping factor: clipping is off here.
TEST_F(DataParallel, ShardedStateIsBitwiseTheReplicatedState) {
  const auto [ma, mb] = bitwise_pair("shard-on", "shard-off", 8,
                                     " --train.dtype=bf16 --bcd.state_on_switch=keep --train.grad_clip=0",
                                     " --dist.shard_state=false", 1e-12);
  ASSERT_FALSE(ma.empty());
  // Sharded: each piece of the gradient is reduced into its owner (half an all-reduce's bytes)
  // and the updated bf16 weights are all-gathered (the other half, at half the width of fp32).
  const double sharded = ma.back()["comm_bytes_total"].get<double>(), replicated = mb.back()["comm_bytes_total"].get<double>();
  EXPECT_LT(sharded, 0.8 * replicated);
  EXPECT_GT(sharded, 0.7 * replicated);
  // A bf16 layer's matrices hand autograd no gradient (theirs goes into the block's fp32 sum in
  // backward): their accumulators still say when they are done, so every bucket goes out while
  // backward runs.
  for (const auto* m : {&ma, &mb}) {
    EXPECT_EQ(m->back()["block"].get<std::string>().rfind("layers", 0), 0u) << "the last step trains a layer";
    EXPECT_EQ(m->back()["comm_buckets_in_backward"].get<int>(), m->back()["comm_buckets"].get<int>());
  }
}

// The next step's forward below the active unit runs while the gradient is on the wire; the
// run is bitwise the one without that overlap.
TEST_F(DataParallel, ForwardAheadOfTheUpdateChangesNothing) {
  const auto [a, b] = bitwise_pair("ahead-on", "ahead-off", 10, " --bcd.order=descending",
                                   " --dist.overlap_forward=false");
  ASSERT_FALSE(a.empty());
  // descending: head (steps 1-3), layers.2-3 (4-6), layers.0-1 (7-9), embed (10); ahead on the
  // first two steps of each visit above the embedding, and never on the last step
  EXPECT_EQ(a.back()["comm_forward_ahead_total"].get<int>(), 6);
  EXPECT_EQ(b.back()["comm_forward_ahead_total"].get<int>(), 0);
}

// A stopped 2-rank run writes one checkpoint file and a slice file per rank; it resumes bitwise
// on 2 ranks and, re-sliced, on 1.
TEST_F(DataParallel, StoppedRunResumesExactlyAndOnOneRank) {
  const std::string extra = " --train.steps=14";
  const std::string full = path("resume-full"), run = path("resume-stopped");
  auto f = test::run_bcdtrain("launch --nproc 2 " + train("resume-full", 4, extra));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  test::Background bg("launch --nproc 2 " + train("resume-stopped", 4, extra), path("resume.log"));
  wait_for_records(run, 4);
  ASSERT_EQ(kill(bg.pid, SIGTERM), 0);
  EXPECT_EQ(bg.wait(), 128 + SIGTERM) << test::read_text(path("resume.log"));
  const auto ckpts = list_checkpoints(run + "/checkpoints");
  ASSERT_EQ(ckpts.size(), 1u) << test::read_text(path("resume.log"));
  const int64_t at = CheckpointReader(ckpts[0]).attr_int("/", "step");
  EXPECT_EQ(CheckpointReader(ckpts[0]).attr_int("/", "world_size"), 2);
  EXPECT_LT(at, 14) << "the signal came too late to test anything";
  EXPECT_NE(test::read_text(path("resume.log")).find("launch --nproc 2 train --resume"), std::string::npos)
      << test::read_text(path("resume.log"));
  // Sharded: the checkpoint file holds no optimizer state; each rank's slice is a file of its
  // own beside it, named by the save's token.
  {
    const CheckpointReader ck(ckpts[0]);
    EXPECT_EQ(ck.attr_int("/", "optimizer_shards"), 2);
    EXPECT_FALSE(ck.has("/rank0/optimizer"));
    const std::string token = ck.attr_str("/", "shard_token");
    for (int k = 0; k < 2; ++k) {
      const CheckpointReader slice(checkpoint_shard_path(ckpts[0], k, 2, token));
      EXPECT_TRUE(slice.has("/rank" + std::to_string(k) + "/optimizer")) << k;
      EXPECT_EQ(slice.attr_str("/", "shard_of"), fs::path(ckpts[0]).filename().string());
    }
    EXPECT_EQ(std::distance(fs::directory_iterator(run + "/checkpoints"), fs::directory_iterator{}), 3)
        << "the checkpoint file and two slices, nothing else";
    // A slice is not a checkpoint to resume from, and a checkpoint without one of its slices is
    // refused, naming it.
    fs::copy(run, path("resume-broken"), fs::copy_options::recursive);
    const std::string broken = path("resume-broken") + "/checkpoints/" + fs::path(ckpts[0]).filename().string();
    auto s = test::run_bcdtrain("train --quiet --resume " + checkpoint_shard_path(broken, 0, 2, token) +
                                " --train.run_dir=" + path("resume-broken-run"));
    EXPECT_EQ(s.exit_code, 2) << s.output;
    EXPECT_NE(s.output.find("one rank's slice of the checkpoint " + fs::path(ckpts[0]).filename().string()),
              std::string::npos) << s.output;
    fs::remove(checkpoint_shard_path(broken, 1, 2, token));
    auto m = test::run_bcdtrain("train --quiet --resume " + path("resume-broken") + " --train.batch_size=8");
    EXPECT_EQ(m.exit_code, 2) << m.output;
    EXPECT_NE(m.output.find("rank 1's slice of the optimizer state is missing or unreadable"), std::string::npos)
        << m.output;
  }
  // the same checkpoint, twice: on 2 ranks (exact) and on 1 rank with twice the batch (re-sliced)
  fs::copy(run, path("resume-one"), fs::copy_options::recursive);
  expect_resumed_like(run, full, 14);
  const auto mf = read_metrics(full + "/metrics.jsonl");
  auto o = test::run_bcdtrain("train --quiet --resume " + path("resume-one") + " --train.batch_size=8");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  // The batch rescaled to the same global batch on another rank count changes nothing: no warning
  // (there used to be one per rank, saying the run no longer went on as it would have).
  EXPECT_EQ(o.output.find("changed settings"), std::string::npos) << o.output;
  const auto mo = read_metrics(path("resume-one") + "/metrics.jsonl");
  ASSERT_EQ(mo.size(), 14u);
  for (size_t i = 0; i < mf.size(); ++i)
    EXPECT_NEAR(mo[i]["loss"].get<double>(), mf[i]["loss"].get<double>(), 1e-5 * mf[i]["loss"].get<double>()) << i + 1;
}

// Frozen layers' weights streamed from one shared host copy (memory.stream_weights): bitwise the
// all-resident run on 2 ranks, with each rank charged half of the copy, and nothing left in
// /dev/shm after the run.
// A signal to one rank alone stops both after the same step: each step's stop flags are summed a
// step late and every rank reads the same sum. Both write that step's checkpoint (rank 0's file,
// each rank's slice of the sharded state), and rank 0, which saw no signal itself, says it.
TEST_F(DataParallel, ASignalToOneRankStopsEveryRankAfterTheSameStep) {
  const std::string run = path("one-signal");
  test::Background bg("launch --nproc 2 " + train("one-signal", 4, " --train.steps=100000"), path("one-signal.log"));
  wait_for_records(run, 3);
  const std::vector<pid_t> ranks = children_of(bg.pid);
  ASSERT_EQ(ranks.size(), 2u) << test::read_text(path("one-signal.log"));
  ASSERT_EQ(kill(ranks[1], SIGTERM), 0);
  EXPECT_EQ(bg.wait(), 128 + SIGTERM) << test::read_text(path("one-signal.log"));
  const std::string log = test::read_text(path("one-signal.log"));
  const auto ckpts = list_checkpoints(run + "/checkpoints");
  ASSERT_EQ(ckpts.size(), 1u) << log;
  const CheckpointReader ck(ckpts[0]);
  const int64_t at = ck.attr_int("/", "step");
  EXPECT_NE(log.find(fmt::format("stopped by signal {} after step {};", SIGTERM, at)), std::string::npos) << log;
  EXPECT_EQ(read_metrics(run + "/metrics.jsonl").back()["step"].get<int64_t>(), at);
  const std::string token = ck.attr_str("/", "shard_token");
  for (int k = 0; k < 2; ++k) EXPECT_TRUE(fs::exists(checkpoint_shard_path(ckpts[0], k, 2, token))) << k << "\n" << log;
}

TEST_F(DataParallel, StreamedWeightsFromOneSharedCopyTrainBitwiseLikeResident) {
  const std::string extra = " --model.n_layers=6 --model.activation_checkpointing=true --bcd.layers_per_block=1"
                            " --bcd.order=random";
  const auto [ma, mb] = bitwise_pair("stream-off", "stream-on", 10, extra, " --memory.stream_weights=on");
  ASSERT_FALSE(mb.empty());
  EXPECT_FALSE(ma.back().contains("stream_bytes"));
  EXPECT_GT(mb.back()["stream_bytes_total"].get<uint64_t>(), 0u);
  // Each rank's share of the host copy: half of the 6 layers' working weights (fp32).
  Config cfg = load_config(test::source_path("configs/tiny.toml"),
                           {"--model.d_model=128", "--model.d_ff=384", "--model.n_kv_heads=2", "--model.n_layers=6",
                            "--model.vocab_size=2048"});
  LlamaModel m(cfg.model, torch::kFloat32, std::nullopt);
  uint64_t layers = 0;
  for (int i = 1; i <= 6; ++i) layers += static_cast<uint64_t>(m.block(i).data().nbytes());
  EXPECT_EQ(mb.back()["memory"]["host"]["peak_working"].get<uint64_t>(), (layers + 1) / 2);
  for (const auto& e : fs::directory_iterator("/dev/shm"))
    EXPECT_EQ(e.path().filename().string().find("bcdtrain-weights"), std::string::npos) << e.path();
}

// Ranks on one machine split its RAM: each plans with half of what one rank alone would get.
TEST_F(DataParallel, RanksOnOneMachineShareItsMemory) {
  const std::string extra = " --train.steps=2";
  auto one = test::run_bcdtrain(train("share-one", 8, extra));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = test::run_bcdtrain("launch --nproc 2 " + train("share-two", 4, extra));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto budget = [&](const std::string& run) {
    return read_metrics(path(run) + "/metrics.jsonl").back()["memory"]["host"]["budget"].get<double>();
  };
  const double ratio = budget("share-one") / budget("share-two");
  EXPECT_GT(ratio, 1.6) << "MemAvailable moved between the runs, or the ranks do not share it";
  EXPECT_LT(ratio, 2.5);
  EXPECT_NE(test::read_text(path("share-two") + "/config.toml").find("host_bytes = 'auto'"), std::string::npos)
      << "the run's config keeps auto: a resume on other ranks shares the machine anew";
  auto plan = test::run_bcdtrain("plan --config " + test::source_path("configs/tiny.toml") + " --nproc 2 --model.vocab_size=2048");
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("per rank, 2 ranks on this machine"), std::string::npos) << plan.output;
}

TEST_F(DataParallel, AKilledRankStopsEveryRankAndTheLauncherNamesIt) {
  const std::string run = path("killed");
  test::Background bg("launch --nproc 2 " + train("killed", 4, " --train.steps=100000 --dist.timeout_s=30"),
                      path("killed.log"));
  wait_for_records(run, 2);
  const std::vector<pid_t> ranks = children_of(bg.pid);
  ASSERT_EQ(ranks.size(), 2u) << test::read_text(path("killed.log"));
  ASSERT_EQ(kill(ranks[1], SIGKILL), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const int code = bg.wait();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = test::read_text(path("killed.log"));
  EXPECT_EQ(code, 128 + SIGKILL) << log;
  EXPECT_NE(log.find("rank 1 (pid " + std::to_string(ranks[1]) + ") was killed by signal 9"), std::string::npos) << log;
  EXPECT_LT(waited, 30.0) << "the other rank should notice at once, well within dist.timeout_s";
  for (pid_t p : ranks) EXPECT_NE(kill(p, 0), 0) << "rank pid " << p << " is still there";
}

// Ranks started by hand (no launcher to stop the others, as under torchrun or srun): a rank
// killed with -9 mid-run makes the other exit within dist.timeout_s and a few seconds, naming the
// dead rank; the newest checkpoint stays readable and the run resumes from it exactly.
TEST_F(DataParallel, ARankKilledWithoutALauncherEndsTheOtherAndTheRunResumesExactly) {
  const std::string extra = " --train.steps=16 --train.checkpoint_every=2";
  const std::string full = path("kill9-full"), run = path("kill9");
  auto f = test::run_bcdtrain("launch --nproc 2 " + train("kill9-full", 4, extra));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  {
    ScopedEnv env({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(free_port())}});
    std::vector<test::Background> ranks;
    ranks.reserve(2);
    for (int r = 0; r < 2; ++r) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ranks.emplace_back(train("kill9", 4, extra + " --dist.timeout_s=10"), path("kill9-rank" + std::to_string(r) + ".log"));
    }
    wait_for_records(run, 5);
    // Both held still, so the run cannot end between the check and the kill.
    for (auto& r : ranks) ASSERT_EQ(kill(r.pid, SIGSTOP), 0);
    const size_t seen = read_metrics(run + "/metrics.jsonl").size();
    ASSERT_LT(seen, 16u) << "the run ended before the kill";
    ASSERT_EQ(kill(ranks[1].pid, SIGKILL), 0);
    ASSERT_EQ(kill(ranks[0].pid, SIGCONT), 0);
    const auto t0 = std::chrono::steady_clock::now();
    const int code = ranks[0].wait();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(ranks[1].wait(), 128 + SIGKILL);
    const std::string log = test::read_text(path("kill9-rank0.log"));
    EXPECT_NE(code, 0) << log;
    EXPECT_NE(log.find("rank 1 did not answer: stopped, hung or dead"), std::string::npos) << "names the dead rank: " << log;
    EXPECT_LT(waited, 10.0 + 15.0) << "dist.timeout_s and a margin: " << log;
    const auto ckpts = list_checkpoints(run + "/checkpoints");
    ASSERT_FALSE(ckpts.empty()) << log;
    EXPECT_GE(CheckpointReader(ckpts.back()).attr_int("/", "step"), 2);
  }
  expect_resumed_like(run, full, 16);
}

// A rank that hangs (stopped, never answering): the others fail their next collective within
// dist.timeout_s, naming it as a timeout and naming the rank that did not answer, and the
// launcher kills the hung one after its grace.
TEST_F(DataParallel, AHungRankTimesOutTheOthersAndTheLauncherKillsIt) {
  const std::string run = path("hung");
  test::Background bg("launch --nproc 2 --grace 2 " + train("hung", 4, " --train.steps=100000 --dist.timeout_s=5"),
                      path("hung.log"));
  wait_for_records(run, 2);
  const std::vector<pid_t> ranks = children_of(bg.pid);
  ASSERT_EQ(ranks.size(), 2u) << test::read_text(path("hung.log"));
  ASSERT_EQ(kill(ranks[1], SIGSTOP), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const int code = bg.wait();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = test::read_text(path("hung.log"));
  EXPECT_NE(code, 0) << log;
  EXPECT_TRUE(log.find("rank 0 of 2: all-reduce failed") != std::string::npos ||
              log.find("rank 0 of 2: reduce failed") != std::string::npos) << log;
  EXPECT_NE(log.find("rank 1 did not answer: stopped, hung or dead"), std::string::npos) << "names the hung one: " << log;
  EXPECT_NE(log.find("rank 1 (pid " + std::to_string(ranks[1]) + ") did not stop in 2 s: killed"), std::string::npos)
      << log;
  EXPECT_LT(waited, 5.0 + 2.0 + 20.0) << "timeout, grace and a margin for a slow machine";
  for (pid_t p : ranks) EXPECT_NE(kill(p, 0), 0) << "rank pid " << p << " is still there";
}

}  // namespace
}  // namespace bcd
