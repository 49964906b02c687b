// Frozen layers' weights streamed from host memory (memory.stream_weights), end to end through
// `bcdtrain train`: bitwise the training of all-resident weights (losses, validation, final
// weights, a resume), the compute tier holding a third of the weights, the planner's bytes equal
// to the runtime accounting, "auto" streaming only what does not fit, and the refusals.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/config.h"
#include "memory/planner.h"
#include "model/llama.h"
#include "model/weights.h"
#include "test_util.h"
#include "train_run_fixture.h"
#include "runtime/machine.h"

namespace bcd {
namespace {

// The config's memory sizes with "auto" resolved as a CPU run on this machine resolves them.
MemoryConfig machine_memory(MemoryConfig mem) {
  share_machine_memory(mem, torch::kCPU, 1);
  return mem;
}

using test::read_metrics;

// 12 decoder layers, activation checkpointing on (streaming needs it).
const std::string kModel =
    " --model.n_layers=12 --model.d_model=64 --model.d_ff=192 --model.n_kv_heads=2 --model.activation_checkpointing=true"
    " --train.batch_size=2 --train.seq_len=32 --train.val_every=6 --train.val_batches=2";

// The suite's corpus, `train`, `run`, `nvme` and `expect_same_weights` (train_run_fixture.h).
class StreamRun : public test::TrainRun {
 protected:
  // `val`: compare validation losses too (a run cut in two validates at its cut as well).
  static void expect_same_runs(const std::string& a, const std::string& b, size_t steps, bool val = true) {
    const auto ma = read_metrics(run(a) + "/metrics.jsonl"), mb = read_metrics(run(b) + "/metrics.jsonl");
    ASSERT_EQ(ma.size(), steps);
    ASSERT_EQ(mb.size(), steps);
    for (size_t i = 0; i < steps; ++i) {
      EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << i + 1;
      EXPECT_EQ(ma[i]["grad_norm"].get<double>(), mb[i]["grad_norm"].get<double>()) << "step " << i + 1;
      if (val) {
        EXPECT_EQ(ma[i].value("val_loss", 0.0), mb[i].value("val_loss", 0.0)) << "step " << i + 1;
      }
      EXPECT_EQ(ma[i]["block"], mb[i]["block"]);
    }
    expect_same_weights(run(a) + "/model.h5", run(b) + "/model.h5");
  }
};

struct Variant {
  const char* name;
  const char* extra;
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class StreamVariants : public StreamRun, public ::testing::WithParamInterface<Variant> {};

TEST_P(StreamVariants, TrainsBitwiseLikeResidentWeights) {
  const Variant v = GetParam();
  std::string extra = v.extra;
  if (const size_t at = extra.find("@NVME@"); at != std::string::npos) extra.replace(at, 6, nvme(v.name));
  const std::string args = kModel + " --train.steps=12 --bcd.switch_every=2 " + extra;
  const std::string a = std::string("resident-") + v.name, b = std::string("streamed-") + v.name;
  auto ra = train(a, args + " --memory.stream_weights=off");
  ASSERT_EQ(ra.exit_code, 0) << ra.output;
  auto rb = train(b, args + " --memory.stream_weights=on");
  ASSERT_EQ(rb.exit_code, 0) << rb.output;
  expect_same_runs(a, b, 12);
  const auto ma = read_metrics(run(a) + "/metrics.jsonl"), mb = read_metrics(run(b) + "/metrics.jsonl");
  EXPECT_FALSE(ma.back().contains("stream_bytes")) << "nothing streams with stream_weights = off";
  uint64_t streamed = 0;
  for (const auto& m : mb) {
    ASSERT_TRUE(m.contains("stream_bytes")) << m.dump();
    streamed += m["stream_bytes"].get<uint64_t>();
    EXPECT_GE(m["stream_stall_ms"].get<double>(), 0.0);
    EXPECT_LE(m["stream_layer_stall_ms_max"].get<double>(), m["stream_stall_ms"].get<double>() + 1e-9);
  }
  EXPECT_GT(streamed, 0u);
  // the totals count validation's passes too
  EXPECT_GE(mb.back()["stream_bytes_total"].get<uint64_t>(), streamed);
}

INSTANTIATE_TEST_SUITE_P(
    Units, StreamVariants,
    ::testing::Values(Variant{"Layers", "--bcd.layers_per_block=1 --bcd.order=random"},
                      Variant{"TwoLayersAccum", "--bcd.layers_per_block=2 --bcd.order=ascending --train.grad_accum=2"},
                      Variant{"AttnMlpReset", "--bcd.blocks=attn_mlp --bcd.layers_per_block=1 --bcd.state_on_switch=reset"},
                      Variant{"Depth3", "--bcd.layers_per_block=1 --memory.stream_depth=3 --bcd.order=descending"},
                      // a model this small reads faster than it computes nothing: the plan calls it slow
                      Variant{"NvmeHomes", "--bcd.layers_per_block=1 --memory.stream_home=nvme --memory.accept_slow_stream=true"
                                           " --memory.nvme_paths='[\"@NVME@\"]'"}),
    [](const auto& info) { return std::string(info.param.name); });

// A step's micro-batches run each streamed layer below the active unit while it is on the compute
// tier: with the head active (every layer below it) a step of 3 micro-batches copies what a step
// of 1 copies, and with layer.5 active its 5 layers below are copied once, not 3 times. (The
// losses equal the resident run's bitwise: StreamVariants' TwoLayersAccum.)
TEST_F(StreamRun, LayersBelowTheActiveUnitAreCopiedOnceAStep) {
  const std::string args = kModel + " --train.steps=4 --train.val_every=0 --bcd.layers_per_block=1 --bcd.switch_every=2"
                                    " --bcd.order=fixed --bcd.fixed_order='[\"head\",\"layer.5\"]' --memory.stream_weights=on";
  auto r1 = train("once-accum1", args + " --train.grad_accum=1");
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  auto r3 = train("once-accum3", args + " --train.grad_accum=3");
  ASSERT_EQ(r3.exit_code, 0) << r3.output;
  const auto m1 = read_metrics(run("once-accum1") + "/metrics.jsonl"), m3 = read_metrics(run("once-accum3") + "/metrics.jsonl");
  ASSERT_EQ(m1.size(), 4u);
  ASSERT_EQ(m3.size(), 4u);
  ASSERT_EQ(m1[1]["block"], "head");
  ASSERT_EQ(m3[3]["block"], "layer.5");
  const uint64_t head1 = m1[1]["stream_bytes"].get<uint64_t>(), head3 = m3[1]["stream_bytes"].get<uint64_t>();
  EXPECT_EQ(head3, head1) << "the head's step: every layer once, whatever grad_accum";
  const uint64_t layer = head1 / 12;  // the 12 layers, each copied once
  const uint64_t mid1 = m1[3]["stream_bytes"].get<uint64_t>(), mid3 = m3[3]["stream_bytes"].get<uint64_t>();
  EXPECT_LE(mid3, 3 * mid1 - 2 * 5 * layer) << "layer.5's step: layers 0-4 copied once for 3 micro-batches";
}

// Layers homed on NVMe, read through pinned staging buffers; a read that fails (EIO) or returns
// a flipped bit stops the run in that step, before its update, with the layer, the object and the
// file named: no record of the step, nothing trained on what the read returned.
TEST_F(StreamRun, AFailedReadOfNvmeHomedWeightsStopsTheRunBeforeTheUpdate) {
  for (const char* spec : {"read:30:eio", "read:30:bitflip:1234"}) {
    const std::string name = std::string("fault-") + (spec[8] == 'e' ? "eio" : "bitflip");
    ::setenv("BCD_NVME_FAULTS", spec, 1);
    auto r = train(name, kModel + " --train.steps=6 --train.val_every=0 --bcd.layers_per_block=1"
                                  " --memory.stream_weights=on --memory.stream_home=nvme --memory.home=host"
                                  " --memory.accept_slow_stream=true"
                                  " --memory.nvme_paths='[\"" + nvme(name) + "\"]'");
    ::unsetenv("BCD_NVME_FAULTS");
    EXPECT_EQ(r.exit_code, 2) << spec << "\n" << r.output;
    EXPECT_NE(r.output.find("streamed weights of layer."), std::string::npos) << spec << "\n" << r.output;
    EXPECT_NE(r.output.find("training stopped by an I/O error in step"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("before its update"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("weights."), std::string::npos) << "the object is named: " << r.output;
    // The step that failed left no record; the ones before it finished.
    const auto m = read_metrics(run(name) + "/metrics.jsonl");
    EXPECT_LT(m.size(), 6u) << spec;
    EXPECT_GE(m.size(), 1u) << spec << ": 30 reads are more than a step's";
    const nlohmann::json summary = nlohmann::json::parse(test::read_text(run(name) + "/summary.json"));
    EXPECT_EQ(summary["status"], "failed");
    EXPECT_EQ(summary["steps"].get<int64_t>(), static_cast<int64_t>(m.size()));
    EXPECT_EQ(nvme_leftovers(name), std::vector<std::string>{}) << spec << ": the streamed weights' files stay";
  }
}

// Checkpoints read every block's weights, resumes write them: from the host copy, the active
// buffer, and (NVMe homes) the extent store through a staging buffer.
TEST_F(StreamRun, AResumeOfAStreamedRunIsExact) {
  for (const std::string home : {"host", "nvme"}) {
    const std::string args = kModel + " --bcd.layers_per_block=1 --bcd.switch_every=3 --memory.stream_weights=on"
                                      " --memory.stream_home=" + home + " --memory.accept_slow_stream=true"
                                      " --memory.nvme_paths='[\"" + nvme("resume-" + home) + "\"]'";
    const std::string full = "resume-full-" + home, split = "resume-split-" + home;
    auto a = train(full, args + " --train.steps=14");
    ASSERT_EQ(a.exit_code, 0) << a.output;
    // stopped at 7, mid-visit: the active unit's weights live in the compute tier's active buffer
    auto first = train(split, args + " --train.steps=7 --train.checkpoint_every=7");
    ASSERT_EQ(first.exit_code, 0) << first.output;
    auto rest = test::run_bcdtrain("train --quiet --resume " + run(split) + " --train.steps=14");
    ASSERT_EQ(rest.exit_code, 0) << rest.output;
    expect_same_runs(full, split, 14, /*val=*/false);
    EXPECT_EQ(nvme_leftovers("resume-" + home), std::vector<std::string>{}) << "no empty weights/ stays";
  }
}

// The weights of a 12-layer model with tied embeddings: embed and head (its norm) stay resident,
// the layers stream through a window of two, and the active unit's layer is resident for its visit.
TEST_F(StreamRun, TheComputeTierHoldsAThirdOfTheWeights) {
  const std::vector<std::string> ov = {
      "--model.n_layers=12", "--model.d_model=256", "--model.d_ff=704", "--model.tie_embeddings=true",
      "--model.activation_checkpointing=true", "--bcd.layers_per_block=1", "--bcd.order=ascending",
      "--bcd.switch_every=1", "--train.steps=15", "--train.batch_size=2", "--train.seq_len=32",
      "--train.val_every=0", "--memory.stream_weights=on"};
  std::string args;
  for (const auto& o : ov) args += " " + o;
  auto r = train("third", args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto m = read_metrics(run("third") + "/metrics.jsonl");
  const nlohmann::json& mem = m.back()["memory"];
  std::vector<std::string> cfg_ov = ov;
  cfg_ov.push_back("--model.vocab_size=2048");
  const Config cfg = load_config(test::source_path("configs/tiny.toml"), cfg_ov);
  const uint64_t weights = static_cast<uint64_t>(count_params(cfg.model)) * 4;
  const uint64_t working_peak = mem["compute"]["peak_working"].get<uint64_t>();
  EXPECT_LE(working_peak, weights / 3) << "weights " << weights;
  // The planner said so, to the byte, for the compute tier's and the host's working weights.
  const MemoryPlan plan = plan_memory(cfg.model, cfg.bcd, cfg.train, machine_memory(cfg.memory));
  ASSERT_TRUE(plan.fits) << plan.why_not;
  ASSERT_TRUE(plan.stream.on());
  EXPECT_EQ(plan.compute.by_kind[static_cast<int>(StateKind::kWorking)], working_peak);
  EXPECT_EQ(plan.host.by_kind[static_cast<int>(StateKind::kWorking)], mem["host"]["peak_working"].get<uint64_t>());
  EXPECT_LE(mem["compute"]["peak"].get<uint64_t>(), mem["compute"]["budget"].get<uint64_t>());
}

TEST_F(StreamRun, AutoStreamsOnlyWhatDoesNotFitTheComputeBudget) {
  const std::string args = kModel + " --bcd.layers_per_block=1 --train.steps=4 --train.val_every=0";
  // plenty of room: all resident
  auto roomy = train("auto-roomy", args + " --memory.stream_weights=auto --memory.compute_bytes=1GiB");
  ASSERT_EQ(roomy.exit_code, 0) << roomy.output;
  EXPECT_FALSE(read_metrics(run("auto-roomy") + "/metrics.jsonl").back().contains("stream_bytes"));
  // The budget of the all-resident plan less two layers' worth: some layers must stream.
  std::vector<std::string> ov = {"--model.n_layers=12", "--model.d_model=64", "--model.d_ff=192",
                                 "--model.n_kv_heads=2", "--model.activation_checkpointing=true",
                                 "--train.batch_size=2", "--train.seq_len=32", "--bcd.layers_per_block=1",
                                 "--model.vocab_size=2048", "--memory.stream_weights=off"};
  Config cfg = load_config(test::source_path("configs/tiny.toml"), ov);
  const MemoryPlan resident = plan_memory(cfg.model, cfg.bcd, cfg.train, machine_memory(cfg.memory));
  const uint64_t layer = resident.blocks[1].at(StateKind::kWorking).bytes;
  const uint64_t budget = resident.compute.total() - 2 * layer;
  auto tight = train("auto-tight", args + " --memory.stream_weights=auto --memory.compute_bytes=" + std::to_string(budget));
  ASSERT_EQ(tight.exit_code, 0) << tight.output;
  const auto m = read_metrics(run("auto-tight") + "/metrics.jsonl");
  ASSERT_TRUE(m.back().contains("stream_bytes"));
  EXPECT_GT(m.back()["stream_bytes_total"].get<uint64_t>(), 0u);
  EXPECT_LE(m.back()["memory"]["compute"]["peak"].get<uint64_t>(), budget);
  // The same budget with streaming off does not fit, and says so before training.
  auto off = train("auto-off", args + " --memory.stream_weights=off --memory.compute_bytes=" + std::to_string(budget));
  EXPECT_EQ(off.exit_code, 2) << off.output;
  EXPECT_NE(off.output.find("compute"), std::string::npos) << off.output;
}

TEST_F(StreamRun, StreamingWithoutCheckpointingOrBcdIsRefused) {
  const std::string args = kModel + " --train.steps=2 --memory.stream_weights=on";
  auto no_ckpt = train("refused-ckpt", args + " --model.activation_checkpointing=false");
  EXPECT_EQ(no_ckpt.exit_code, 2) << no_ckpt.output;
  EXPECT_NE(no_ckpt.output.find("activation_checkpointing"), std::string::npos) << no_ckpt.output;
  auto no_bcd = train("refused-bcd", args + " --bcd.enabled=false");
  EXPECT_EQ(no_bcd.exit_code, 2) << no_bcd.output;
  EXPECT_NE(no_bcd.output.find("stream_weights"), std::string::npos) << no_bcd.output;
  auto bad = train("refused-depth", args + " --memory.stream_depth=1");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("stream_depth"), std::string::npos) << bad.output;
  EXPECT_FALSE(std::filesystem::exists(run("refused-ckpt") + "/metrics.jsonl"));
}

}  // namespace
}  // namespace bcd
