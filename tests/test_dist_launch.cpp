// Where ranks come from (torchrun and Slurm variables, `bcdtrain launch`), and ranks that do not
// agree on the run: refused before anyone trains. Training on several ranks: test_dist.cpp.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "cli/launch_args.h"
#include "dist/launcher.h"
#include "dist/process_group.h"
#include "dist/run_identity.h"
#include "runtime/run_setup.h"
#ifdef BCD_HAVE_GLOO
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif
#include "dist_test_helpers.h"
#include "test_util.h"

namespace bcd {
namespace {

using namespace disttest;
using test::error_of;
using cli::parse_launch_args;

// ---- NCCL never blocks the host ----

// TORCH_NCCL_BLOCKING_WAIT (or its old name) makes every wait() on a collective block the host
// and disables async error handling: no source file may set it (process_group.cpp unsets one a
// user exported, saying so). The scan covers every way the program sets an environment variable.
TEST(Nccl, NoSourceSetsABlockingWait) {
  int scanned = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(test::source_path("src"))) {
    if (!e.is_regular_file()) continue;
    const std::string text = test::read_text(e.path().string());
    ++scanned;
    size_t at = 0;
    while ((at = text.find("BLOCKING_WAIT", at)) != std::string::npos) {
      const size_t line_start = text.rfind('\n', at) + 1;
      const std::string line = text.substr(line_start, text.find('\n', at) - line_start);
      EXPECT_EQ(line.find("setenv"), std::string::npos) << e.path() << ": " << line;
      EXPECT_EQ(line.find("putenv"), std::string::npos) << e.path() << ": " << line;
      EXPECT_EQ(line.find("=1"), std::string::npos) << e.path() << ": " << line;
      at += 1;
    }
  }
  EXPECT_GT(scanned, 50) << "the source tree was not found";
}

// ---- Where ranks come from ----


// Where `d` places this process: rank of world, local rank of the node's ranks, the store's address.
void expect_place(const DistEnv& d, int rank, int world, int local, int local_world, const std::string& addr, int port) {
  EXPECT_EQ(d.rank, rank);
  EXPECT_EQ(d.world_size, world);
  EXPECT_EQ(d.local_rank, local);
  EXPECT_EQ(d.local_world_size, local_world);
  EXPECT_EQ(d.master_addr, addr);
  EXPECT_EQ(d.master_port, port);
}

TEST(DistEnv, NoVariablesIsOneRank) {
  ScopedEnv env({});
  const DistEnv d = DistEnv::from_environment();
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.world_size, 1);
  EXPECT_EQ(d.local_world_size, 1);
}

TEST(DistEnv, TorchrunVariables) {
  ScopedEnv env({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                 {"MASTER_ADDR", "node07"}, {"MASTER_PORT", "29411"}});
  const DistEnv d = DistEnv::from_environment();
  expect_place(d, 5, 8, 1, 4, "node07", 29411);
}

TEST(DistEnv, SlurmVariables) {
  ScopedEnv env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                 {"SLURM_NTASKS_PER_NODE", "2"}, {"SLURM_JOB_NODELIST", "gpu[07-08]"}, {"SLURM_JOB_ID", "123456"}});
  const DistEnv d = DistEnv::from_environment();
  expect_place(d, 3, 4, 1, 2, "gpu07", 29500 + 456);
}

TEST(DistEnv, FirstSlurmHost) {
  EXPECT_EQ(first_slurm_host("node1"), "node1");
  EXPECT_EQ(first_slurm_host("node1,node2"), "node1");
  EXPECT_EQ(first_slurm_host("gpu[03-05,09],cpu1"), "gpu03");
  EXPECT_EQ(first_slurm_host("gpu[11,12]"), "gpu11");
  EXPECT_EQ(first_slurm_host("rack[2]-n[1-4]"), "rack2-n[1-4]");
  EXPECT_NE(error_of([] { first_slurm_host("gpu[03-05"); }).find("unbalanced"), std::string::npos);
}

TEST(DistEnv, BadVariablesNameTheVariable) {
  {
    ScopedEnv env({{"RANK", "one"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}});
    EXPECT_NE(error_of([] { DistEnv::from_environment(); }).find("RANK=\"one\""), std::string::npos);
  }
  {
    ScopedEnv env({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}});
    EXPECT_NE(error_of([] { DistEnv::from_environment(); }).find("rank 2 is outside the world of 2"), std::string::npos);
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
    EXPECT_NE(error_of([] { DistEnv::from_environment(); }).find("MASTER_ADDR is not set"), std::string::npos);
  }
  {
    ScopedEnv env({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}});
    EXPECT_NE(error_of([] { DistEnv::from_environment(); }).find("RANK is not"), std::string::npos);
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}});
    EXPECT_NE(error_of([] { DistEnv::from_environment(); }).find("MASTER_PORT=70000"), std::string::npos);
  }
}

// One rank's variables, as DistEnv::from reads them (threads of one test each get their own).
DistEnv::Lookup vars(const std::map<std::string, std::string>& m) {
  return [m](const char* name) -> std::optional<std::string> {
    const auto it = m.find(name);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}

// A Kubeflow PyTorchJob sets RANK/WORLD_SIZE/MASTER_* and no LOCAL_RANK: one rank per pod, local
// rank 0 (it was the global rank, so pod 3 of 4 asked for a fourth GPU it does not have).
TEST(DistEnv, WithoutLocalRankEachRankIsAloneOnItsMachine) {
  const DistEnv d = DistEnv::from(vars({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "job-master-0"},
                                        {"MASTER_PORT", "23456"}}));
  expect_place(d, 3, 4, 0, 1, "job-master-0", 23456);
  EXPECT_FALSE(d.agent_store);
  EXPECT_EQ(d.restart_count, 0);
  const std::string err = error_of([] {
    DistEnv::from(vars({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"LOCAL_RANK", "2"},
                        {"LOCAL_WORLD_SIZE", "2"}}));
  });
  EXPECT_NE(err.find("local rank 2 is outside the 2 ranks on this machine"), std::string::npos) << err;
}

// torchrun's own variables: its agent serves the store, and which attempt of an elastic run this is.
TEST(DistEnv, TorchrunsAgentStoreAndRestartCount) {
  const DistEnv d = DistEnv::from(vars({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"},
                                        {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"},
                                        {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "2"}}));
  EXPECT_TRUE(d.agent_store);
  EXPECT_EQ(d.restart_count, 2);
  EXPECT_FALSE(DistEnv::from(vars({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"}}))
                   .agent_store);
  EXPECT_NE(error_of([] {
              DistEnv::from(vars({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RESTART_COUNT", "x"}}));
            }).find("TORCHELASTIC_RESTART_COUNT=\"x\""),
            std::string::npos);
}

// mpirun -np 4 -x MASTER_ADDR=n0: Open MPI's ranks, before the SLURM_PROCID=0 an allocation's
// batch step leaves to every process mpirun starts.
TEST(DistEnv, OpenMpiVariables) {
  const DistEnv d = DistEnv::from(vars({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                        {"MASTER_ADDR", "n0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}));
  EXPECT_EQ(d.source, "OMPI_COMM_WORLD_RANK/SIZE");
  expect_place(d, 3, 4, 1, 2, "n0", 29500);
  const std::string err =
      error_of([] { DistEnv::from(vars({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}})); });
  EXPECT_NE(err.find("mpirun -x MASTER_ADDR="), std::string::npos) << err;
}

// Kubeflow's PET_* (a TrainJob's, meant for torchrun): one rank per pod; more need a launcher.
TEST(DistEnv, KubeflowPetVariables) {
  const DistEnv d = DistEnv::from(vars({{"PET_NODE_RANK", "2"}, {"PET_NNODES", "3"}, {"PET_NPROC_PER_NODE", "1"},
                                        {"PET_MASTER_ADDR", "train-node-0-0.train"}, {"PET_MASTER_PORT", "29400"}}));
  expect_place(d, 2, 3, 0, 1, "train-node-0-0.train", 29400);
  const std::string err = error_of(
      [] { DistEnv::from(vars({{"PET_NODE_RANK", "0"}, {"PET_NNODES", "2"}, {"PET_NPROC_PER_NODE", "4"}})); });
  EXPECT_NE(err.find("PET_NPROC_PER_NODE=4"), std::string::npos) << err;
  EXPECT_NE(err.find("bcdtrain launch"), std::string::npos) << err;
  EXPECT_NE(error_of([] { DistEnv::from(vars({{"PET_NODE_RANK", "0"}, {"PET_NNODES", "2"}})); }).find("PET_MASTER_ADDR"),
            std::string::npos);
}

// srun --ntasks=4 over two nodes without --ntasks-per-node: no SLURM_NTASKS_PER_NODE, local id 1.
TEST(DistEnv, SlurmWithoutTasksPerNodeCountsTheLocalId) {
  const DistEnv d = DistEnv::from(vars({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                                        {"SLURM_JOB_NODELIST", "n[1-2]"}}));
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 2);
}

// A rank that fails under torchrun leaves torch's error-file record (what @record writes) at
// TORCHELASTIC_ERROR_FILE: torchrun prints its message as the root cause. None without the variable.
TEST(DistEnv, AFailingRankWritesTorchrunsErrorFile) {
  test::TempDir dir("bcd-error-file");
  const std::string file = dir.file("error.json");
  const auto before = std::chrono::system_clock::now();
  const auto r = test::run_shell("TORCHELASTIC_ERROR_FILE=" + file + " " + BCD_BINARY + " train --config " +
                                 test::source_path("configs/tiny.toml") + " --train.lr=-1 --train.run_dir=" +
                                 dir.file("run"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  ASSERT_TRUE(std::filesystem::exists(file)) << r.output;
  const auto j = nlohmann::json::parse(test::read_text(file));
  const std::string message = j.at("message").at("message").get<std::string>();
  EXPECT_NE(message.find("[train] lr must be positive"), std::string::npos) << j.dump();
  EXPECT_EQ(j.at("message").at("errorCode").get<int>(), 2);
  const int64_t ts = std::stoll(j.at("message").at("extraInfo").at("timestamp").get<std::string>());
  EXPECT_GE(ts, std::chrono::duration_cast<std::chrono::seconds>(before.time_since_epoch()).count() - 1);
  const auto quiet = test::run_shell("TORCHELASTIC_ERROR_FILE= " + std::string(BCD_BINARY) + " train --config " +
                                     test::source_path("configs/tiny.toml") + " --train.lr=-1");
  EXPECT_EQ(quiet.exit_code, 2) << quiet.output;
}

// ---- Each launcher's variables form a group ----

// Two ranks in threads of this process, each from its own variables: they connect, agree and sum.
void expect_group_forms(const std::vector<std::map<std::string, std::string>>& rank_vars) {
  DistConfig dc;
  dc.backend = Backend::kGloo;
  dc.timeout_s = 30;
  std::vector<double> sums(rank_vars.size(), 0);
  std::vector<std::string> errors(rank_vars.size());
  std::vector<std::thread> ranks;
  for (size_t r = 0; r < rank_vars.size(); ++r)
    ranks.emplace_back([&, r] {
      try {
        const DistEnv env = DistEnv::from(vars(rank_vars[r]));
        auto pg = ProcessGroup::connect(env, dc, torch::kCPU);
        pg->agree({{"run", "the same"}});
        sums[r] = pg->sum_over_ranks({static_cast<double>(env.rank + 1)})[0];
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  const double n = static_cast<double>(rank_vars.size());
  for (size_t r = 0; r < rank_vars.size(); ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(sums[r], n * (n + 1) / 2) << "rank " << r;
  }
}

class DistGroup : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef BCD_HAVE_GLOO
    GTEST_SKIP() << "built without Gloo's headers (libgloo-dev): no multi-rank group";
#endif
  }
  // Two ranks with the variables `of(rank, port)` gives, on a free port, form a group.
  static void expect_two_form_a_group(
      const std::function<std::map<std::string, std::string>(const std::string& rank, const std::string& port)>& of) {
    const std::string port = std::to_string(free_port());
    expect_group_forms({of("0", port), of("1", port)});
  }
};

TEST_F(DistGroup, SrunStyleVariablesFormAGroup) {
  expect_two_form_a_group([](const std::string& r, const std::string& port) {
    return std::map<std::string, std::string>{{"SLURM_PROCID", r}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", r},
                                              {"SLURM_NTASKS_PER_NODE", "2"}, {"SLURM_JOB_NODELIST", "127.0.0.1"},
                                              {"MASTER_PORT", port}};
  });
}

// (mpirun inside an allocation: every rank also has the batch step's SLURM_PROCID=0.)
TEST_F(DistGroup, OpenMpiStyleVariablesFormAGroup) {
  expect_two_form_a_group([](const std::string& r, const std::string& port) {
    return std::map<std::string, std::string>{
        {"OMPI_COMM_WORLD_RANK", r}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", r},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port},
        {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}};
  });
}

TEST_F(DistGroup, KubeflowPetStyleVariablesFormAGroup) {
  expect_two_form_a_group([](const std::string& r, const std::string& port) {
    return std::map<std::string, std::string>{{"PET_NODE_RANK", r}, {"PET_NNODES", "2"}, {"PET_NPROC_PER_NODE", "1"},
                                              {"PET_MASTER_ADDR", "127.0.0.1"}, {"PET_MASTER_PORT", port}};
  });
}

// torchrun's agent serves the store (here a TCPStore of this test in its place): every rank, rank 0
// too, joins it as a client (a rank 0 that listened on the port would fail: it is taken), and a
// restarted attempt agrees again on the same store, its keys apart from the earlier attempt's. The
// NCCL watchdog's signals an earlier attempt left beneath every prefix are gone once it agreed
// (they would make the new attempt's heartbeat monitor abort it); other keys stay.
TEST_F(DistGroup, RanksJoinTheAgentsStoreAndEachAttemptAgreesAnew) {
#ifdef BCD_HAVE_GLOO
  c10d::TCPStoreOptions so;
  so.port = 0;
  so.isServer = true;
  so.waitWorkers = false;
  const auto agent = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  const std::string port = std::to_string(agent->getPort());
  for (const char* attempt : {"0", "1"}) {
    std::vector<std::map<std::string, std::string>> v;
    for (int r = 0; r < 2; ++r)
      v.push_back({{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", std::to_string(r)},
                   {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port},
                   {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", attempt}});
    SCOPED_TRACE(std::string("attempt ") + attempt);
    const std::vector<uint8_t> rank_one = {1, 0, 0, 0};  // what the watchdog stores: the signalling rank
    for (const char* key : {"exception_dump", "remote_error", "someone/else"}) agent->set(key, rank_one);
    expect_group_forms(v);
    EXPECT_FALSE(agent->check({"exception_dump"}));
    EXPECT_FALSE(agent->check({"remote_error"}));
    EXPECT_TRUE(agent->check({"someone/else"}));
  }
#endif
}

// Each local rank computes on a GPU of its own: its LOCAL_RANK when it sees them all (launch,
// torchrun), the one it sees when it was given one (Slurm --gpus-per-task); ranks that would share
// a GPU are refused by name (NCCL allows one rank per GPU in a communicator).
TEST(DistEnv, EachLocalRankGetsItsOwnGpu) {
  for (int r = 0; r < 4; ++r) EXPECT_EQ(cuda_device_for_rank(r, 4, 4), r);
  EXPECT_EQ(cuda_device_for_rank(1, 2, 8), 1);
  EXPECT_EQ(cuda_device_for_rank(0, 1, 2), 0);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(cuda_device_for_rank(r, 4, 1), 0);
  const std::string err = error_of([] { cuda_device_for_rank(3, 4, 2); });
  EXPECT_NE(err.find("4 ranks on this machine but 2 GPUs visible to local rank 3"), std::string::npos) << err;
  EXPECT_THROW(cuda_device_for_rank(4, 4, 4), InternalError);
}

TEST(Launch, ParsesItsOptionsAndLeavesTheCommand) {
  test::TempDir dir("bcd-launch-parse");
  const std::string cfg = dir.file("c.toml");
  test::write_text(cfg, "[train]\nsteps = 3\n");
  LaunchOptions o;
  const auto cmd = parse_launch_args({"--nproc", "4", "--oversubscribe", "--master-port=29555", "train", "--config", cfg,
                                      "--train.steps=3"}, o);
  EXPECT_EQ(o.nproc, 4);
  EXPECT_TRUE(o.oversubscribe);
  EXPECT_EQ(o.master_port, 29555);
  EXPECT_EQ(cmd, (std::vector<std::string>{"train", "--config", cfg, "--train.steps=3"}));
  LaunchOptions m;
  const auto cmd2 = parse_launch_args({"--nnodes", "2", "--node-rank", "1", "--nproc", "2", "--master-addr", "n0",
                                       "--master-port", "29500", "--", "train", "--resume", dir.path()}, m);
  EXPECT_EQ(m.nnodes, 2);
  EXPECT_EQ(m.node_rank, 1);
  EXPECT_EQ(m.master_addr, "n0");
  EXPECT_EQ(cmd2, (std::vector<std::string>{"train", "--resume", dir.path()}));
}

// A config written for N ranks says so ([dist] nproc): launch without --nproc starts that many,
// with the command's overrides applied; --nproc wins; a command without a config is one rank.
TEST(Launch, WithoutNprocTheConfigsDistNprocIsTaken) {
  test::TempDir dir("bcd-launch-nproc");
  const std::string cfg = dir.file("c.toml");
  test::write_text(cfg, "[dist]\nnproc = 3\n");
  LaunchOptions a, b, c, d;
  parse_launch_args({"--oversubscribe", "train", "--config", cfg, "--train.steps=3"}, a);
  EXPECT_EQ(a.nproc, 3);
  parse_launch_args({"train", "--config=" + cfg, "--dist.nproc=2"}, b);
  EXPECT_EQ(b.nproc, 2);
  LaunchOptions spaced;  // an override as every command takes it: "--section.key value" too
  parse_launch_args({"train", "--config", cfg, "--dist.nproc", "2"}, spaced);
  EXPECT_EQ(spaced.nproc, 2);
  parse_launch_args({"--nproc", "1", "train", "--config", cfg}, c);
  EXPECT_EQ(c.nproc, 1);
  parse_launch_args({"train", "--resume", dir.path()}, d);
  EXPECT_EQ(d.nproc, 1);
  LaunchOptions e;
  EXPECT_NE(error_of([&] { parse_launch_args({"train", "--config", cfg, "--dist.nproc=0"}, e); }).find("[dist] nproc"),
            std::string::npos);
  // --nproc against the command's own --dist.nproc: two answers to one question, refused; the
  // same answer twice is fine
  LaunchOptions f, g, h;
  const std::string both = error_of([&] {
    parse_launch_args({"--nproc", "2", "--oversubscribe", "train", "--config", cfg, "--dist.nproc=3"}, f);
  });
  EXPECT_NE(both.find("launch: --nproc 2 and the command's --dist.nproc=3 disagree"), std::string::npos) << both;
  EXPECT_NE(error_of([&] { parse_launch_args({"--nproc", "2", "--oversubscribe", "train", "--dist.nproc", "3"}, g); })
                .find("disagree"),
            std::string::npos);
  parse_launch_args({"--nproc", "3", "--oversubscribe", "train", "--config", cfg, "--dist.nproc=3"}, h);
  EXPECT_EQ(h.nproc, 3);
}

// More ranks than the machine has cores (a CPU run) are refused at once, before any rank starts,
// unless --oversubscribe asks for them: `launch --nproc 1000` once spawned ranks for minutes.
TEST(Launch, MoreRanksThanTheMachineHoldsNeedOversubscribe) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = test::run_bcdtrain("launch --nproc 1000 train --config " + test::source_path("configs/tiny.toml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("launch: 1000 ranks on a machine with " + std::to_string(cores) + " cores"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("--oversubscribe"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("bcdtrain launch: rank"), std::string::npos) << "a rank was started:\n" << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));  // refused, not spawned
  LaunchOptions o;
  parse_launch_args({"--nproc", std::to_string(cores + 1), "--oversubscribe", "train", "--config",
                     test::source_path("configs/tiny.toml")}, o);
  EXPECT_EQ(o.nproc, cores + 1);
}

TEST(Launch, BadOptionsAreRefused) {
  LaunchOptions o;
  EXPECT_NE(error_of([&] { parse_launch_args({"--nproc", "0", "train"}, o); }).find("--nproc: expected an integer from 1 to 1024, got 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_launch_args({"--nproc", "2"}, o); }).find("no command"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_launch_args({"--nnodes", "2", "--nproc", "2", "train"}, o); }).find("--master-port"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_launch_args({"--nnodes", "2", "--node-rank", "2", "--master-port", "1", "train"}, o); })
                .find("--node-rank 2"),
            std::string::npos);
  // Only train runs on every rank: another command (or an unknown one) starts no rank.
  EXPECT_NE(error_of([&] { parse_launch_args({"--nproc", "2", "eval", "--run", "r"}, o); })
                .find("launch: runs `train` on every rank; `eval` is meant to run once"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_launch_args({"--nproc", "2", "nonsense"}, o); }).find("`nonsense`"), std::string::npos);
  // launch is a command of the app like the others: --help lists its flags, a flag is given once,
  // a word that is no command or no flag of launch's is named as such.
  auto help = test::run_bcdtrain("launch --help");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("--nproc"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("--oversubscribe"), std::string::npos) << help.output;
  auto twice = test::run_bcdtrain("launch --nproc 2 --nproc 1 train --config " + test::source_path("configs/tiny.toml"));
  EXPECT_EQ(twice.exit_code, 2) << twice.output;
  EXPECT_NE(twice.output.find("--nproc: given more than once"), std::string::npos) << twice.output;
  auto ls = test::run_bcdtrain("launch ls");
  EXPECT_EQ(ls.exit_code, 2) << ls.output;
  EXPECT_NE(ls.output.find("launch: `ls` is not a bcdtrain command"), std::string::npos) << ls.output;
  EXPECT_EQ(ls.output.find("bcdtrain ls"), std::string::npos) << ls.output;
  // A rendezvous host this machine cannot resolve is named with the resolver's reason, before any
  // rank starts (each rank used to time out on its own).
  auto dns = test::run_bcdtrain("launch --nnodes 2 --node-rank 1 --nproc 1 --master-addr no-such-host.invalid "
                                "--master-port 29999 train --config " + test::source_path("configs/tiny.toml"));
  EXPECT_EQ(dns.exit_code, 2) << dns.output;
  EXPECT_NE(dns.output.find("launch: --master-addr no-such-host.invalid: cannot be resolved on this machine ("),
            std::string::npos) << dns.output;
  EXPECT_EQ(dns.output.find("bcdtrain launch: rank"), std::string::npos) << dns.output;
  auto bogus = test::run_bcdtrain("launch --bogus 3 train");
  EXPECT_EQ(bogus.exit_code, 2) << bogus.output;
  EXPECT_NE(bogus.output.find("--bogus: unknown option of `launch`"), std::string::npos) << bogus.output;
  // A config that cannot be read is refused by the launcher, before any rank starts.
  auto r = test::run_bcdtrain("launch --nproc 2 train --config /no/such.toml");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/no/such.toml: cannot open config file"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("bcdtrain launch: rank"), std::string::npos) << r.output;
}



// A --master-port something else listens on: refused in one line naming the port and what
// happened, before any rank starts (it used to be 15 lines: c10d's retries and backtraces, and "failed
// within 15 s" for a failure at once). A rank 0 started by hand on that port says the same in one
// line of its own.
TEST(Launch, ABusyMasterPortIsOneLineNamingThePort) {
  test::TempDir dir("bcd-launch-port");
  HeldPort busy;
  const std::string p = std::to_string(busy.port());
  const std::string train = "train --quiet --config " + test::source_path("configs/tiny.toml") +
                            " --train.run_dir=" + dir.file("run") + " --dist.timeout_s=15";
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = test::run_bcdtrain("launch --nproc 2 --master-port " + p + " " + train);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  ASSERT_EQ(lines_of(r.output).size(), 1u) << r.output;
  EXPECT_NE(r.output.find("port " + p + " is in use"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("127.0.0.1:" + p), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("within"), std::string::npos) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << "refused at once";

  ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", p}});
  const auto h = test::run_bcdtrain(train);
  EXPECT_EQ(h.exit_code, 2) << h.output;
  ASSERT_EQ(lines_of(h.output).size(), 1u) << h.output;
  EXPECT_NE(h.output.find("rank 0 could not listen on 127.0.0.1:" + p + " for the rendezvous (RANK/WORLD_SIZE): port " +
                          p + " is in use"),
            std::string::npos)
      << h.output;
  EXPECT_EQ(h.output.find("within"), std::string::npos) << h.output;
}


// SIGTERM while launch is still starting ranks (BCD_LAUNCH_SPAWN_DELAY_MS holds it there): it
// starts no more, passes the signal to those it started (waiting in the rendezvous for the rest)
// and ends at once with 128 + SIGTERM, leaving no rank behind.
TEST(Launch, ASignalWhileStartingRanksStopsTheStartAndEveryRankStarted) {
  test::TempDir dir("bcd-launch-signal");
  ::setenv("BCD_LAUNCH_SPAWN_DELAY_MS", "500", 1);
  test::Background bg("launch --nproc 6 --oversubscribe train --quiet --config " +
                          test::source_path("configs/tiny.toml") + " --train.run_dir=" + dir.file("run") +
                          " --dist.timeout_s=60",
                      dir.file("launch.log"));
  ::unsetenv("BCD_LAUNCH_SPAWN_DELAY_MS");
  std::vector<pid_t> ranks;
  for (int i = 0; i < 2000 && ranks.size() < 2; ++i) {  // the moment: two ranks started, four to go
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ranks = children_of(bg.pid);
  }
  ASSERT_GE(ranks.size(), 2u) << test::read_text(dir.file("launch.log"));
  ASSERT_EQ(kill(bg.pid, SIGTERM), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const int code = bg.wait();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = test::read_text(dir.file("launch.log"));
  EXPECT_EQ(code, 128 + SIGTERM) << log;
  EXPECT_LT(waited, 5.0) << log;
  EXPECT_NE(log.find("while starting ranks ("), std::string::npos) << log;
  EXPECT_EQ(log.find("(6 of 6 started)"), std::string::npos) << "it went on starting ranks: " << log;
  for (pid_t p : ranks) EXPECT_NE(kill(p, 0), 0) << "rank pid " << p << " is still there";
}

// ---- Ranks agree or nobody starts ----

TEST(RankAgreement, RanksReadAsRanges) {
  EXPECT_EQ(rank_ranges({1}), "rank 1");
  EXPECT_EQ(rank_ranges({0, 1}), "ranks 0-1");
  EXPECT_EQ(rank_ranges({3, 0, 2}), "ranks 0, 2-3");
  EXPECT_EQ(rank_ranges({0, 2, 3, 4, 7, 9, 10}), "ranks 0, 2-4, 7, 9-10");
}

TEST(RankAgreement, DifferencesNameTheKeyTheValuesAndTheRanks) {
  const RankFacts a = {{"model.n_layers", "4"}, {"train.lr", "0.002"}};
  const RankFacts b = {{"model.n_layers", "4"}, {"train.lr", "0.5"}};
  EXPECT_EQ(rank_differences({a, a, a}), "");
  EXPECT_EQ(rank_differences({a, b, a, a}), "train.lr: 0.002 on ranks 0, 2-3; 0.5 on rank 1");
  const RankFacts c = {{"model.n_layers", "2"}, {"train.lr", "0.5"}};
  EXPECT_EQ(rank_differences({a, c}),
            "model.n_layers: 4 on rank 0; 2 on rank 1 | train.lr: 0.002 on rank 0; 0.5 on rank 1");
  EXPECT_EQ(rank_differences({a, c}, 1), "model.n_layers: 4 on rank 0; 2 on rank 1 | and 1 more keys");
  // A key one rank does not name; a value with a newline stays on one line.
  EXPECT_EQ(rank_differences({a, {{"model.n_layers", "4"}}}), "train.lr: 0.002 on rank 0; (not given) on rank 1");
  const RankFacts d = {{"train.run_dir", "'a\nb'"}};
  EXPECT_EQ(rank_differences({d, {{"train.run_dir", "'a'"}}}), "train.run_dir: 'a\\nb' on rank 0; 'a' on rank 1");
}

// Only what describes one rank's machine may differ (threads, the device's peak, [memory], ranks
// per machine): placement keys every one (a resume may change them), none of what the ranks
// compute together or where the run's files go.
TEST(RankAgreement, PerRankKeysDescribeOneRanksMachine) {
  std::map<std::string, Resume> resume;
  for (const auto& [key, r] : resume_classes()) resume[key] = r;
  int per_rank = 0;
  for (const auto& [key, r] : resume)
    if (is_per_rank_key(key)) {
      ++per_rank;
      EXPECT_EQ(r, Resume::kPlacement) << key;
    }
  EXPECT_GE(per_rank, 4);
  for (const char* key :
       {"train.threads", "train.peak_tflops", "dist.nproc", "memory.host_bytes", "memory.nvme_paths"}) {
    EXPECT_TRUE(resume.count(key)) << key;
    EXPECT_TRUE(is_per_rank_key(key)) << key;
  }
  for (const char* key : {"train.lr", "train.grad_clip", "train.run_dir", "train.seed", "model.n_layers",
                          "model.init_from", "data.path", "dist.bucket_bytes", "dist.backend", "train.device",
                          "train.checkpoint_every"})
    EXPECT_FALSE(is_per_rank_key(key)) << key;
  EXPECT_EQ(binary_identity().rfind("build-id ", 0), 0u) << binary_identity();
}

}  // namespace
}  // namespace bcd
