// Data-parallel training under PyTorch's own torchrun (the one beside the reference Python, in
// LibTorch's venv): its agent's store, an elastic restart after a kill that continues exactly,
// and the error file that names why a restart refused to start.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "data_parallel_fixture.h"
#include "dist_test_helpers.h"
#include "test_util.h"

namespace bcd {
namespace {

using namespace disttest;
using test::read_metrics;
namespace fs = std::filesystem;

// torchrun's path, "" when there is none (the test then skips, saying so).
std::string torchrun_path() {
  const std::string python = BCD_TEST_PYTHON;
  if (python.empty()) return "";
  const std::string t = (fs::path(python).parent_path() / "torchrun").string();
  return ::access(t.c_str(), X_OK) == 0 ? t : "";
}

// torchrun's workers (its children running bcdtrain), in the order it started them.
// (Every thread's children: torchrun starts them from a thread of its own. A worker's name is
// "exe": bcdtrain starts itself again, main.cpp.)
std::vector<pid_t> torchrun_workers(pid_t torchrun) {
  std::vector<pid_t> out;
  const std::string tasks = "/proc/" + std::to_string(torchrun) + "/task";
  for (const auto& t : fs::directory_iterator(tasks)) {
    std::ifstream in(t.path() / "children");
    for (pid_t c; in >> c;) {
      std::error_code ec;
      if (fs::read_symlink("/proc/" + std::to_string(c) + "/exe", ec).filename() == "bcdtrain") out.push_back(c);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// `torchrun --nproc-per-node 2 --max-restarts 1 ... bcdtrain train ...` of DataParallel::train's
// run (its banner kept: it says where each attempt started) with `extra`, in the background.
test::Background torchrun_train(const std::string& torchrun, const std::string& run, const std::string& extra) {
  std::string cmd = DataParallel::train(run, 4, extra);
  cmd.erase(cmd.find("--quiet "), 8);
  return test::Background("--nproc-per-node 2 --max-restarts 1 --master-port " + std::to_string(free_port()) +
                              " --no-python " + BCD_BINARY + " " + cmd,
                          DataParallel::path(run + ".log"), torchrun);
}

// Until `run` has logged a few steps; then one of torchrun's two workers is killed with -9 while
// both are held still (so the run cannot end between the check and the kill).
void kill_one_worker_mid_run(const test::Background& torchrun, const std::string& run, size_t steps) {
  wait_for_records(run, 5);
  const std::vector<pid_t> workers = torchrun_workers(torchrun.pid);
  ASSERT_EQ(workers.size(), 2u) << test::read_text(run + ".log");
  for (pid_t w : workers) ASSERT_EQ(kill(w, SIGSTOP), 0);
  ASSERT_LT(read_metrics(run + "/metrics.jsonl").size(), steps) << "the run ended before the kill";
  ASSERT_EQ(kill(workers[1], SIGKILL), 0);
  ASSERT_EQ(kill(workers[0], SIGCONT), 0);
}

// torchrun --max-restarts 1 restarts both ranks after one is killed; with --resume=auto the second
// attempt continues from the newest complete checkpoint (its own banner says where) and ends at the
// last step, every loss bitwise an uninterrupted run's. torchrun's agent serves the store here
// (TORCHELASTIC_USE_AGENT_STORE=True): both attempts' ranks join it, their keys apart.
TEST_F(DataParallel, TorchrunRestartsEveryRankAfterAKillAndTheRunContinuesExactly) {
  const std::string torchrun = torchrun_path();
  if (torchrun.empty()) GTEST_SKIP() << "no torchrun beside BCD_TEST_PYTHON (scripts/setup.sh makes LibTorch's venv)";
  const std::string extra = " --train.steps=16 --train.checkpoint_every=2 --dist.timeout_s=10";
  const std::string full = path("elastic-full"), run = path("elastic");
  auto f = test::run_bcdtrain("launch --nproc 2 " + train("elastic-full", 4, extra));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  test::Background bg = torchrun_train(torchrun, "elastic", extra + " --resume=auto");
  kill_one_worker_mid_run(bg, run, 16);
  if (HasFatalFailure()) return (void)(kill(bg.pid, SIGTERM), bg.wait());
  const int code = bg.wait();
  const std::string log = test::read_text(run + ".log");
  ASSERT_EQ(code, 0) << log;
  EXPECT_NE(log.find("exitcode: -9"), std::string::npos) << "torchrun saw the kill: " << log;
  const size_t resumed = log.find("resumed from " + run + "/checkpoints/step-");
  EXPECT_NE(resumed, std::string::npos) << "the second attempt resumed: " << log;
  expect_ended_like(run, full, 16);
}

// Restarted without --resume: rank 0 refuses to start the run again over what the first attempt
// wrote, saying to add --resume=auto, and torchrun names that as the root cause (the rank's error
// file) instead of "exitcode 2". The first attempt's checkpoints stay.
TEST_F(DataParallel, TorchrunRestartWithoutResumeRefusesAndTorchrunNamesWhy) {
  const std::string torchrun = torchrun_path();
  if (torchrun.empty()) GTEST_SKIP() << "no torchrun beside BCD_TEST_PYTHON (scripts/setup.sh makes LibTorch's venv)";
  const std::string run = path("elastic-fresh");
  test::Background bg = torchrun_train(torchrun, "elastic-fresh",
                                       " --train.steps=100000 --train.checkpoint_every=2 --dist.timeout_s=10");
  kill_one_worker_mid_run(bg, run, 100000);
  if (HasFatalFailure()) return (void)(kill(bg.pid, SIGTERM), bg.wait());
  const std::vector<std::string> before = list_checkpoints(run + "/checkpoints");
  ASSERT_FALSE(before.empty());
  const int code = bg.wait();
  const std::string log = test::read_text(run + ".log");
  EXPECT_NE(code, 0) << log;
  const size_t root = log.find("Root Cause");
  ASSERT_NE(root, std::string::npos) << log;
  const std::string cause = log.substr(root);
  EXPECT_NE(cause.find("TORCHELASTIC_RESTART_COUNT=1: torchrun restarted this run"), std::string::npos) << log;
  EXPECT_NE(cause.find("add --resume=auto"), std::string::npos) << log;
  EXPECT_NE(cause.find("error.json"), std::string::npos) << "read from the rank's error file: " << log;
  for (const std::string& c : before) EXPECT_TRUE(fs::exists(c)) << c << " is gone";
}

}  // namespace
}  // namespace bcd
