// Rendezvous and agreement over c10d (TCPStore + ProcessGroupGloo/NCCL); the collectives:
// process_group_collectives.cpp; where the ranks come from: dist_env.cpp.
#include "dist/process_group_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <exception>
#include <map>
#include <thread>

#include "base/error.h"
#include "dist/rank_facts.h"
#include "kernels/cuda_side.h"

namespace bcd {

using namespace pg_detail;

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

// The keys ProcessGroupNCCL's watchdog signals its peers through (torch 2.11's kStoreDumpKey and
// kStoreErrorSignalKey; dist/nccl_side.cpp checks the names against its header). It sets them in
// the store beneath every prefix, so under torchrun, whose agent keeps that store across restarts,
// an earlier attempt's signal outlives it: the new attempt's heartbeat monitor finds it the first
// time its collectives are idle, dumps, waits TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC and aborts the
// process. Rank 0 deletes them while agreeing, before any rank's group exists.
constexpr const char* kNcclSignalKeys[] = {"exception_dump", "remote_error"};

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
  // Leaving without a failure (not while an error unwinds: a peer may never match what this
  // rank started): the collectives in flight end first (the last stop flags' sum is never
  // collected), so that ProcessGroupNCCL's teardown, which aborts its communicators, cuts none
  // of them short on a peer still inside it.
  if (impl_->agreed && !impl_->failed && std::uncaught_exceptions() == 0) drain();
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
  if (impl_->env.agent_store) clear_earlier_signals();
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

void ProcessGroup::clear_earlier_signals() {
#ifdef BCD_HAVE_C10D
  auto* prefixed = dynamic_cast<c10d::PrefixStore*>(impl_->store.get());
  const c10::intrusive_ptr<c10d::Store> global = prefixed ? prefixed->getUnderlyingNonPrefixStore() : impl_->store;
  for (const char* key : kNcclSignalKeys)
    if (global->deleteKey(key))
      fmt::print(stderr, "bcdtrain: rank 0: removed the NCCL watchdog's \"{}\" signal an earlier attempt left in "
                 "torchrun's store\n", key);
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
    // process down (async error handling 3, torch's default, left to the user's
    // TORCH_NCCL_ASYNC_ERROR_HANDLING: also when the host is elsewhere). The polls end sooner when
    // the watchdog has noted a failure (backend_failed).
    for (const char* blocking : {"TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"})
      if (const char* v = std::getenv(blocking); v && *v && std::string(v) != "0") {
        fmt::print(stderr, "bcdtrain: rank {}: ignoring {}={}: waits on collectives must not block the host\n",
                   env.rank, blocking, v);
        ::unsetenv(blocking);
      }
    try {
      // ProcessGroupNCCL is in LibTorch's CUDA library: the CUDA side (kernels/cuda_side.h) makes it.
      const auto watchdog = std::chrono::duration_cast<std::chrono::milliseconds>(timeout + kWatchdogMargin);
      const CudaSide& side = cuda_side();
      if (!side.nccl_backend) user_error("this build's CUDA side has no NCCL process group");
      void* made = side.nccl_backend(impl_->store.get(), env.rank, env.world_size, watchdog.count());
      impl_->pg = c10::intrusive_ptr<c10d::Backend>::reclaim(static_cast<c10d::Backend*>(made));
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

}  // namespace bcd
