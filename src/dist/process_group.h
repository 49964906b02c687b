// Ranks of a data-parallel run (DESIGN.md §6): where this process stands (DistEnv, from the
// launcher's environment) and its collectives (ProcessGroup, over LibTorch's c10d: Gloo on the
// CPU, NCCL on GPUs; a world of one rank needs no communication at all).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/config.h"
#include "dist/rank_facts.h"

namespace c10 {
struct Event;
}

namespace bcd {

// This process's place in the run, from the environment, the first of these that is set:
// - torchrun / `bcdtrain launch` / a Kubeflow PyTorchJob: RANK, WORLD_SIZE, LOCAL_RANK,
//   LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. Without LOCAL_RANK (a PyTorchJob: one rank per
//   pod) the rank is alone on its machine: local rank 0 of LOCAL_WORLD_SIZE, else 1. Under
//   torchrun, TORCHELASTIC_USE_AGENT_STORE=True says its agent already serves the store at
//   MASTER_ADDR:MASTER_PORT (every rank joins it as a client, as torch's env:// does), and
//   TORCHELASTIC_RESTART_COUNT which attempt of an elastic run this is;
// - Open MPI (mpirun): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, with MASTER_ADDR
//   set by the user (mpirun -x MASTER_ADDR=host), MASTER_PORT or 29500;
// - Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the first host of
//   SLURM_JOB_NODELIST as the store's host (MASTER_ADDR wins when set), MASTER_PORT or
//   29500 + SLURM_JOB_ID % 1000;
// - Kubeflow's PET_* (what a TrainJob gives torchrun): PET_NODE_RANK of PET_NNODES pods, one rank
//   each (PET_NPROC_PER_NODE above 1 needs a launcher: `bcdtrain launch` or torchrun), the store
//   at PET_MASTER_ADDR:PET_MASTER_PORT (MASTER_ADDR/MASTER_PORT win when set);
// - none: one rank.
struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;   // ranks on this node (LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single process";  // which variables it came from (for messages)
  bool agent_store = false;   // the launcher serves the store (torchrun's agent): rank 0 joins it too
  int restart_count = 0;      // TORCHELASTIC_RESTART_COUNT: > 0 in a run torchrun restarted

  // A variable's value, nullopt when it is not set.
  using Lookup = std::function<std::optional<std::string>(const char*)>;
  // UserError naming the variable when one is malformed or they contradict each other.
  static DistEnv from_environment();
  static DistEnv from(const Lookup& env);  // the same from other variables (tests: one map per rank)
};

// The first host of a Slurm node list: "gpu[03-05,09],cpu1" -> "gpu03".
std::string first_slurm_host(const std::string& nodelist);

class ProcessGroup {
 public:
  // Rendezvous through a TCP store on MASTER_ADDR:MASTER_PORT (rank 0 serves it); UserError in
  // one line saying what happened: rank 0 cannot listen there (the port is in use), the other
  // ranks did not come within dist.timeout_s, or this build lacks the backend. c10d's own log
  // lines (every retry, with a backtrace) are silenced unless TORCH_CPP_LOG_LEVEL is set. A world
  // of one rank makes no connection. No collective runs before agree().
  static std::unique_ptr<ProcessGroup> connect(const DistEnv& env, const DistConfig& cfg, const torch::Device& device);
  // A rank that leaves before agree() finished (its setup failed) says so in the store, so the
  // others stop at once instead of waiting out dist.timeout_s.
  ~ProcessGroup();

  // Ranks agree or nobody starts: every rank publishes `facts` through the store (before any
  // collective: ranks of different shapes would abort inside the backend) and rank 0 compares
  // them, a hash first and the texts where hashes differ. Any difference is a UserError on every
  // rank naming the keys, values and ranks (run_identity.h's rank_differences); so is a rank
  // that left before publishing, or did not publish within dist.timeout_s. Then the backend's
  // group is formed (dist.backend; auto: NCCL when the device is a GPU, Gloo otherwise). Call
  // once, on every rank.
  void agree(const RankFacts& facts);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  bool is_root() const { return rank_ == 0; }
  const std::string& backend() const;  // "gloo", "nccl", or "none" for one rank
  const torch::Device& device() const;  // where collectives' tensors live (CUDA for NCCL)

  // Starts summing one contiguous fp32/fp64 tensor across ranks, in place, and returns its ticket;
  // every rank must start the same collectives in the same order. The tensor must not be touched
  // until wait_for(ticket) (or a later ticket) returns.
  uint64_t start_all_reduce_sum(const torch::Tensor& t);
  // The same, summed into rank `root`'s tensor only (the others' are left undefined): the piece
  // of a gradient that one rank's optimizer shard owns.
  uint64_t start_reduce_sum(const torch::Tensor& t, int root);
  // Every collective started up to `ticket` done before the work that follows: on a GPU the
  // compute stream waits for it and the host returns at once (never NCCL's blocking wait); on the
  // CPU (Gloo) the host waits. Returns the seconds the host spent. UserError naming this rank when
  // a peer is gone or the [dist] timeout passes.
  double wait_for(uint64_t ticket);
  // Every rank's `in` (contiguous, the same numel and dtype everywhere), rank after rank, into
  // `out` (world_size x in.numel(), same dtype and device); waits for it.
  void all_gather(const torch::Tensor& in, const torch::Tensor& out);
  // Sums a few doubles across ranks (losses, counts, flags); the host waits for the device's
  // queue, polling against the [dist] timeout.
  std::vector<double> sum_over_ranks(std::vector<double> values);
  // A few doubles summed across ranks one step late, with no wait on the device's queue (the
  // stop flags of every step): start_lagged_sum enqueues the sum (on a GPU from pinned memory,
  // then its copy back into pinned memory and an event) and collect_lagged_sum returns the sum
  // started before, waiting for that collective and copy only, not for the work queued since.
  // One in flight at most; nullopt when none was started. One rank: the values as given. Every
  // rank must start and collect the same sums in the same order as its other collectives.
  void start_lagged_sum(const std::vector<double>& values);
  std::optional<std::vector<double>> collect_lagged_sum();
  void barrier();

  // Bytes this rank has sent in all-reduces, reduces and all-gathers, as the ring algorithms
  // NCCL and Gloo use for large messages send them: an all-reduce of S bytes 2(N-1)/N x S, a
  // reduce S on every rank but the root (the chain ends there), an all-gather of S-byte
  // pieces (N-1) x S. The same arithmetic on every backend, so runs compare.
  uint64_t bytes_sent() const { return static_cast<uint64_t>(bytes_sent_); }

 private:
  struct Impl;
  ProcessGroup(int rank, int world_size, std::unique_ptr<Impl> impl);
  static constexpr int kEveryRank = -1;
  // start_all_reduce_sum (root kEveryRank) and start_reduce_sum: one queue of tickets.
  uint64_t start_sum(const torch::Tensor& t, int root);
  [[noreturn]] void fail(const std::string& op, const std::exception& e) const;
  // The host waits, polling an event, until the device's current stream has run what was queued
  // (the collectives it waits for included); past the [dist] timeout, or as soon as NCCL reports
  // a failed collective (a peer that died), fail(op): a dead peer ends this rank with a message
  // naming it, before NCCL's watchdog (timeout + a margin) tears it down. No-op on the CPU.
  void wait_device(const char* op) const;
  void wait_event(const c10::Event& e, const char* op) const;  // the same for one event
  // Whether the backend reports a failure, for the polls (NCCL's; empty for Gloo, whose waits
  // end by their own timeout).
  std::function<bool()> backend_failed() const;
  // When leaving without a failure: the host waits (bounded as wait_device, never failing) until
  // the collectives in flight, the last stop flags' sum among them, have ended, so that tearing
  // the communicators down cuts no peer's collective short.
  void drain() const;
  std::string absent_ranks() const;  // after a failed collective: the ranks that did not fail it too
  // agree()'s two sides: rank 0 gathers and judges (returns the verdict, "" when all agree); the
  // others wait for it.
  std::string judge_facts();
  std::string await_verdict();
  void clear_earlier_signals();  // rank 0, torchrun's store: an earlier attempt's NCCL signals
  void form_group();

  int rank_ = 0, world_size_ = 1;
  double bytes_sent_ = 0;
  uint64_t started_ = 0, finished_ = 0;  // tickets
  std::unique_ptr<Impl> impl_;
};

}  // namespace bcd
