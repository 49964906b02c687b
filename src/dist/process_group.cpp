// Rendezvous, agreement and collectives over c10d (TCPStore + ProcessGroupGloo/NCCL); where the
// ranks come from: dist_env.cpp.
#include "dist/process_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#if defined(BCD_HAVE_GLOO) || defined(BCD_HAVE_NCCL)
#define BCD_HAVE_C10D 1
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif
#ifdef BCD_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef BCD_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "base/error.h"
#include "dist/host_read.h"
#include "dist/rank_facts.h"

#ifdef BCD_HAVE_C10D
#include <c10/util/Logging.h>
#endif

namespace bcd {

namespace {

using Clock = std::chrono::steady_clock;

// NCCL's watchdog waits this much longer than dist.timeout_s, so the host's own poll (which names
// the ranks that did not answer) ends a rank first.
constexpr std::chrono::seconds kWatchdogMargin{60};

#ifdef BCD_HAVE_C10D
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
#endif

// An exception's message in one line: c10's errors carry a backtrace and "Exception raised from"
// after their message.
std::string one_line(const std::exception& e) {
  std::string m = e.what();
#ifdef BCD_HAVE_C10D
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) m = c->what_without_backtrace();
#endif
  m = m.substr(0, m.find("\nException raised from"));
  for (char& ch : m)
    if (ch == '\n' || ch == '\r') ch = ' ';
  while (!m.empty() && m.back() == ' ') m.pop_back();
  return m;
}

}  // namespace

// ---- Rendezvous ----

struct ProcessGroup::Impl {
  torch::Device device = torch::kCPU;  // where the backend wants tensors (NCCL: this rank's GPU)
  std::string backend = "none";
  bool agreed = false;                 // agree() ran to its end (either way): nothing to tell when leaving
  DistEnv env;
  Backend kind = Backend::kGloo;       // resolved: gloo or nccl
  torch::Device model_device = torch::kCPU;
  std::chrono::milliseconds timeout{0};
  struct Lagged {  // start_lagged_sum's sum in flight
    bool pending = false;
    uint64_t ticket = 0;
    torch::Tensor host_in, dev, host_out;  // held until collected: the copies read and write them
    std::optional<c10::Event> copied;      // a GPU's: recorded after the copy back
    std::vector<double> values;            // one rank's
  } lagged;
#ifdef BCD_HAVE_C10D
  c10::intrusive_ptr<c10d::Store> store;
  // ProcessGroupNCCL and ProcessGroupGloo are c10d::Backends (torch 2.x); a c10d::ProcessGroup
  // only dispatches to one of them by device, which a group of one backend does not need.
  c10::intrusive_ptr<c10d::Backend> pg;
  std::deque<std::pair<c10::intrusive_ptr<c10d::Work>, const char*>> in_flight;  // tickets finished_+1 .. started_, and what they are
#endif
};

#ifdef BCD_HAVE_C10D
namespace {

// The store's keys of agree(): what each rank published, who left before publishing, and rank 0's
// verdict.
std::string facts_key(int r) { return "bcd/run/facts/" + std::to_string(r); }
std::string hash_key(int r) { return "bcd/run/hash/" + std::to_string(r); }
std::string gone_key(int r) { return "bcd/run/gone/" + std::to_string(r); }
constexpr const char* kPublished = "bcd/run/published";  // counters
constexpr const char* kGone = "bcd/run/gone";
constexpr const char* kRead = "bcd/run/read";
constexpr const char* kVerdict = "bcd/run/verdict";      // "ok", or "!" and the message
constexpr const char* kStoreGone =
    "rank 0, which serves the rendezvous store, stopped before the ranks compared their runs (see its error); no "
    "rank starts";

// Facts as bytes for the store, lengths first (values may hold any byte: a path with a newline).
std::string encode_facts(const RankFacts& facts) {
  std::string out;
  for (const auto& [k, v] : facts) out += fmt::format("{} {}\n", k.size(), v.size()) + k + v;
  return out;
}

RankFacts decode_facts(const std::string& text) {
  RankFacts out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    size_t klen = 0, vlen = 0;
    if (nl == std::string::npos || std::sscanf(text.c_str() + at, "%zu %zu", &klen, &vlen) != 2 ||
        nl + 1 + klen + vlen > text.size())
      user_error("the rendezvous store holds a malformed description of a rank's run (another program on the port?)");
    out.emplace_back(text.substr(nl + 1, klen), text.substr(nl + 1 + klen, vlen));
    at = nl + 1 + klen + vlen;
  }
  return out;
}

std::vector<uint8_t> as_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string as_text(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

// c10d logs every retry and failure of the rendezvous, a backtrace with each; the errors here
// say what happened in one line. TORCH_CPP_LOG_LEVEL (e.g. INFO) keeps c10's own lines.
void quiet_c10d_logs() {
  if (std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr) FLAGS_caffe2_log_level = 3;  // FATAL only
}

// The rendezvous failed (`why`, one line, after `waited` seconds): what happened, for this rank.
std::string rendezvous_failure(const DistEnv& env, int64_t timeout_s, double waited, const std::string& why) {
  const std::string at = fmt::format("{}:{}", env.master_addr, env.master_port);
  const bool timed_out = waited >= 0.9 * static_cast<double>(timeout_s);
  if (env.agent_store)
    return fmt::format("rank {}: {} torchrun's store at {} ({}, TORCHELASTIC_USE_AGENT_STORE=True){}: {}", env.rank,
                       timed_out ? "no answer from" : "could not reach", at, env.source,
                       timed_out ? fmt::format(" within {} s ([dist] timeout_s)", timeout_s) : "", why);
  if (env.rank == 0 && !timed_out) {
    const bool busy = why.find("EADDRINUSE") != std::string::npos || why.find("already in use") != std::string::npos;
    if (busy)
      return fmt::format("rank 0 could not listen on {} for the rendezvous ({}): port {} is in use (another run's "
                         "rendezvous, or another program); choose another MASTER_PORT",
                         at, env.source, env.master_port);
    return fmt::format("rank 0 could not listen on {} for the rendezvous ({}): {}", at, env.source, why);
  }
  if (env.rank == 0)
    return fmt::format("rank 0: not all {} ranks came to the rendezvous on {} ({}) within {} s ([dist] timeout_s): {}",
                       env.world_size, at, env.source, timeout_s, why);
  if (timed_out)
    return fmt::format("rank {}: no rendezvous at {} ({}) within {} s ([dist] timeout_s): rank 0 does not serve it "
                       "there (not started, stopped, or at another MASTER_ADDR/MASTER_PORT): {}",
                       env.rank, at, env.source, timeout_s, why);
  return fmt::format("rank {} could not reach the rendezvous at {} ({}) after {:.1f} s: {}", env.rank, at, env.source,
                     waited, why);
}

}  // namespace
#endif

ProcessGroup::ProcessGroup(int rank, int world_size, std::unique_ptr<Impl> impl)
    : rank_(rank), world_size_(world_size), impl_(std::move(impl)) {}

ProcessGroup::~ProcessGroup() {
  if (!impl_->device.is_cpu()) set_device_wait(nullptr);
#ifdef BCD_HAVE_C10D
  // Left before agree() finished (this rank's setup failed; it has said why): the others learn it
  // now instead of after dist.timeout_s. Rank 0's store goes with it, which they notice too.
  if (world_size_ > 1 && !impl_->agreed && impl_->store) {
    try {
      impl_->store->setTimeout(std::chrono::seconds(2));
      impl_->store->set(gone_key(rank_), as_bytes("1"));
      impl_->store->add(kGone, 1);
    } catch (const std::exception&) {
      // the store is gone too: the others notice that instead
    }
  }
#endif
}

std::unique_ptr<ProcessGroup> ProcessGroup::connect(const DistEnv& env, const DistConfig& cfg,
                                                   const torch::Device& device) {
  auto impl = std::make_unique<Impl>();
  if (env.world_size == 1) {
    impl->agreed = true;
    return std::unique_ptr<ProcessGroup>(new ProcessGroup(0, 1, std::move(impl)));
  }
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
  quiet_c10d_logs();
  impl->backend = name_of(backend);
  impl->kind = backend;
  impl->env = env;
  impl->model_device = device;
  impl->timeout = std::chrono::milliseconds(cfg.timeout_s * 1000);
  const auto t0 = Clock::now();
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = env.rank == 0 && !env.agent_store;  // torchrun's agent serves it already (torch's env://)
    so.numWorkers = env.world_size;
    so.waitWorkers = true;
    so.timeout = impl->timeout;
    // Each attempt of an elastic run in keys of its own: torchrun's agent keeps its store across
    // restarts, and the counters of an earlier attempt's agreement would mislead this one's.
    impl->store = c10::make_intrusive<c10d::PrefixStore>(
        fmt::format("bcdtrain/attempt_{}", env.restart_count), c10::make_intrusive<c10d::TCPStore>(env.master_addr, so));
  } catch (const std::exception& e) {
    throw UserError(rendezvous_failure(env, cfg.timeout_s, seconds_since(t0), one_line(e)));
  }
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(env.rank, env.world_size, std::move(impl)));
#else
  user_error("WORLD_SIZE={}: this build has no process group (configure with Gloo's headers, libgloo-dev)",
             env.world_size);
#endif
}

void ProcessGroup::agree(const RankFacts& facts) {
  BCD_CHECK(!impl_->agreed || world_size_ == 1, "agree() called twice");
  if (world_size_ == 1) return;
#ifdef BCD_HAVE_C10D
  const std::string text = encode_facts(facts);
  std::string verdict;
  try {
    impl_->store->set(facts_key(rank_), as_bytes(text));
    impl_->store->set(hash_key(rank_), as_bytes(fnv1a_hex(text)));
    impl_->store->add(kPublished, 1);
    verdict = is_root() ? judge_facts() : await_verdict();
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    // Rank 0's store is in this process: it fails only on a bug. Another rank loses it when
    // rank 0 has gone.
    impl_->agreed = true;
    if (is_root())
      user_error("rank 0 of {}: comparing the ranks' runs in the rendezvous store failed: {}", world_size_,
                 one_line(e));
    verdict = kStoreGone;
  }
  impl_->agreed = true;
  if (!verdict.empty()) user_error("rank {} of {}: {}", rank_, world_size_, verdict);
  form_group();
#else
  (void)facts;  // connect() refused a world of several ranks
#endif
}

std::string ProcessGroup::judge_facts() {
#ifdef BCD_HAVE_C10D
  c10d::Store& store = *impl_->store;
  const auto deadline = Clock::now() + impl_->timeout;
  int64_t published = 0, gone = 0;
  for (;;) {  // until every rank published, one left, or the timeout passed
    published = store.add(kPublished, 0);
    gone = store.add(kGone, 0);
    if (published >= world_size_ || gone > 0 || Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string verdict;
  int readers = world_size_ - 1;  // ranks that will read the verdict
  if (published < world_size_) {
    std::vector<int> left, silent;
    for (int r = 1; r < world_size_; ++r) {
      if (store.check({gone_key(r)})) left.push_back(r);
      else if (!store.check({hash_key(r)})) silent.push_back(r);
    }
    readers -= static_cast<int>(left.size() + silent.size());
    std::vector<std::string> parts;
    if (!left.empty())
      parts.push_back(fmt::format("{} stopped before the ranks compared their runs (see {} own error)",
                                  rank_ranges(left), left.size() > 1 ? "their" : "its"));
    if (!silent.empty() && left.empty())
      parts.push_back(fmt::format("{} did not describe {} run within {} s ([dist] timeout_s): stopped, hung or dead "
                                  "(see {} log)",
                                  rank_ranges(silent), silent.size() > 1 ? "their" : "its",
                                  impl_->timeout.count() / 1000, silent.size() > 1 ? "their" : "its"));
    verdict = parts.empty() ? "a rank left before the ranks compared their runs" : parts[0];
    verdict += "; no rank starts";
  } else {
    std::vector<std::string> keys;
    for (int r = 0; r < world_size_; ++r) keys.push_back(hash_key(r));
    const std::vector<std::vector<uint8_t>> hashes = store.multiGet(keys);
    std::map<std::string, std::string> text_of;  // hash -> the text of the first rank that has it
    std::vector<RankFacts> facts_of(static_cast<size_t>(world_size_));
    for (int r = 0; r < world_size_; ++r) {
      const std::string h = as_text(hashes[static_cast<size_t>(r)]);
      if (!text_of.count(h)) text_of[h] = as_text(store.get(facts_key(r)));
      facts_of[static_cast<size_t>(r)] = decode_facts(text_of[h]);
    }
    if (text_of.size() > 1) {
      std::string diff = rank_differences(facts_of);
      if (diff.empty()) diff = "their descriptions differ in order";  // the same facts in another order
      verdict = "the ranks were started on different runs; no rank starts (start every rank with the same config, "
                "data, checkpoint and binary): " + diff;
    }
  }
  store.set(kVerdict, as_bytes(verdict.empty() ? "ok" : "!" + verdict));
  if (!verdict.empty()) {
    // The store leaves with this process: wait (a little) until the others have read the verdict.
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (store.add(kRead, 0) < readers && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return verdict;
#else
  return "";
#endif
}

std::string ProcessGroup::await_verdict() {
#ifdef BCD_HAVE_C10D
  c10d::Store& store = *impl_->store;
  const auto t0 = Clock::now();
  // Rank 0 waits up to the timeout for the last rank; the margin covers its comparison.
  const auto limit = impl_->timeout + std::chrono::seconds(30);
  std::string v;
  try {
    store.wait({kVerdict}, limit);
    v = as_text(store.get(kVerdict));
  } catch (const std::exception& e) {
    if (seconds_since(t0) < 0.9 * std::chrono::duration<double>(limit).count()) return kStoreGone;
    return fmt::format("rank 0 did not compare the ranks' runs within {} s: {}",
                       std::chrono::duration_cast<std::chrono::seconds>(limit).count(), one_line(e));
  }
  if (v == "ok") return "";
  try {
    store.add(kRead, 1);
  } catch (const std::exception&) {
    // rank 0 has gone already: the verdict is read
  }
  return v.empty() ? "rank 0 refused the run" : v.substr(1);
#else
  return "";
#endif
}

void ProcessGroup::form_group() {
#ifdef BCD_HAVE_C10D
  const DistEnv& env = impl_->env;
  const auto timeout = impl_->timeout;
#ifdef BCD_HAVE_NCCL
  if (impl_->kind == Backend::kNccl) {
    // Collectives run on NCCL's own streams, which ProcessGroupNCCL orders after the work already
    // queued on the current (compute) stream by an event, and before later work that waits on the
    // collective: wait() orders the compute stream and returns (never TORCH_NCCL_BLOCKING_WAIT,
    // which makes every wait block the host and turns async error handling off). The host waits
    // only where it reads a value, polling against dist.timeout_s (wait_device), and the
    // watchdog, at the timeout plus a margin, aborts a collective that never ends and tears the
    // process down (async error handling 3, torch's default: also when the host is elsewhere).
    for (const char* blocking : {"TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"})
      if (const char* v = std::getenv(blocking); v && *v && std::string(v) != "0") {
        fmt::print(stderr, "bcdtrain: rank {}: ignoring {}={}: waits on collectives must not block the host\n",
                   env.rank, blocking, v);
        ::unsetenv(blocking);
      }
    ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3", 0);
    try {
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout + kWatchdogMargin;
      impl_->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, env.rank, env.world_size, opts);
      impl_->device = impl_->model_device;
      set_device_wait([this] { wait_device("a read of the step's values (waiting for the collectives before it)"); });
    } catch (const std::exception& e) {
      user_error("rank {}: cannot form the NCCL group of {} ranks: {}", env.rank, env.world_size, one_line(e));
    }
  }
#endif
#ifdef BCD_HAVE_GLOO
  if (impl_->kind == Backend::kGloo) {
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
      impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, env.rank, env.world_size, opts);
    } catch (const std::exception& e) {
      user_error("rank {}: cannot form the Gloo group of {} ranks: {}", env.rank, env.world_size, one_line(e));
    }
  }
#endif
#endif
}

// ---- Collectives ----

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
#ifdef BCD_HAVE_NCCL
  // A collective that never ends holds its kernels on the GPU: abort the communicators so the
  // process can leave (ProcessGroupNCCL would otherwise wait for them as it goes).
  if (impl_->pg && impl_->kind == Backend::kNccl) try {
      impl_->pg->abort();
    } catch (const std::exception&) {
    }
#endif
  user_error("rank {} of {}: {} failed (a rank stopped or the [dist] timeout passed){}: {}", rank_, world_size_, op,
             absent.empty() ? "" : "; " + absent, one_line(e));
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
  BCD_CHECK(impl_->pg, "{}: the ranks have not agreed on the run yet (ProcessGroup::agree)", op);
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
  BCD_CHECK(impl_->pg, "all-gather: the ranks have not agreed on the run yet (ProcessGroup::agree)");
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

namespace {
// Polls `e` until it has happened (true) or `timeout` has passed (false); never blocks in the
// device's runtime.
bool poll_event(const c10::Event& e, std::chrono::milliseconds timeout) {
  const auto t0 = Clock::now();
  auto pause = std::chrono::microseconds(20);
  while (!e.query()) {
    if (Clock::now() - t0 > timeout) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
  return true;
}
}  // namespace

void ProcessGroup::wait_event(const c10::Event& e, const char* op) const {
  if (!poll_event(e, impl_->timeout))
    fail(op, std::runtime_error(fmt::format("the device had not finished it after {} s ([dist] timeout_s)",
                                            impl_->timeout.count() / 1000)));
}

void ProcessGroup::wait_device(const char* op) const {
  const torch::Device& dev = impl_->device;
  if (dev.is_cpu()) return;
  const c10::impl::VirtualGuardImpl guard(dev.type());
  c10::Event done(dev.type());
  done.record(guard.getStream(dev));
  wait_event(done, op);
}

std::vector<double> ProcessGroup::sum_over_ranks(std::vector<double> values) {
  if (world_size_ == 1 || values.empty()) return values;
  torch::Tensor t = torch::tensor(values, torch::kFloat64).to(impl_->device);
  wait_for(start_all_reduce_sum(t));
  wait_device("all-reduce");
  t = t.cpu();
  const double* p = t.data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

void ProcessGroup::start_lagged_sum(const std::vector<double>& values) {
  Impl::Lagged& l = impl_->lagged;
  BCD_CHECK(!l.pending, "start_lagged_sum: the sum started before was not collected");
  BCD_CHECK(!values.empty(), "start_lagged_sum: no values");
  l.pending = true;
  if (world_size_ == 1) {
    l.values = values;
    return;
  }
  const torch::Device& dev = impl_->device;
  const bool on_device = !dev.is_cpu();
  l.host_in = torch::tensor(values, torch::kFloat64);
  if (on_device) l.host_in = l.host_in.pin_memory();  // a pageable copy would wait for the queue
  l.dev = on_device ? l.host_in.to(torch::TensorOptions().device(dev), /*non_blocking=*/true) : l.host_in;
  l.ticket = start_all_reduce_sum(l.dev);
  if (!on_device) return;  // collect waits for it on the host
  wait_for(l.ticket);      // a GPU's queue waits for the collective, the host does not
  l.host_out = torch::empty(l.dev.sizes(), torch::TensorOptions().dtype(torch::kFloat64).pinned_memory(true));
  l.host_out.copy_(l.dev, /*non_blocking=*/true);
  const c10::impl::VirtualGuardImpl guard(dev.type());
  l.copied.emplace(dev.type());
  l.copied->record(guard.getStream(dev));
}

std::optional<std::vector<double>> ProcessGroup::collect_lagged_sum() {
  Impl::Lagged& l = impl_->lagged;
  if (!l.pending) return std::nullopt;
  l.pending = false;
  if (world_size_ == 1) return std::move(l.values);
  torch::Tensor out = l.dev;
  if (l.copied) {
    wait_event(*l.copied, "all-reduce of the stop flags");  // that copy only, not the work queued since
    l.copied.reset();
    out = l.host_out;
  } else {
    wait_for(l.ticket);
  }
  const double* p = out.data_ptr<double>();
  std::vector<double> sum(p, p + out.numel());
  l.host_in = l.dev = l.host_out = torch::Tensor();
  return sum;
}

void ProcessGroup::barrier() {
  if (world_size_ == 1) return;
#ifdef BCD_HAVE_C10D
  BCD_CHECK(impl_->pg, "barrier: the ranks have not agreed on the run yet (ProcessGroup::agree)");
  if (!impl_->device.is_cpu()) {
    // ProcessGroupNCCL's barrier blocks the host in its wait(), without a bound: a one-element
    // all-reduce, waited for by polling, is the same meeting.
    const torch::Tensor one = torch::ones({1}, torch::TensorOptions().dtype(torch::kFloat32).device(impl_->device));
    wait_for(start_all_reduce_sum(one));
    wait_device("barrier");
    return;
  }
  try {
    impl_->pg->barrier(c10d::BarrierOptions())->wait();
  } catch (const std::exception& e) {
    fail("barrier", e);
  }
#endif
}

}  // namespace bcd
