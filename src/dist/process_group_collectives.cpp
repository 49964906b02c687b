// ProcessGroup's collectives (process_group.h): sums, reductions, the all-gather, waits bounded by
// dist.timeout_s that name the ranks that did not answer, the lagged sum, the barrier.
#include "dist/process_group_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "base/error.h"
#include "dist/host_read.h"

namespace bcd {

using namespace pg_detail;

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
  impl_->failed = true;
#ifdef BCD_HAVE_NCCL
  // A collective that never ends holds its kernels on the GPU: abort the communicators so the
  // process can leave (ProcessGroupNCCL would otherwise wait for them as it goes). Then let go of
  // the group without destroying it: its destructor joins the watchdog, which, having seen the
  // error, tears the process down (async error handling 3) once its dump pause is over, and
  // this rank's message would be lost in that. The process leaves long before.
  if (impl_->pg && impl_->kind == Backend::kNccl) {
    try {
      impl_->pg->abort();
    } catch (const std::exception&) {
    }
    (void)impl_->pg.release();
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
    if (impl_->kind == Backend::kNccl) {
      // Straight into the flat buffer: the list form stages a second buffer of out's size
      // and copies each rank's part out of it.
      at::Tensor flat_out = out, flat_in = in;
      impl_->pg->_allgather_base(flat_out, flat_in)->wait();
    } else {
      impl_->pg->allgather(outs, ins)->wait();
    }
  } catch (const std::exception& e) {
    fail("all-gather", e);
  }
  bytes_sent_ += static_cast<double>(in.nbytes()) * (world_size_ - 1);
#endif
}

namespace {
enum class Polled { kDone, kTimedOut, kBackendFailed };

// Polls `e` until it has happened, `timeout` has passed or `failed` (when given) says the
// backend has failed; never blocks in the device's runtime.
Polled poll_event(const c10::Event& e, std::chrono::milliseconds timeout, const std::function<bool()>& failed) {
  const auto t0 = Clock::now();
  auto pause = std::chrono::microseconds(20);
  while (!e.query()) {
    if (failed && failed()) return Polled::kBackendFailed;
    if (Clock::now() - t0 > timeout) return Polled::kTimedOut;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
  return Polled::kDone;
}

// An event recorded on `dev`'s current (compute) stream: it happens when what is queued there has run.
c10::Event device_mark(const torch::Device& dev) {
  const c10::impl::VirtualGuardImpl guard(dev.type());
  c10::Event done(dev.type());
  done.record(guard.getStream(dev));
  return done;
}
}  // namespace

std::function<bool()> ProcessGroup::backend_failed() const {
#ifdef BCD_HAVE_NCCL
  // ProcessGroupNCCL's watchdog notes a communicator's error (a peer that died, NCCL's own
  // failure) or a collective past its timeout at once; the host need not wait out its own.
  if (impl_->pg && impl_->kind == Backend::kNccl) {
    c10d::Backend* pg = impl_->pg.get();
    return [pg] {
      try {
        return pg->getError() != c10d::ErrorType::SUCCESS;
      } catch (const std::exception&) {
        return false;
      }
    };
  }
#endif
  return {};
}

void ProcessGroup::wait_event(const c10::Event& e, const char* op) const {
  switch (poll_event(e, impl_->timeout, backend_failed())) {
    case Polled::kDone: return;
    case Polled::kTimedOut:
      fail(op, std::runtime_error(fmt::format("the device had not finished it after {} s ([dist] timeout_s)",
                                              impl_->timeout.count() / 1000)));
    case Polled::kBackendFailed:
      fail(op, std::runtime_error("NCCL reported a failed or timed-out collective"));
  }
}

void ProcessGroup::drain() const {
  const torch::Device& dev = impl_->device;
  if (dev.is_cpu() || world_size_ == 1) return;
  (void)poll_event(device_mark(dev), impl_->timeout, backend_failed());
}

void ProcessGroup::wait_device(const char* op) const {
  const torch::Device& dev = impl_->device;
  if (dev.is_cpu()) return;
  wait_event(device_mark(dev), op);
}

std::vector<double> ProcessGroup::sum_over_ranks(std::vector<double> values) {
  if (world_size_ == 1 || values.empty()) return values;
  torch::Tensor t = torch::tensor(values, torch::kFloat64);
  // A copy from pageable memory would block the host until the device's queue drains, without
  // the bound the poll below keeps.
  if (!impl_->device.is_cpu()) t = t.pin_memory().to(impl_->device, /*non_blocking=*/true);
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
  l.copied.emplace(device_mark(dev));
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
