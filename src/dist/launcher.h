// `bcdtrain launch`: starts the ranks of a data-parallel run on this node, as torchrun does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/config.h"

namespace bcd {

struct LaunchOptions {
  int nproc = 1;                  // ranks on this node (one per GPU): --nproc, else the config's [dist] nproc
  int nnodes = 1;                 // nodes in the run, each running one launcher
  int node_rank = 0;              // this node's place: its ranks are node_rank * nproc + [0, nproc)
  std::string master_addr = "127.0.0.1";  // host of rank 0 (its TCP store)
  int master_port = 0;            // 0: a free port of this host (single node only)
  double grace_s = 30;            // after a rank fails, how long the others get to stop before SIGKILL
  bool oversubscribe = false;     // allow more ranks than this machine has cores (CPU) or GPUs (CUDA)
};

// The launch as the machine allows it (its options are read by the command line, cli/launch_args.h):
// without --nproc (`nproc_given` false) the command's [dist] nproc (`cfg`, null for a resume,
// whose config is in its checkpoint), else 1. UserError on more ranks than the machine has cores
// (train.device cpu) or GPUs (cuda) without --oversubscribe, on a node rank outside the nodes, and
// on several nodes without one --master-port.
void check_launch(LaunchOptions& opt, const Config* cfg, bool nproc_given);

// Runs `command` (bcdtrain's arguments, e.g. {"train", "--config", "c.toml"}) as opt.nproc
// processes of this binary with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT set. A --master-port something on this host listens on already (node 0) is a
// UserError naming it, before any rank starts. SIGINT/SIGTERM are forwarded to every rank (each
// in its own process group, so a terminal's ^C reaches them once, through here); one that comes
// while ranks are still being started stops the starting: the ranks started get it (SIGKILL
// after grace_s) and the launcher returns 128 + signal. When a rank fails, the launcher names it
// (rank, pid, exit status or signal) on stderr, stops the others (SIGTERM, then SIGKILL after
// grace_s) and returns that rank's exit code; otherwise the ranks' largest exit code (0, or
// 128 + signal when they were stopped by one). BCD_LAUNCH_SPAWN_DELAY_MS (a test hook) pauses
// after starting each rank.
int launch_ranks(const LaunchOptions& opt, const std::vector<std::string>& command);

// Under torchrun (TORCHELASTIC_ERROR_FILE set): the error that ends this rank, in the JSON form of
// torch's @record (message, exit code, timestamp), so torchrun reports it as the root cause
// instead of "exitcode 1". Nothing without the variable; a file it cannot write is let go.
void write_launcher_error_file(const std::string& message, int exit_code);

}  // namespace bcd
