// Training checkpoints: exact resume (2N straight == N, stop, resume N), signals, a SIGKILL
// during a write, retention, and corrupt or truncated files.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "io/checkpoint.h"
#include "base/error.h"
#include "checkpoint_test_helpers.h"
#include "report/metrics.h"
#include "test_util.h"

namespace bcd {
namespace {

using test::read_metrics;

namespace fs = std::filesystem;

using test::Background;

class Checkpoints : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("bcd-ckpt");
    auto r = test::prepare_fortunes(dir_->file("data"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // a second dataset for mixtures, with the same tokenizer
    r = test::run_bcdtrain("prepare --input /usr/share/games/fortunes/science --out " + dir_->file("data-b") +
                           " --tokenizer " + dir_->file("data/tokenizer.model"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string path(const std::string& name) { return dir_->file(name); }
  static std::string nvme(const std::string& name) {
    fs::create_directories(dir_->file("nvme-" + name));
    return dir_->file("nvme-" + name);
  }
  // tiny.toml made small: 4 one-layer blocks + embed + head, K = 3, random order.
  static std::string args(const std::string& run, const std::string& extra) {
    return "train --quiet --config " + test::source_path("configs/tiny.toml") + " --data.path=" + dir_->file("data") +
           " --train.run_dir=" + run + " --sample.prompts='[]' --train.val_batches=1 --train.log_every=1" +
           " --model.d_model=64 --model.d_ff=192 --bcd.layers_per_block=1 --bcd.switch_every=3" +
           " --train.batch_size=2 --train.seq_len=32 --train.warmup_steps=2 " + extra;
  }
  static test::TempDir* dir_;
};
test::TempDir* Checkpoints::dir_ = nullptr;

const std::vector<std::string> kUnits = {"embed", "layer.0", "layer.1", "layer.2", "layer.3", "head"};
const std::vector<std::string> kBlocks = {"embed", "layer.0", "layer.1", "layer.2", "layer.3", "head"};

struct Variant {
  const char* name;
  const char* extra;
};

class ExactResume : public Checkpoints, public ::testing::WithParamInterface<Variant> {};

// A checkpoint's step comes from its file name, step-<N>.h5, and nothing else is one (a name of
// 19 or more digits, which once made a resume throw, included); list_checkpoints orders by it.
TEST(CheckpointFiles, StepsComeFromTheirNames) {
  EXPECT_EQ(checkpoint_file_step("run/checkpoints/step-12.h5"), 12);
  EXPECT_EQ(checkpoint_file_step("step-0.h5"), 0);
  for (const char* other : {"step-12.h5.tmp-77", "step-12.shard-0-of-2.ab12.h5", "step-.h5", "step-1x.h5", "step-12.h6",
                            "step-1234567890123456789.h5", "model.h5"})
    EXPECT_EQ(checkpoint_file_step(other), -1) << other;
  test::TempDir dir("bcd-ckpt-names");
  for (const char* f : {"step-10.h5", "step-9.h5", "step-1234567890123456789.h5", "step-2.h5.tmp-1"})
    test::write_text(dir.file(f), "");
  const std::vector<std::string> found = list_checkpoints(dir.path());
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0], dir.file("step-9.h5"));
  EXPECT_EQ(found[1], dir.file("step-10.h5"));
}

// 2N steps straight == N steps, stop, resume, N steps: losses, weights, moments, schedule, data.
TEST_P(ExactResume, TwoNStraightEqualsNThenResumeN) {
  const Variant v = GetParam();
  const std::string straight = path(std::string("straight-") + v.name), split = path(std::string("split-") + v.name);
  std::string extra = v.extra;
  if (extra.find("MIXTURE") != std::string::npos)  // the fortunes 3 : 1 with the science fortunes
    extra.replace(extra.find("MIXTURE"), 7,
                  "--data.path='' --data.paths='[\"" + path("data") + "\", \"" + path("data-b") + "\"]' --data.weights='[3, 1]'");
  if (extra.find("home=nvme") != std::string::npos)
    extra += " --memory.nvme_paths='[\"" + nvme(std::string("s-") + v.name) + "\"]'";
  auto a = test::run_bcdtrain(args(straight, extra + " --train.steps=20 --train.checkpoint_every=20"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  // the first half: same config (train.steps included: it shapes the LR schedule)
  auto b = test::run_bcdtrain(args(split, extra + " --train.steps=20 --train.checkpoint_every=10"));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  // throw away what came after step 10, as if the run had stopped there
  fs::remove(split + "/checkpoints/step-00000020.h5");
  {
    auto m = read_metrics(split + "/metrics.jsonl");
    std::ofstream out(split + "/metrics.jsonl", std::ios::trunc);
    for (size_t i = 0; i < 10; ++i) out << m[i].dump() << "\n";
  }
  auto c = test::run_bcdtrain("train --quiet --resume " + split);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_EQ(c.output.find("warning"), std::string::npos) << c.output;
  const auto ma = read_metrics(straight + "/metrics.jsonl"), mb = read_metrics(split + "/metrics.jsonl");
  ASSERT_EQ(ma.size(), 20u);
  ASSERT_EQ(mb.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(mb[i]["step"].get<int>(), static_cast<int>(i + 1));
    EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(ma[i]["block"], mb[i]["block"]) << "step " << i + 1;
  }
  test::expect_same_state(straight + "/checkpoints/step-00000020.h5", split + "/checkpoints/step-00000020.h5",
                          kUnits, kBlocks);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, ExactResume,
    ::testing::Values(Variant{"Fp32KeepNvme", "--bcd.order=random --bcd.state_on_switch=keep --memory.home=nvme"},
                      Variant{"Fp32ResetHost", "--bcd.order=random --bcd.state_on_switch=reset --memory.home=host"},
                      Variant{"Bf16KeepHost", "--bcd.order=ascending --bcd.state_on_switch=keep --train.dtype=bf16"},
                      Variant{"MixtureKeepHost", "--bcd.order=random --bcd.state_on_switch=keep MIXTURE"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(Checkpoints, SigtermCheckpointsThenResumeFinishesTheRun) {
  const std::string run = path("sigterm"), ref = path("sigterm-ref");
  const std::string extra = " --train.steps=60 --bcd.order=random";
  Background bg(args(run, extra), path("sigterm.log"));
  // wait for a few steps, then ask it to stop
  for (int i = 0; i < 600; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (fs::exists(run + "/metrics.jsonl") && read_metrics(run + "/metrics.jsonl").size() >= 5) break;
  }
  ASSERT_EQ(kill(bg.pid, SIGTERM), 0);
  EXPECT_EQ(bg.wait(), 128 + SIGTERM) << test::read_text(path("sigterm.log"));
  const auto ckpts = list_checkpoints(run + "/checkpoints");
  ASSERT_EQ(ckpts.size(), 1u) << test::read_text(path("sigterm.log"));
  const int64_t at = CheckpointReader(ckpts[0]).attr_int("/", "step");
  EXPECT_LT(at, 60) << "the signal came too late to test anything";
  EXPECT_EQ(static_cast<int64_t>(read_metrics(run + "/metrics.jsonl").size()), at);
  EXPECT_NE(test::read_text(path("sigterm.log")).find("--resume"), std::string::npos);
  // resumed to the end, the run is the uninterrupted one
  auto r = test::run_bcdtrain("train --quiet --resume " + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = test::run_bcdtrain(args(ref, extra));
  ASSERT_EQ(s.exit_code, 0) << s.output;
  const auto mr = read_metrics(run + "/metrics.jsonl"), ms = read_metrics(ref + "/metrics.jsonl");
  ASSERT_EQ(mr.size(), 60u);
  ASSERT_EQ(ms.size(), 60u);
  for (size_t i = 0; i < mr.size(); ++i) EXPECT_EQ(mr[i]["loss"].get<double>(), ms[i]["loss"].get<double>()) << i + 1;
}

// A process killed while writing a checkpoint leaves the previous one loadable and correct:
// resuming from it reproduces the losses the killed run logged after it.
TEST_F(Checkpoints, SigkillDuringAWriteLeavesThePreviousCheckpoint) {
  const std::string run = path("sigkill");
  // a model big enough that a checkpoint takes a while to write
  const std::string extra = " --model.d_model=384 --model.d_ff=1024 --model.n_layers=6 --train.steps=40"
                            " --train.checkpoint_every=2 --train.keep_checkpoints=0";
  Background bg(args(run, extra), path("sigkill.log"));
  bool killed = false;
  for (int i = 0; i < 200000 && !killed; ++i) {
    std::error_code ec;
    int done = 0;
    bool writing = false;
    for (const auto& e : fs::directory_iterator(run + "/checkpoints", ec)) {
      const std::string n = e.path().filename().string();
      if (n.find(".tmp-") != std::string::npos) writing = true;
      else ++done;
    }
    if (writing && done >= 2) {
      kill(bg.pid, SIGKILL);
      killed = true;
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (i % 1000 == 0 && waitpid(bg.pid, nullptr, WNOHANG) == bg.pid) break;  // finished first
  }
  ASSERT_TRUE(killed) << "never caught a checkpoint being written";
  EXPECT_EQ(bg.wait(), 128 + SIGKILL);
  const auto ckpts = list_checkpoints(run + "/checkpoints");
  ASSERT_GE(ckpts.size(), 2u);
  const int64_t prev = CheckpointReader(ckpts.back()).attr_int("/", "step");
  const auto logged = read_metrics(run + "/metrics.jsonl");  // the killed run got past `prev`
  ASSERT_GT(static_cast<int64_t>(logged.size()), prev);
  const int64_t until = std::min<int64_t>(static_cast<int64_t>(logged.size()), prev + 2);
  // Resumed with the same train.steps: the LR schedule depends on it.
  auto r = test::run_bcdtrain("train --quiet --resume " + ckpts.back() + " --train.run_dir=" + path("sigkill-resumed") +
                              " --train.steps=40");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto resumed = read_metrics(path("sigkill-resumed") + "/metrics.jsonl");
  ASSERT_GE(static_cast<int64_t>(resumed.size()), until - prev);
  for (int64_t s = prev + 1; s <= until; ++s)
    EXPECT_EQ(resumed[s - prev - 1]["loss"].get<double>(), logged[s - 1]["loss"].get<double>()) << "step " << s;
  // the dead writer's temporary file is cleared by the next save of the resumed run... in its own dir
  EXPECT_TRUE(fs::exists(path("sigkill-resumed") + "/checkpoints"));
}

// A resume reads the checkpoint's weights (a part per block) and optimizer state (a part per
// unit) before the first step: in a log one line when it starts and one when it is done; with
// --quiet nothing.
TEST_F(Checkpoints, ResumeSaysItIsReadingTheCheckpoint) {
  const std::string run = path("progress");
  auto a = test::run_bcdtrain(args(run, " --train.steps=4 --train.checkpoint_every=4"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output.find("reading checkpoint"), std::string::npos) << a.output;
  auto r = test::run_bcdtrain("train --resume " + run + " --train.steps=6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string parts = std::to_string(kBlocks.size() + kUnits.size()) + " parts";
  const size_t start = r.output.find("reading checkpoint step-00000004.h5: " + parts + " ...\n");
  const size_t done = r.output.find("reading checkpoint step-00000004.h5: " + parts + " in ");
  ASSERT_NE(start, std::string::npos) << r.output;
  ASSERT_NE(done, std::string::npos) << r.output;
  EXPECT_LT(start, done);
  EXPECT_LT(done, r.output.find("step 5/6 |")) << "read before the first step";
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << "no redrawing in a pipe";
  auto q = test::run_bcdtrain("train --quiet --resume " + run + " --train.steps=8");
  ASSERT_EQ(q.exit_code, 0) << q.output;
  EXPECT_EQ(q.output.find("reading checkpoint"), std::string::npos) << q.output;
}

// Two runs on one run directory would tear metrics.jsonl and mix checkpoints: the second is
// refused, naming the first one's PID; once the first is gone the directory is free again.
TEST_F(Checkpoints, ASecondRunOnTheSameDirectoryIsRefused) {
  const std::string run = path("locked");
  Background bg(args(run, " --train.steps=100000"), path("locked.log"));
  for (int i = 0; i < 1500 && !fs::exists(run + "/metrics.jsonl"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto second = test::run_bcdtrain(args(run, " --train.steps=2 --overwrite"));
  auto resumed = test::run_bcdtrain("train --quiet --resume " + run);
  auto resumed_auto = test::run_bcdtrain(args(run, " --train.steps=100000 --resume auto"));
  ASSERT_EQ(kill(bg.pid, SIGINT), 0);
  EXPECT_EQ(bg.wait(), 128 + SIGINT) << test::read_text(path("locked.log"));
  EXPECT_EQ(second.exit_code, 2) << second.output;
  EXPECT_NE(second.output.find(run + ": the run directory is in use by another bcdtrain process (pid " +
                               std::to_string(bg.pid) + ")"),
            std::string::npos)
      << second.output;
  // what a resume finds there is half a run: the refusal names the holder, not a missing checkpoint
  for (const auto* r : {&resumed, &resumed_auto}) {
    EXPECT_EQ(r->exit_code, 2) << "not even to resume it: " << r->output;
    EXPECT_NE(r->output.find(run + ": the run directory is in use by another bcdtrain process (pid " +
                             std::to_string(bg.pid) + ")"),
              std::string::npos)
        << r->output;
  }
  const auto first = read_metrics(run + "/metrics.jsonl");
  ASSERT_FALSE(first.empty());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i]["step"].get<int>(), static_cast<int>(i + 1));
  // the lock died with its holder: the stopped run resumes
  auto after = test::run_bcdtrain("train --quiet --resume " + run + " --train.steps=" + std::to_string(first.size() + 1));
  EXPECT_EQ(after.exit_code, 0) << after.output;
}

// A fresh run into a directory holding an earlier run's checkpoints would lose its own to the
// retention rule (theirs have higher steps) and --resume would continue the old run: refused,
// unless --overwrite, which deletes the old checkpoints first.
TEST_F(Checkpoints, AFreshRunDoesNotMixWithAnEarlierRunsCheckpoints) {
  const std::string run = path("fresh");
  auto old = test::run_bcdtrain(args(run, " --train.steps=6 --train.checkpoint_every=3"));
  ASSERT_EQ(old.exit_code, 0) << old.output;
  ASSERT_EQ(list_checkpoints(run + "/checkpoints").size(), 2u);
  const std::string metrics_before = test::read_text(run + "/metrics.jsonl");
  auto refused = test::run_bcdtrain(args(run, " --train.steps=2 --train.checkpoint_every=2"));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find(run + ": holds 2 checkpoint(s) of an earlier run (newest step-00000006.h5); "
                                      "continue it with `bcdtrain train --resume " + run + "`"),
            std::string::npos)
      << refused.output;
  EXPECT_EQ(test::read_text(run + "/metrics.jsonl"), metrics_before) << "the refused run touched nothing";
  EXPECT_EQ(list_checkpoints(run + "/checkpoints").size(), 2u);
  auto both = test::run_bcdtrain("train --quiet --resume " + run + " --overwrite");
  EXPECT_EQ(both.exit_code, 2) << both.output;
  auto fresh = test::run_bcdtrain(args(run, " --train.steps=2 --train.checkpoint_every=2 --overwrite"));
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  const auto c = list_checkpoints(run + "/checkpoints");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(fs::path(c[0]).filename(), "step-00000002.h5");
  EXPECT_EQ(read_metrics(run + "/metrics.jsonl").size(), 2u);
}

// --resume and overrides, one rule: what the checkpoint's state is made of cannot change (refused
// up front, no warning first); what only changes the remaining steps is applied with a warning;
// where and how it runs is applied silently.
TEST_F(Checkpoints, ResumeRefusesWhatTheStateIsMadeOfAndWarnsOfTheRest) {
  const std::string run = path("overrides");
  auto a = test::run_bcdtrain(args(run, " --train.steps=3 --train.checkpoint_every=3"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto r = test::run_bcdtrain("train --quiet --resume " + run + " --train.steps=5 --model.d_model=128 --bcd.order=descending");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--resume cannot change bcd.order ('random' -> 'descending'), model.d_model (64 -> 128)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("warning"), std::string::npos) << "refused, not warned first: " << r.output;
  EXPECT_EQ(read_metrics(run + "/metrics.jsonl").size(), 3u);
  auto w = test::run_bcdtrain("train --quiet --resume " + run +
                              " --train.steps=4 --train.lr=0.001 --train.threads=1 --train.log_every=2");
  EXPECT_EQ(w.exit_code, 0) << w.output;
  EXPECT_NE(w.output.find("warning: resuming with changed settings: train.lr (0.002 -> 0.001), train.steps (3 -> 4)"),
            std::string::npos)
      << w.output;
  EXPECT_EQ(w.output.find("threads"), std::string::npos) << w.output;
}

TEST_F(Checkpoints, KeepsTheNewestN) {
  const std::string run = path("keep");
  auto r = test::run_bcdtrain(args(run, " --train.steps=7 --train.checkpoint_every=1 --train.keep_checkpoints=2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto c = list_checkpoints(run + "/checkpoints");
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(fs::path(c[0]).filename(), "step-00000006.h5");
  EXPECT_EQ(fs::path(c[1]).filename(), "step-00000007.h5");
}

TEST_F(Checkpoints, CorruptOrTruncatedCheckpointIsAClearError) {
  const std::string run = path("corrupt");
  auto r = test::run_bcdtrain(args(run, " --train.steps=3 --train.checkpoint_every=3"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string good = run + "/checkpoints/step-00000003.h5";
  const std::string text = test::read_text(good);
  // truncated
  test::write_text(path("truncated.h5"), text.substr(0, text.size() / 2));
  auto t = test::run_bcdtrain("train --quiet --resume " + path("truncated.h5") + " --train.run_dir=" + path("t-run"));
  EXPECT_EQ(t.exit_code, 2) << t.output;
  EXPECT_NE(t.output.find("truncated.h5"), std::string::npos) << t.output;
  // a flipped byte inside the embedding's data: caught by the dataset checksum
  std::string bad = text;
  bad[bad.size() / 3] ^= 0x40;
  test::write_text(path("flipped.h5"), bad);
  auto f = test::run_bcdtrain("train --quiet --resume " + path("flipped.h5") + " --train.run_dir=" + path("f-run"));
  EXPECT_EQ(f.exit_code, 2) << f.output;
  EXPECT_NE(f.output.find("flipped.h5"), std::string::npos) << f.output;
  // a flipped bit in the stored config (the learning rate): caught by the attributes' checksum,
  // not trained on
  const size_t lr = text.find("\nlr = ");
  ASSERT_NE(lr, std::string::npos) << "the config is stored as TOML text";
  std::string meta = text;
  meta[lr + 6] ^= 0x01;  // one digit of the value: 0.002 -> 1.002
  test::write_text(path("meta.h5"), meta);
  auto m = test::run_bcdtrain("train --quiet --resume " + path("meta.h5") + " --train.run_dir=" + path("m-run"));
  EXPECT_EQ(m.exit_code, 2) << m.output;
  EXPECT_NE(m.output.find("meta.h5: the checkpoint's attributes (config, step counts, scheduler and data positions) "
                          "fail their checksum"),
            std::string::npos)
      << m.output;
  // a weights file is not a checkpoint
  auto w = test::run_bcdtrain("train --quiet --resume " + run + "/model.h5");
  EXPECT_EQ(w.exit_code, 2) << w.output;
  EXPECT_NE(w.output.find("not a bcdtrain checkpoint"), std::string::npos) << w.output;
  // nothing to resume
  auto n = test::run_bcdtrain("train --quiet --resume " + path("no-such-run"));
  EXPECT_EQ(n.exit_code, 2) << n.output;
  // the good one still resumes (to a later end)
  auto g = test::run_bcdtrain("train --quiet --resume " + good + " --train.steps=4 --train.run_dir=" + path("g-run"));
  EXPECT_EQ(g.exit_code, 0) << g.output;
  // going further changes the LR schedule: allowed, and said
  EXPECT_NE(g.output.find("warning: resuming with changed settings: train.steps (3 -> 4)"), std::string::npos)
      << g.output;
}

// A copied checkpoint resumed as a file used to continue in the run directory its config names:
// a finished run's model.h5 and later checkpoints were replaced. Refused now, naming what is
// there; --train.run_dir elsewhere goes on, leaving the run as it was; --overwrite writes over
// it, removing the later checkpoints first (a later --resume of the directory must not find them).
TEST_F(Checkpoints, AResumeFromACopiedCheckpointDoesNotWriteOverTheRunItCameFrom) {
  const std::string run = path("copied");
  auto a = test::run_bcdtrain(args(run, " --train.steps=6 --train.checkpoint_every=2 --train.keep_checkpoints=0"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::string copy = path("copy-step2.h5");
  fs::copy_file(run + "/checkpoints/step-00000002.h5", copy);
  const std::string model = test::read_text(run + "/model.h5");
  auto r = test::run_bcdtrain("train --quiet --resume " + copy + " --train.lr=0.01");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("it would continue in " + run + ", which holds 2 checkpoint(s) after step 2 (newest "
                          "step-00000006.h5) and a finished run's model.h5"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(test::read_text(run + "/model.h5"), model);
  EXPECT_EQ(list_checkpoints(run + "/checkpoints").size(), 3u);
  auto e = test::run_bcdtrain("train --resume " + copy + " --train.lr=0.01 --train.run_dir=" + path("copied-elsewhere"));
  EXPECT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("resuming " + copy + " (step 2) in " + path("copied-elsewhere")), std::string::npos) << e.output;
  EXPECT_EQ(test::read_text(run + "/model.h5"), model);
  auto o = test::run_bcdtrain("train --quiet --resume " + copy + " --train.lr=0.01 --overwrite --train.steps=4");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  std::vector<std::string> names;
  for (const auto& c : list_checkpoints(run + "/checkpoints")) names.push_back(fs::path(c).filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"step-00000002.h5", "step-00000004.h5"}));
  EXPECT_NE(test::read_text(run + "/model.h5"), model);
}

// A sharded run's slice files go with their checkpoint file: retention removes an old
// checkpoint's slices, and slices of no checkpoint (a save that stopped before its checkpoint
// file, or an earlier save of the same step) go at the next prune; a checkpoint file that cannot
// be read keeps its slices for whoever looks into it.
TEST(CheckpointFiles, SlicesGoWithTheirCheckpointFile) {
  test::TempDir dir("bcd-slices");
  const std::string d = dir.file("checkpoints");
  fs::create_directories(d);
  auto checkpoint = [&](int64_t step, const std::string& token) {
    const std::string p = fmt::format("{}/step-{:08d}.h5", d, step);
    CheckpointWriter w(p);
    w.attr("/", "step", step);
    w.attr("/", "optimizer_shards", int64_t{2});
    w.attr("/", "shard_token", token);
    w.commit();
    return p;
  };
  auto slice = [&](int64_t step, int rank, const std::string& token) {
    const std::string p = checkpoint_shard_path(fmt::format("{}/step-{:08d}.h5", d, step), rank, 2, token);
    CheckpointWriter w(p);
    w.attr("/", "shard_token", token);
    w.commit();
    return p;
  };
  EXPECT_EQ(checkpoint_shard_path("/r/checkpoints/step-00000012.h5", 1, 4, "00ab"),
            "/r/checkpoints/step-00000012.shard-1-of-4.00ab.h5");
  const std::string old = checkpoint(1, "00000000d1");
  const std::string old0 = slice(1, 0, "00000000d1"), old1 = slice(1, 1, "00000000d1");
  checkpoint(2, "00000000a2");
  const std::string kept0 = slice(2, 0, "00000000a2"), kept1 = slice(2, 1, "00000000a2");
  const std::string earlier = slice(2, 0, "00000000b2");  // an earlier, interrupted save of step 2
  const std::string lone = slice(3, 1, "00000000c3");     // a save of step 3 that never finished
  test::write_text(fmt::format("{}/step-{:08d}.h5", d, 4), "not HDF5");
  const std::string unreadable = slice(4, 0, "00000000e4");
  ASSERT_EQ(list_checkpoints(d).size(), 3u) << "slice files are not checkpoints";
  prune_checkpoints(d, 2);
  EXPECT_FALSE(fs::exists(old));
  for (const auto& gone : {old0, old1, earlier, lone}) EXPECT_FALSE(fs::exists(gone)) << gone;
  for (const auto& kept : {kept0, kept1, unreadable}) EXPECT_TRUE(fs::exists(kept)) << kept;
}

}  // namespace
}  // namespace bcd

namespace bcd {
namespace {

// A resume keeps the records before its step. A torn last line is cut; a bad line with records
// after it stops the resume naming it, and the file keeps every record.
TEST(MetricsResume, OnlyATornLastLineIsCutAndABadLineInTheMiddleStopsTheResume) {
  test::TempDir dir("bcd-metrics-resume");
  const std::string path = dir.file("metrics.jsonl");
  std::string good;
  for (int s = 1; s <= 6; ++s) good += "{\"step\": " + std::to_string(s) + ", \"loss\": 1.5}\n";
  test::write_text(path, good + "{\"step\": 7, \"lo");  // killed mid-write
  truncate_metrics(path, 5);
  EXPECT_EQ(test::read_text(path), good.substr(0, good.find("{\"step\": 5")));

  const std::string bad = good.substr(0, good.find("{\"step\": 3")) + "not json\n" + good.substr(good.find("{\"step\": 3"));
  test::write_text(path, bad);
  const std::string e = test::error_of([&] { truncate_metrics(path, 5); });
  EXPECT_NE(e.find(path + ": line 3 is not a metrics record"), std::string::npos) << e;
  EXPECT_NE(e.find("nothing was changed"), std::string::npos) << e;
  EXPECT_EQ(test::read_text(path), bad);
}

}  // namespace
}  // namespace bcd
