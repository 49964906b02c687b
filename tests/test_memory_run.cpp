// Memory manager end to end, through `bcdtrain train`: NVMe homes train bitwise like memory
// homes, the planner's bytes equal the runtime accounting, budgets refuse a run before it
// starts, and low-RAM mode keeps the process's resident memory within its budget.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <sstream>

#include "io/checkpoint.h"
#include "model/weights.h"
#include "memory/planner.h"
#include "model/llama.h"
#include "base/config.h"
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

// The suite's corpus, `train`, `run`, `nvme` and `expect_same_weights` (train_run_fixture.h).
class MemoryRun : public test::TrainRun {};

// ---- NVMe homes vs memory homes: bitwise ----

class NvmeRun : public MemoryRun, public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {};

TEST_P(NvmeRun, BitwiseEqualToMemoryHomes) {
  const auto [order, state] = GetParam();
  const std::string common = " --model.d_model=64 --model.d_ff=192 --model.n_layers=4 --bcd.layers_per_block=1"
                             " --train.steps=14 --train.batch_size=2 --train.seq_len=32 --bcd.switch_every=2"
                             " --bcd.order=" + order + " --bcd.state_on_switch=" + state;
  const std::string tag = order + "-" + state;
  auto a = train("host-" + tag, common + " --memory.home=host");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  // The ascending runs read each unit at its switch (no prefetch): the same bits, later.
  const std::string prefetch = order == "ascending" ? " --memory.prefetch=false" : "";
  auto b = train("nvme-" + tag, common + prefetch + " --memory.home=nvme --memory.nvme_paths='[\"" + nvme(tag) + "\"]'");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto ma = read_metrics(run("host-" + tag) + "/metrics.jsonl");
  const auto mb = read_metrics(run("nvme-" + tag) + "/metrics.jsonl");
  ASSERT_EQ(ma.size(), 14u);
  ASSERT_EQ(mb.size(), ma.size());
  for (size_t i = 0; i < ma.size(); ++i) {
    EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(ma[i]["block"], mb[i]["block"]);
  }
  expect_same_weights(run("host-" + tag) + "/model.h5", run("nvme-" + tag) + "/model.h5");
  // the NVMe run moved its moments through NVMe; the memory run never touched it
  const auto& la = ma.back()["staged_bytes"];
  const auto& lb = mb.back()["staged_bytes"];
  if (state == "keep") {
    EXPECT_GT(lb["nvme_read"].get<uint64_t>(), 0u);
    EXPECT_GT(lb["nvme_write"].get<uint64_t>(), 0u);
    EXPECT_GT(la["host_read"].get<uint64_t>(), 0u);
  }
  EXPECT_EQ(la["nvme_read"].get<uint64_t>() + la["nvme_write"].get<uint64_t>(), 0u);
  EXPECT_TRUE(mb.back().contains("stall_ms_total"));
  EXPECT_TRUE(mb.back().contains("switch_wait_ms_total"));
}

INSTANTIATE_TEST_SUITE_P(Orders, NvmeRun,
                         ::testing::Combine(::testing::Values("random", "ascending"), ::testing::Values("keep", "reset")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// ---- Planner vs runtime accounting ----

void expect_close(uint64_t planned, uint64_t measured, const std::string& what) {
  const double p = static_cast<double>(planned), m = static_cast<double>(measured);
  EXPECT_LE(std::abs(p - m), 0.02 * std::max(p, 1.0)) << what << ": planned " << planned << ", measured " << measured;
}

void expect_plan_matches(const std::string& run_dir, const std::vector<std::string>& overrides) {
  std::vector<std::string> ov = overrides;
  ov.push_back("--model.vocab_size=2048");
  const Config cfg = load_config(test::source_path("configs/tiny.toml"), ov);
  const MemoryPlan plan = plan_memory(cfg.model, cfg.bcd, cfg.train, machine_memory(cfg.memory));
  ASSERT_TRUE(plan.fits) << plan.why_not;
  const auto m = read_metrics(run_dir + "/metrics.jsonl");
  ASSERT_FALSE(m.empty());
  const nlohmann::json& mem = m.back()["memory"];
  auto peak = [&](const char* pool, const char* use) -> uint64_t {
    const std::string k = std::string("peak_") + use;
    return mem[pool].contains(k) ? mem[pool][k].get<uint64_t>() : 0;
  };
  for (int k = 0; k < kNumStateKinds; ++k) {
    const char* kn = state_kind_name(static_cast<StateKind>(k));
    expect_close(plan.compute.by_kind[k], peak("compute", kn), std::string("compute ") + kn);
    expect_close(plan.host.by_kind[k], peak("host", kn), std::string("host ") + kn);
    expect_close(plan.nvme.by_kind[k], peak("nvme", kn), std::string("nvme ") + kn);
  }
  expect_close(plan.pinned.staging, peak("pinned", "staging"), "pinned staging");
  expect_close(plan.compute.total(), mem["compute"]["peak"].get<uint64_t>(), "compute total");
  // and no pool ever went over its budget
  for (const char* pool : {"compute", "pinned", "host"})
    EXPECT_LE(mem[pool]["peak"].get<uint64_t>(), mem[pool]["budget"].get<uint64_t>()) << pool;
}

// A run of tiny.toml with these overrides, every unit visited once (ascending, K = 1: the largest
// gradient has been allocated), uses what the plan says.
class PlannerAccounting : public MemoryRun, public ::testing::WithParamInterface<std::pair<const char*, const char*>> {};

TEST_P(PlannerAccounting, PlannerMatchesTheRunsAccounting) {
  const auto [name, extra] = GetParam();
  std::vector<std::string> ov = {"--bcd.switch_every=1", "--bcd.order=ascending", "--train.batch_size=2",
                                 "--train.seq_len=32"};
  std::istringstream more(extra);
  for (std::string o; more >> o;) ov.push_back(o);
  std::string args;
  for (const auto& o : ov) args += " " + o;
  auto r = train(std::string("plan-") + name, args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_plan_matches(run(std::string("plan-") + name), ov);
}

INSTANTIATE_TEST_SUITE_P(
    Units, PlannerAccounting,
    ::testing::Values(std::make_pair("tiny", "--train.steps=4"),
                      // embed.0-2, layers.0-1, layers.2-3, head.0-2: a slice's gradient is its rows
                      std::make_pair("slices", "--train.steps=8 --bcd.vocab_slices=3"),
                      // embed, layer.i.attn and layer.i.mlp for 4 layers, head: a half's gradient is its half
                      std::make_pair("halves", "--train.steps=10 --bcd.blocks=attn_mlp --bcd.layers_per_block=1")),
    [](const auto& info) { return std::string(info.param.first); });

TEST_F(MemoryRun, PlannerMatchesAccountingOn12LayersWithHostAndNvme) {
  // host memory for a few units' state; the rest on NVMe
  const std::vector<std::string> ov = {"--model.n_layers=12",    "--model.d_model=128",   "--model.d_ff=384",
                                       "--bcd.layers_per_block=1", "--train.steps=14",     "--bcd.switch_every=1",
                                       "--bcd.order=ascending",  "--train.batch_size=2",  "--train.seq_len=32",
                                       "--memory.host_bytes=\"8MiB\"", "--memory.nvme_paths='[\"" + nvme("plan12") + "\"]'"};
  std::string args;
  for (const auto& o : ov) args += " " + o;
  auto r = train("plan-12", args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto m = read_metrics(run("plan-12") + "/metrics.jsonl");
  const auto& mem = m.back()["memory"];
  EXPECT_GT(mem["host"]["peak"].get<uint64_t>(), 0u);
  EXPECT_GT(mem["nvme"]["peak"].get<uint64_t>(), 0u);
  std::vector<std::string> ov_cfg = ov;
  ov_cfg.back() = "--memory.nvme_paths=[\"" + nvme("plan12") + "\"]";  // as load_config sees it (no shell)
  expect_plan_matches(run("plan-12"), ov_cfg);
}

// ---- Budgets ----

TEST_F(MemoryRun, OverBudgetPlanIsRefusedBeforeTraining) {
  auto r = train("refused", "--memory.compute_bytes=\"8MiB\" --train.steps=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("memory plan does not fit: compute tier needs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("memory.compute_bytes is 8.00 MiB"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run("refused") + "/metrics.jsonl"));
}

TEST_F(MemoryRun, NvmeHomeWithoutPathsIsRefused) {
  auto r = train("nopaths", "--memory.home=nvme --train.steps=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("memory.nvme_paths is empty"), std::string::npos) << r.output;
}

// ---- Low-RAM mode ----

// A model whose master + moments are about 3x memory.host_bytes: resident memory stays within
// host_bytes + the compute tier (host memory on CPU builds) + what loading the binary costs (the
// pages of LibTorch's CPU library: about 125 MiB with pip's torch 2.11, measured as `bcdtrain
// --help`'s peak; a CPU run loads none of CUDA's) + a fixed runtime overhead.
TEST_F(MemoryRun, LowRamKeepsResidentMemoryWithinTheBudget) {
  constexpr uint64_t kOverhead = 192ull << 20;  // tokenizer, dataset, LibTorch's working memory, allocator slack
  const uint64_t loaded = test::peak_rss_bytes("--help");
  ASSERT_GT(loaded, 0u) << "bcdtrain --help could not be run";
  const uint64_t host_budget = 192ull << 20;
  const std::string args = "--train.dtype=bf16 --model.d_model=512 --model.d_ff=1536 --model.n_layers=16"
                           " --bcd.layers_per_block=1 --bcd.switch_every=1 --bcd.order=ascending --train.steps=18"
                           " --train.batch_size=1 --train.seq_len=32 --memory.host_bytes=" +
                           std::to_string(host_budget) + " --memory.nvme_paths='[\"" + nvme("lowram") + "\"]'";
  auto r = train("lowram", args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto m = read_metrics(run("lowram") + "/metrics.jsonl");
  const auto& mem = m.back()["memory"];
  const uint64_t state = mem["host"]["peak"].get<uint64_t>() + mem["nvme"]["peak"].get<uint64_t>();
  EXPECT_GE(state, 3 * host_budget) << "the test needs state of at least 3x the host budget";
  const uint64_t compute = mem["compute"]["peak"].get<uint64_t>();
  const uint64_t rss = m.back()["rss_peak_bytes"].get<uint64_t>();
  EXPECT_LE(rss, host_budget + compute + loaded + kOverhead)
      << "VmHWM " << (rss >> 20) << " MiB; host " << (host_budget >> 20) << " + compute " << (compute >> 20)
      << " + the binary loaded " << (loaded >> 20) << " + overhead " << (kOverhead >> 20) << " MiB";
  // had the state stayed in RAM, the bound would not hold: the test can fail
  EXPECT_GT(state, host_budget + kOverhead);
  EXPECT_LE(mem["host"]["peak"].get<uint64_t>() + mem["pinned"]["peak"].get<uint64_t>(), host_budget);
}

// A finished run leaves no extent files on the NVMe tier (only checkpoints resume), unless
// memory.keep_nvme_state.
TEST_F(MemoryRun, AFinishedRunRemovesItsNvmeFiles) {
  const std::string args = " --train.steps=6 --bcd.switch_every=1 --memory.home=nvme --memory.nvme_paths='[\"";
  auto gone = train("ends-gone", args + nvme("gone") + "\"]'");
  ASSERT_EQ(gone.exit_code, 0) << gone.output;
  EXPECT_GT(read_metrics(run("ends-gone") + "/metrics.jsonl").back()["staged_bytes"]["nvme_write"].get<uint64_t>(), 0u);
  for (const auto& e : std::filesystem::directory_iterator(nvme("gone"))) ADD_FAILURE() << "left: " << e.path();
  auto kept = train("ends-kept", args + nvme("kept") + "\"]' --memory.keep_nvme_state=true");
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_TRUE(std::filesystem::exists(nvme("kept") + "/extents.0.data"));
}

// A whole run under injected NVMe faults (BCD_NVME_FAULTS): every fault stops it with a line
// naming the object and the file, before a corrupt byte is trained on or saved; the
// checkpoints it wrote before the fault are those of a clean run, bit for bit.
TEST_F(MemoryRun, InjectedNvmeFaultsStopTheRunBeforeAnythingCorruptIsUsed) {
  auto args = [&](const std::string& name) {
    return "--train.steps=24 --bcd.switch_every=2 --bcd.layers_per_block=1 --memory.home=nvme"
           " --train.checkpoint_every=4 --train.keep_checkpoints=0 --memory.nvme_paths='[\"" +
           nvme(name) + "\"]'";
  };
  auto clean = train("faults-clean", args("faults-clean"));
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  int compared = 0;
  struct Case {
    const char* spec;
    const char* says;
  };
  // Reads come from checkpoints (every 4 steps) and from the second block-epoch's prefetches;
  // the faults come after a few checkpoints were written.
  for (const Case c : {Case{"read:16:bitflip:77", "checksum mismatch reading 'unit."},
                       Case{"read:14:eio", "Input/output error"}, Case{"read:18:short", "unit."},
                       Case{"write:9:enospc", "No space left on device"},
                       Case{"write:7:bitflip:4099", "checksum mismatch reading 'unit."}}) {
    const std::string name = std::string("faults-") + c.spec;
    ::setenv("BCD_NVME_FAULTS", c.spec, 1);
    auto r = train(name, args(name));
    ::unsetenv("BCD_NVME_FAULTS");
    EXPECT_EQ(r.exit_code, 2) << c.spec << "\n" << r.output;
    EXPECT_NE(r.output.find(std::string("BCD_NVME_FAULTS=") + c.spec + ": injecting faults"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.spec << "\n" << r.output;
    EXPECT_NE(r.output.find(nvme(name)), std::string::npos) << "names the file: " << r.output;
    EXPECT_FALSE(std::filesystem::exists(run(name) + "/model.h5")) << c.spec << ": no weights from a failed run";
    EXPECT_EQ(nvme_leftovers(name), std::vector<std::string>{}) << c.spec << ": the failed run's NVMe files stay";
    // what it saved before the fault is the clean run's, bit for bit; a checkpoint the clean run
    // did not write was saved when the fault stopped the run: resumed, it ends as the clean run
    const auto kept = list_checkpoints(run(name) + "/checkpoints");
    for (const std::string& ck : kept) {
      const std::string same = run("faults-clean") + "/checkpoints/" + std::filesystem::path(ck).filename().string();
      if (!std::filesystem::exists(same)) {
        EXPECT_EQ(ck, kept.back()) << c.spec << ": only the last checkpoint is written at the stop";
        EXPECT_NE(r.output.find("saved the checkpoint " + ck), std::string::npos) << r.output;
        auto resumed = test::run_bcdtrain("train --quiet --resume " + run(name));
        ASSERT_EQ(resumed.exit_code, 0) << c.spec << "\n" << resumed.output;
        expect_same_weights(run("faults-clean") + "/model.h5", run(name) + "/model.h5");
        ++compared;
        continue;
      }
      CheckpointReader a(ck), b(same);
      for (const char* ds : {"/blocks/embed", "/blocks/layer.2", "/blocks/head", "/rank0/optimizer/embed/image",
                                    "/rank0/optimizer/layer.1/image", "/rank0/optimizer/head/image"}) {
        if (!b.has(ds)) continue;
        std::vector<float> x(a.length(ds)), y(b.length(ds));
        ASSERT_EQ(x.size(), y.size()) << ds;
        a.floats(ds, x.data(), x.size());
        b.floats(ds, y.data(), y.size());
        EXPECT_EQ(x, y) << c.spec << ": " << ck << " " << ds;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0) << "no faulted run wrote a checkpoint before its fault: nothing was compared";
}

// Without periodic checkpoints an NVMe fault still loses nothing that can be kept: when every
// unit's state can be read again (a fault that does not recur) the run leaves a checkpoint of its
// last step, which resumes to the clean run's weights bit for bit; when a unit's state is
// corrupt on the drive, the weights of the last step and a line saying the optimizer state is lost.
TEST_F(MemoryRun, AnIoErrorWithoutCheckpointsLeavesWhatCanBeSaved) {
  auto args = [&](const std::string& name) {
    return "--train.steps=24 --bcd.switch_every=2 --bcd.layers_per_block=1 --memory.home=nvme"
           " --train.checkpoint_every=0 --memory.nvme_paths='[\"" + nvme(name) + "\"]'";
  };
  auto clean = train("rescue-clean", args("rescue-clean"));
  ASSERT_EQ(clean.exit_code, 0) << clean.output;

  ::setenv("BCD_NVME_FAULTS", "read:3:eio", 1);  // a prefetch of the second block-epoch
  auto eio = train("rescue-eio", args("rescue-eio"));
  ::unsetenv("BCD_NVME_FAULTS");
  EXPECT_EQ(eio.exit_code, 2) << eio.output;
  EXPECT_NE(eio.output.find("Input/output error"), std::string::npos) << eio.output;
  EXPECT_NE(eio.output.find("training stopped by an I/O error before step"), std::string::npos) << eio.output;
  EXPECT_NE(eio.output.find("saved the checkpoint"), std::string::npos) << eio.output;
  EXPECT_NE(eio.output.find("nothing is lost"), std::string::npos) << eio.output;
  ASSERT_EQ(list_checkpoints(run("rescue-eio") + "/checkpoints").size(), 1u);
  auto resumed = test::run_bcdtrain("train --quiet --resume " + run("rescue-eio"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_same_weights(run("rescue-clean") + "/model.h5", run("rescue-eio") + "/model.h5");

  ::setenv("BCD_NVME_FAULTS", "write:2:bitflip:4099", 1);  // a unit's state is corrupt on the drive
  auto flip = train("rescue-flip", args("rescue-flip"));
  ::unsetenv("BCD_NVME_FAULTS");
  EXPECT_EQ(flip.exit_code, 2) << flip.output;
  EXPECT_NE(flip.output.find("checksum mismatch"), std::string::npos) << flip.output;
  EXPECT_NE(flip.output.find("so it is lost"), std::string::npos) << flip.output;
  EXPECT_TRUE(list_checkpoints(run("rescue-flip") + "/checkpoints").empty());
  std::string weights;
  for (const auto& e : std::filesystem::directory_iterator(run("rescue-flip")))
    if (e.path().filename().string().rfind("weights-step-", 0) == 0) weights = e.path().string();
  ASSERT_FALSE(weights.empty()) << flip.output;
  EXPECT_NE(flip.output.find(weights), std::string::npos) << flip.output;
  Config cfg;
  apply_config_text(cfg, read_weights_config(weights), weights);
  LlamaModel m(cfg.model);
  load_weights(m, weights);  // whole and readable: a start for init_from or export
}

}  // namespace
}  // namespace bcd
