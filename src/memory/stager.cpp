// The stager: prefetch, swap and write-back of unit images through the slab pool.
#include "memory/stager.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/error.h"

namespace bcd {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool ready(const std::shared_future<void>& f) {
  return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}
}  // namespace

uint64_t StagedUnit::bytes() const {
  uint64_t n = 0;
  for (uint64_t b : kind_bytes) n += b;
  return n;
}

Stager::Stager(std::vector<StagedUnit> units, StagerOptions opts, MemoryAccounting* acct)
    : units_(std::move(units)), opts_(std::move(opts)), acct_(acct) {
  BCD_CHECK(opts_.prefetch_depth >= 1, "prefetch_depth {}", opts_.prefetch_depth);
  const size_t n = units_.size();
  has_data_.assign(n, false);
  host_.resize(n);
  objects_.assign(n, 0);
  uint64_t largest = 0;
  bool any_nvme = false;
  for (const StagedUnit& u : units_) {
    largest = std::max(largest, u.bytes());
    any_nvme |= u.home == Tier::kNvme && u.bytes() > 0;
  }
  if (any_nvme) {
    if (opts_.nvme_paths.empty()) user_error("memory: state is placed on the NVMe tier but memory.nvme_paths is empty");
    store_ = std::make_unique<ExtentStore>(opts_.nvme_paths, opts_.store, opts_.engine_factory);
  }
  for (size_t u = 0; u < n; ++u) {
    const StagedUnit& su = units_[u];
    if (su.bytes() == 0) continue;
    BCD_CHECK(su.home == Tier::kPinned || su.home == Tier::kNvme, "unit {}: home must be host or nvme", su.name);
    const Pool pool = su.home == Tier::kNvme ? Pool::kNvme : Pool::kHost;
    for (int k = 0; k < kNumStateKinds; ++k)
      if (su.kind_bytes[k] > 0) charges_.emplace_back(acct_, pool, k, su.kind_bytes[k]);
    if (su.home == Tier::kNvme) objects_[u] = store_->create("unit." + su.name, su.bytes());
    else host_[u] = AlignedBuffer(su.bytes());
  }
  pool_ = std::make_unique<SlabPool>(largest > 0 ? opts_.prefetch_depth + 1 : 0, largest, acct_, opts_.compute_on_cuda);
  copier_ = opts_.compute_on_cuda ? make_cuda_copier(opts_.compute_stream) : make_thread_copier();
  // Async copies from pageable memory are synchronous: the overlap would be silently lost.
  if (opts_.compute_on_cuda && pool_->bytes() > 0 && !pool_->page_locked())
    user_error("memory: the pinned staging pool ({:.1f} MiB) could not be page-locked ({}); lower "
               "memory.prefetch_depth, free host memory or raise the locked-memory limit (ulimit -l)",
               static_cast<double>(pool_->bytes()) / (1 << 20), pool_->lock_error());
  // io_uring's registered buffers save pinning each request's pages, but registering pins (so
  // touches) the whole pool at once: seconds for GBs of fresh pages, a core's worth of work that
  // the start would wait for or the first steps compete with, to save a few % of one core on
  // 1 MiB requests (fio here: 6% vs 2% system time at the same throughput). So only a pool that
  // is page-locked already (CUDA: its pages are resident) is registered; elsewhere each slab's
  // pages are touched by its first use.
  if (store_ && pool_->page_locked()) store_->register_buffer(pool_->base(), pool_->bytes());
}

Stager::~Stager() {
  try {
    flush();
  } catch (const std::exception&) {
    // reported by flush() to whoever called it; a destructor has no one to tell
  }
  for (auto& [unit, op] : reads_) {
    try {
      finish(op);
    } catch (const std::exception&) {
    }
  }
  copier_.reset();  // drains copies into compute memory and out of slabs before either is freed
}

void Stager::start(Op& op) {
  const StagedUnit& su = units_[op.unit];
  char* slab = pool_->slab(op.slab);
  const uint64_t n = su.bytes();
  if (su.home == Tier::kNvme) {
    op.ticket = op.read ? store_->read_async(objects_[op.unit], slab) : store_->write_async(objects_[op.unit], slab);
    (op.read ? stats_.nvme_read_bytes : stats_.nvme_write_bytes) += n;
    return;
  }
  char* host = host_[op.unit].data();
  if (op.read) {
    std::shared_future<void> before;  // this unit's write-back, which the copy must follow
    auto it = host_writes_.find(op.unit);
    if (it != host_writes_.end()) before = it->second;
    op.copy = std::async(std::launch::async, [=] {
                if (before.valid()) before.wait();
                std::memcpy(slab, host, n);
              }).share();
    stats_.host_read_bytes += n;
  } else {
    op.copy = std::async(std::launch::async, [=] { std::memcpy(host, slab, n); }).share();
    host_writes_[op.unit] = op.copy;
    stats_.host_write_bytes += n;
  }
}

void Stager::finish(Op& op) {
  if (op.waited) return;
  op.waited = true;
  if (units_[op.unit].home == Tier::kNvme) store_->wait(op.ticket);
  else op.copy.get();
}

void Stager::wait_host_write(int unit) {
  auto it = host_writes_.find(unit);
  if (it == host_writes_.end()) return;
  it->second.wait();
  host_writes_.erase(it);
}

bool Stager::write_done(const Op& op) {
  if (!op.started) return false;
  return units_[op.unit].home == Tier::kNvme ? store_->done(op.ticket) : ready(op.copy);
}

void Stager::start_write(Op& op) {
  if (op.started) return;
  copier_->wait(op.filled);
  op.started = true;
  start(op);
}

void Stager::poll() {
  for (size_t i = 0; i < ins_.size();) {
    if (copier_->done(ins_[i].token)) {
      pool_->release(ins_[i].slab);
      ins_.erase(ins_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  for (Op& w : writes_)
    if (!w.started && copier_->done(w.filled)) start_write(w);
}

void Stager::retire_oldest_write() {
  Op op = writes_.front();
  writes_.erase(writes_.begin());
  pool_->release(op.slab);  // back whatever happens below: nothing takes it before we return
  start_write(op);
  finish(op);
}

void Stager::retire_oldest_in() {
  const InCopy c = ins_.front();
  ins_.erase(ins_.begin());
  pool_->release(c.slab);  // as above
  copier_->wait(c.token);
}

void Stager::start_writes_of(int unit) {
  for (Op& w : writes_)
    if (w.unit == unit) start_write(w);
}

int Stager::take_slab() {
  poll();
  // Finished write-backs give their slabs back first (and report their errors).
  while (!writes_.empty() && write_done(writes_.front())) retire_oldest_write();
  int s = pool_->acquire();
  if (s >= 0) return s;
  if (!ins_.empty()) {  // a copy into the compute tier still holds one: the oldest
    retire_oldest_in();
    return pool_->acquire();
  }
  if (!writes_.empty()) {  // wait for the oldest write-back
    retire_oldest_write();
    return pool_->acquire();
  }
  BCD_CHECK(false, "staging pool: all {} slabs hold prefetches", pool_->count());
}

void Stager::prefetch(int unit) {
  BCD_CHECK(unit >= 0 && unit < n_units(), "prefetch of unit {}", unit);
  if (unit == active_ || units_[unit].bytes() == 0 || !has_data_[unit] || reads_.count(unit)) return;
  if (static_cast<int>(reads_.size()) >= opts_.prefetch_depth) return;
  // Never block the training thread here: without a free slab, or while the unit's own image is
  // still on its way out of the compute tier, the prefetch waits for a later call.
  poll();
  for (const Op& w : writes_)
    if (w.unit == unit && !w.started) return;
  // Exactly the slabs take_slab() gets without waiting: free ones and the oldest finished write-back.
  if (pool_->free_count() == 0 && (writes_.empty() || !write_done(writes_.front()))) return;
  Op op;
  op.unit = unit, op.slab = take_slab(), op.read = true;
  start(op);
  reads_[unit] = op;
}

bool Stager::swap(int from, int to, void* compute) {
  BCD_CHECK(from != to, "swap of unit {} with itself", to);
  BCD_CHECK(from == active_, "swap from unit {} but unit {} is active", from, active_);
  BCD_CHECK(to >= 0 && to < n_units(), "swap to unit {}", to);
  const auto t0 = Clock::now();
  // 1. `to`'s image in a slab: prefetched (wait if late) or read now.
  int in = -1;
  if (units_[to].bytes() > 0 && has_data_[to]) {
    if (!reads_.count(to)) {
      start_writes_of(to);  // its last image must reach home before it is read back
      Op op;
      op.unit = to, op.slab = take_slab(), op.read = true;
      start(op);
      reads_[to] = op;
    }
    Op op = reads_.at(to);
    reads_.erase(to);
    try {
      finish(op);  // a failed read or checksum throws here, before `compute` is touched
    } catch (...) {
      pool_->release(op.slab);
      throw;
    }
    in = op.slab;
  }
  // 2. A slab for `from`'s write-back.
  int out = -1;
  if (from >= 0 && units_[from].bytes() > 0) out = take_slab();
  const double stall = since(t0);
  // 3. Enqueue compute -> slab (its write-back starts when it is done), then slab -> compute.
  if (out >= 0) {
    const uint64_t n = units_[from].bytes();
    Op op;
    op.unit = from, op.slab = out, op.read = false, op.started = false;
    op.filled = copier_->copy_out(pool_->slab(out), compute, n);
    last_copy_ = op.filled;
    stats_.compute_out_bytes += n;
    writes_.push_back(op);
    has_data_[from] = true;
  }
  if (in >= 0) {
    const uint64_t n = units_[to].bytes();
    ins_.push_back({in, copier_->copy_in(compute, pool_->slab(in), n)});
    last_copy_ = ins_.back().token;
    stats_.compute_in_bytes += n;
  }
  active_ = to;
  stats_.switches += 1;
  stats_.stall_s += stall;
  stats_.last_stall_s = stall;
  return in >= 0;
}

void Stager::zero_compute(void* compute, uint64_t bytes) {
  if (bytes > 0) last_copy_ = copier_->zero(compute, bytes);
}

void Stager::fence() {
  const auto t0 = Clock::now();
  // The compute image's own copies: the latest swap's (and zeroing), which follow every copy
  // before them.
  if (last_copy_) copier_->fence(last_copy_);
  const double waited = since(t0);
  stats_.fence_s += waited;
  stats_.stall_s += waited;
  poll();
}

const StagerStats& Stager::stats() const {
  stats_.copy_s = copier_->copy_seconds();
  stats_.copy_wait_s = copier_->wait_seconds();
  return stats_;
}

bool Stager::get(int unit, void* dst) {
  BCD_CHECK(unit != active_, "get of the active unit {}", unit);
  const uint64_t n = units_.at(unit).bytes();
  if (n == 0 || !has_data_[unit]) return false;
  start_writes_of(unit);
  auto it = reads_.find(unit);
  if (it != reads_.end()) {  // prefetched: the slab holds the image
    finish(it->second);
    std::memcpy(dst, pool_->slab(it->second.slab), n);
    return true;
  }
  if (units_[unit].home == Tier::kPinned) {
    wait_host_write(unit);
    std::memcpy(dst, host_[unit].data(), n);
    return true;
  }
  const int s = take_slab();
  try {
    store_->read(objects_[unit], pool_->slab(s));
  } catch (...) {
    pool_->release(s);
    throw;
  }
  std::memcpy(dst, pool_->slab(s), n);
  pool_->release(s);
  return true;
}

void Stager::put(int unit, const void* src) {
  BCD_CHECK(unit != active_, "put of the active unit {}", unit);
  const uint64_t n = units_.at(unit).bytes();
  if (n == 0) return;
  start_writes_of(unit);
  auto it = reads_.find(unit);
  if (it != reads_.end()) {  // the prefetched image is stale now
    Op op = it->second;
    reads_.erase(it);
    pool_->release(op.slab);
    finish(op);
  }
  if (units_[unit].home == Tier::kPinned) {
    wait_host_write(unit);
    std::memcpy(host_[unit].data(), src, n);
  } else {
    const int s = take_slab();
    std::memcpy(pool_->slab(s), src, n);
    try {
      store_->write(objects_[unit], pool_->slab(s));
    } catch (...) {
      pool_->release(s);
      throw;
    }
    pool_->release(s);
    stats_.nvme_write_bytes += n;
  }
  has_data_[unit] = true;
}

void Stager::flush() {
  while (!ins_.empty()) retire_oldest_in();
  while (!writes_.empty()) retire_oldest_write();
  for (auto& [unit, f] : host_writes_) f.wait();
  host_writes_.clear();
}

}  // namespace bcd
