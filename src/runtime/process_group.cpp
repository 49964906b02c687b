// Rank discovery from the environment and collectives over c10d (TCPStore + ProcessGroupGloo).
#include "runtime/process_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <optional>
#include <thread>

#if defined(BCD_HAVE_GLOO) || defined(BCD_HAVE_NCCL)
#define BCD_HAVE_C10D 1
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif
#ifdef BCD_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef BCD_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "base/bytes.h"
#include "base/error.h"

namespace bcd {

namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

// A whole non-negative number from an environment variable; UserError naming it otherwise.
std::optional<int64_t> env_int(const char* name) {
  const auto v = env(name);
  if (!v) return std::nullopt;
  const std::optional<int64_t> n = parse_count(*v);
  if (!n) user_error("environment: {}=\"{}\": expected a whole number >= 0", name, *v);
  return *n;
}

int required_int(const char* name, const char* with) {
  const auto v = env_int(name);
  if (!v) user_error("environment: {} is set but {} is not", with, name);
  return static_cast<int>(*v);
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at the first comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  const std::string first = nodelist.substr(0, end);
  const size_t open = first.find('[');
  if (open == std::string::npos) return first;
  const size_t close = first.find(']', open);
  if (close == std::string::npos) user_error("environment: SLURM_JOB_NODELIST=\"{}\": unbalanced '['", nodelist);
  // "gpu[03-05,09]": the prefix and the first number of the range, zero padding kept.
  std::string range = first.substr(open + 1, close - open - 1);
  range = range.substr(0, range.find_first_of(",-"));
  if (range.empty()) user_error("environment: SLURM_JOB_NODELIST=\"{}\": empty range", nodelist);
  return first.substr(0, open) + range + first.substr(close + 1);
}

DistEnv DistEnv::from_environment() {
  DistEnv d;
  if (env("WORLD_SIZE") || env("RANK")) {
    d.source = "RANK/WORLD_SIZE";
    d.rank = required_int("RANK", "WORLD_SIZE or RANK");
    d.world_size = required_int("WORLD_SIZE", "WORLD_SIZE or RANK");
    d.local_rank = static_cast<int>(env_int("LOCAL_RANK").value_or(d.rank));
    d.local_world_size = static_cast<int>(env_int("LOCAL_WORLD_SIZE").value_or(d.world_size));
    if (d.world_size > 1 && !env("MASTER_ADDR"))
      user_error("environment: WORLD_SIZE={} but MASTER_ADDR is not set (the host of rank 0)", d.world_size);
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    d.source = "SLURM_PROCID/SLURM_NTASKS";
    d.rank = required_int("SLURM_PROCID", "SLURM_NTASKS");
    d.world_size = required_int("SLURM_NTASKS", "SLURM_PROCID");
    d.local_rank = static_cast<int>(env_int("SLURM_LOCALID").value_or(0));
    d.local_world_size = static_cast<int>(env_int("SLURM_NTASKS_PER_NODE").value_or(1));
    if (!env("MASTER_ADDR")) {
      const auto nodes = env("SLURM_JOB_NODELIST");
      if (!nodes && d.world_size > 1)
        user_error("environment: SLURM_NTASKS={} but neither MASTER_ADDR nor SLURM_JOB_NODELIST is set",
                   d.world_size);
      if (nodes) d.master_addr = first_slurm_host(*nodes);
    }
    if (!env("MASTER_PORT")) d.master_port = 29500 + static_cast<int>(env_int("SLURM_JOB_ID").value_or(0) % 1000);
  } else {
    return d;
  }
  if (const auto a = env("MASTER_ADDR")) d.master_addr = *a;
  if (const auto p = env_int("MASTER_PORT")) {
    if (*p < 1 || *p > 65535) user_error("environment: MASTER_PORT={}: expected a port in [1, 65535]", *p);
    d.master_port = static_cast<int>(*p);
  }
  if (d.world_size < 1) user_error("environment: world size {} (from {}): expected >= 1", d.world_size, d.source);
  if (d.local_world_size < 1) d.local_world_size = 1;
  if (d.rank >= d.world_size)
    user_error("environment: rank {} is outside the world of {} ranks (from {})", d.rank, d.world_size, d.source);
  return d;
}

// ---- Collectives ----

struct ProcessGroup::Impl {
  torch::Device device = torch::kCPU;  // where the backend wants tensors (NCCL: this rank's GPU)
  std::string backend = "none";
#ifdef BCD_HAVE_C10D
  c10::intrusive_ptr<c10d::Store> store;
  // ProcessGroupNCCL and ProcessGroupGloo are c10d::Backends (torch 2.x); a c10d::ProcessGroup
  // only dispatches to one of them by device, which a group of one backend does not need.
  c10::intrusive_ptr<c10d::Backend> pg;
  std::deque<std::pair<c10::intrusive_ptr<c10d::Work>, const char*>> in_flight;  // tickets finished_+1 .. started_, and what they are
#endif
};

ProcessGroup::ProcessGroup(int rank, int world_size, std::unique_ptr<Impl> impl)
    : rank_(rank), world_size_(world_size), impl_(std::move(impl)) {}

ProcessGroup::~ProcessGroup() = default;

std::unique_ptr<ProcessGroup> ProcessGroup::connect(const DistEnv& env, const DistConfig& cfg,
                                                   const torch::Device& device) {
  auto impl = std::make_unique<Impl>();
  if (env.world_size == 1)
    return std::unique_ptr<ProcessGroup>(new ProcessGroup(0, 1, std::move(impl)));
  // auto: NCCL when the model is on a GPU, Gloo on the CPU.
  const Backend backend = cfg.backend != Backend::kAuto ? cfg.backend : device.is_cuda() ? Backend::kNccl : Backend::kGloo;
  if (backend == Backend::kNccl && !device.is_cuda())
    user_error("config: [dist] backend = \"nccl\" needs the model on a GPU ([train] device is {})", device.str());
#ifndef BCD_HAVE_NCCL
  if (backend == Backend::kNccl)
    user_error("config: [dist] backend = \"nccl\" (or auto on a GPU): this build has no NCCL process group "
               "(it needs a CUDA LibTorch and NCCL); use backend = \"gloo\"");
#endif
#ifndef BCD_HAVE_GLOO
  if (backend == Backend::kGloo)
    user_error("WORLD_SIZE={}: this build has no Gloo process group (configure with Gloo's headers, libgloo-dev)",
               env.world_size);
#endif
#ifdef BCD_HAVE_C10D
  impl->backend = name_of(backend);
  const auto timeout = std::chrono::milliseconds(cfg.timeout_s * 1000);
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = env.rank == 0;
    so.numWorkers = env.world_size;
    so.waitWorkers = true;
    so.timeout = timeout;
    impl->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  } catch (const std::exception& e) {
    user_error("rank {}: rendezvous at {}:{} ({}) failed within {} s: {}", env.rank, env.master_addr,
               env.master_port, env.source, cfg.timeout_s, e.what());
  }
#ifdef BCD_HAVE_NCCL
  if (backend == Backend::kNccl) {
    // Collectives run on NCCL's own streams, which ProcessGroupNCCL orders after the work already
    // queued on the current (compute) stream by an event, and before later work that waits on the
    // collective. Blocking wait with async error handling: a peer that died or hangs makes wait()
    // throw after dist.timeout_s instead of hanging this rank for ever.
    ::setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
    ::setenv("NCCL_BLOCKING_WAIT", "1", 0);
    ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1", 0);
    ::setenv("NCCL_ASYNC_ERROR_HANDLING", "1", 0);
    try {
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      impl->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl->store, env.rank, env.world_size, opts);
      impl->device = device;
    } catch (const std::exception& e) {
      user_error("rank {}: cannot form the NCCL group of {} ranks: {}", env.rank, env.world_size, e.what());
    }
  }
#endif
#ifdef BCD_HAVE_GLOO
  if (backend == Backend::kGloo) {
    try {
      auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
      // Loopback for one machine; otherwise the address this host's name resolves to, or the
      // interface GLOO_SOCKET_IFNAME names (as torch.distributed does).
      const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      if (ifname && *ifname)
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      else if (env.master_addr == "127.0.0.1" || env.master_addr == "localhost")
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      else
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      impl->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(impl->store, env.rank, env.world_size, opts);
    } catch (const std::exception& e) {
      user_error("rank {}: cannot form the Gloo group of {} ranks: {}", env.rank, env.world_size, e.what());
    }
  }
#endif
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(env.rank, env.world_size, std::move(impl)));
#else
  user_error("WORLD_SIZE={}: this build has no process group (configure with Gloo's headers, libgloo-dev)",
             env.world_size);
#endif
}

const std::string& ProcessGroup::backend() const { return impl_->backend; }
const torch::Device& ProcessGroup::device() const { return impl_->device; }

// After a failed collective: which ranks are still there. Every rank that fails posts a key in
// the rendezvous store; this one waits a few seconds for the others' (the live ones time out in
// the same collective at about the same time) and names those that posted nothing: stopped,
// hung or dead. Costs nothing while the collectives succeed.
std::string ProcessGroup::absent_ranks() const {
#ifdef BCD_HAVE_C10D
  if (!impl_->store) return "";
  auto key = [](int r) { return "bcd/failed/" + std::to_string(r); };
  try {
    impl_->store->setTimeout(std::chrono::seconds(5));  // the store's own wait is the whole [dist] timeout
    impl_->store->set(key(rank_), std::vector<uint8_t>{1});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    std::vector<int> absent;
    for (;;) {
      absent.clear();
      for (int r = 0; r < world_size_; ++r)
        if (r != rank_ && !impl_->store->check({key(r)})) absent.push_back(r);
      if (absent.empty() || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (absent.empty()) return "every other rank failed it too";
    std::string names;
    for (size_t i = 0; i < absent.size() && i < 8; ++i) names += (i ? ", " : "") + std::to_string(absent[i]);
    if (absent.size() > 8) names += fmt::format(" and {} more", absent.size() - 8);
    return fmt::format("rank{} {} did not answer: stopped, hung or dead (see {} log)", absent.size() > 1 ? "s" : "",
                       names, absent.size() > 1 ? "their" : "its");
  } catch (const std::exception&) {
    return rank_ == 0 ? "" : "rank 0, which serves the rendezvous store, is unreachable: stopped, hung or dead";
  }
#else
  return "";
#endif
}

void ProcessGroup::fail(const std::string& op, const std::exception& e) const {
  const std::string absent = world_size_ > 1 ? absent_ranks() : "";
  user_error("rank {} of {}: {} failed (a rank stopped or the [dist] timeout passed){}: {}", rank_, world_size_, op,
             absent.empty() ? "" : "; " + absent, e.what());
}

uint64_t ProcessGroup::start_all_reduce_sum(const torch::Tensor& t) { return start_sum(t, kEveryRank); }

uint64_t ProcessGroup::start_reduce_sum(const torch::Tensor& t, int root) {
  BCD_CHECK(root >= 0 && root < world_size_, "start_reduce_sum: root {} of {}", root, world_size_);
  return start_sum(t, root);
}

uint64_t ProcessGroup::start_sum(const torch::Tensor& t, int root) {
  const char* op = root == kEveryRank ? "all-reduce" : "reduce";
  BCD_CHECK(t.is_contiguous() && (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kFloat64),
            "{}: expected a contiguous fp32/fp64 tensor", op);
  if (world_size_ == 1) return ++started_, finished_ = started_;
#ifdef BCD_HAVE_C10D
  std::vector<at::Tensor> one{t};
  try {
    if (root == kEveryRank) {
      impl_->in_flight.emplace_back(impl_->pg->allreduce(one), op);
    } else {
      c10d::ReduceOptions opts;
      opts.rootRank = root;
      opts.reduceOp = c10d::ReduceOp::SUM;
      impl_->in_flight.emplace_back(impl_->pg->reduce(one, opts), op);
    }
  } catch (const std::exception& e) {
    fail(op, e);
  }
  // ring algorithms: an all-reduce sends 2(N-1)/N of its payload, a reduce its payload except on its root
  const double bytes = static_cast<double>(t.nbytes());
  if (root == kEveryRank) bytes_sent_ += 2.0 * (world_size_ - 1) / world_size_ * bytes;
  else if (root != rank_) bytes_sent_ += bytes;
#endif
  return ++started_;
}

double ProcessGroup::wait_for(uint64_t ticket) {
  BCD_CHECK(ticket <= started_, "wait_for: ticket {} was never started", ticket);
  const auto t0 = std::chrono::steady_clock::now();
#ifdef BCD_HAVE_C10D
  try {
    while (finished_ < ticket) {
      impl_->in_flight.front().first->wait();
      impl_->in_flight.pop_front();
      ++finished_;
    }
  } catch (const std::exception& e) {
    fail(impl_->in_flight.front().second, e);
  }
#endif
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

namespace {
// `out` as world_size views of in.numel() elements: the list form every backend takes.
std::vector<at::Tensor> rank_views(const torch::Tensor& in, const torch::Tensor& out, int world_size) {
  BCD_CHECK(in.is_contiguous() && out.is_contiguous() && out.scalar_type() == in.scalar_type() &&
                out.numel() == in.numel() * world_size && out.device() == in.device(),
            "gather: expected out of {} x {} elements of the input's dtype and device", world_size, in.numel());
  std::vector<at::Tensor> views;
  for (int r = 0; r < world_size; ++r) views.push_back(out.narrow(0, r * in.numel(), in.numel()));
  return views;
}
}  // namespace

void ProcessGroup::all_gather(const torch::Tensor& in, const torch::Tensor& out) {
  if (world_size_ == 1) {
    rank_views(in, out, 1);  // the same checks
    out.copy_(in);
    return;
  }
#ifdef BCD_HAVE_C10D
  wait_for(started_);  // collectives complete in the order they were started
  std::vector<std::vector<at::Tensor>> outs{rank_views(in, out, world_size_)};
  std::vector<at::Tensor> ins{in};
  try {
    impl_->pg->allgather(outs, ins)->wait();
  } catch (const std::exception& e) {
    fail("all-gather", e);
  }
  bytes_sent_ += static_cast<double>(in.nbytes()) * (world_size_ - 1);
#endif
}

std::vector<double> ProcessGroup::sum_over_ranks(std::vector<double> values) {
  if (world_size_ == 1 || values.empty()) return values;
  torch::Tensor t = torch::tensor(values, torch::kFloat64).to(impl_->device);
  wait_for(start_all_reduce_sum(t));
  t = t.cpu();
  const double* p = t.data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

void ProcessGroup::barrier() {
  if (world_size_ == 1) return;
#ifdef BCD_HAVE_C10D
  try {
    c10d::BarrierOptions opts;
    if (impl_->device.is_cuda()) opts.device_ids = {impl_->device.index()};
    impl_->pg->barrier(opts)->wait();
  } catch (const std::exception& e) {
    fail("barrier", e);
  }
#endif
}

}  // namespace bcd
