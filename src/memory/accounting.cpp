// Runtime memory accounting.
#include "memory/accounting.h"

#include <fmt/format.h>

#include "base/error.h"

namespace bcd {

const char* state_kind_name(StateKind k) {
  switch (k) {
    case StateKind::kWorking: return "working";
    case StateKind::kMaster: return "master";
    case StateKind::kAdamM: return "m";
    case StateKind::kAdamV: return "v";
    case StateKind::kGrad: return "grad";
  }
  return "?";
}

const char* use_name(int use) {
  if (use == kUseActivations) return "activations";
  if (use == kUseStaging) return "staging";
  return state_kind_name(static_cast<StateKind>(use));
}

uint64_t PoolUsage::state_now() const {
  uint64_t n = 0;
  for (int k = 0; k < kNumStateKinds; ++k) n += now[k];
  return n;
}

MemoryAccounting::MemoryAccounting(const std::array<uint64_t, kNumPools>& budgets) {
  for (int p = 0; p < kNumPools; ++p) set_budget(static_cast<Pool>(p), budgets[p]);
}

void MemoryAccounting::set_budget(Pool pool, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  pools_[static_cast<int>(pool)].budget = bytes;
}

void MemoryAccounting::charge(Pool pool, int use, uint64_t bytes) {
  BCD_CHECK(use >= 0 && use < kNumUses, "use {}", use);
  std::lock_guard<std::mutex> lk(mu_);
  PoolUsage& p = pools_[static_cast<int>(pool)];
  if (p.budget > 0 && p.total + bytes > p.budget)
    user_error("memory: the {} pool would hold {:.3f} GiB ({} {:.3f} GiB more) but its budget is {:.3f} GiB",
               pool_name(pool), static_cast<double>(p.total + bytes) / (1 << 30), use_name(use),
               static_cast<double>(bytes) / (1 << 30), static_cast<double>(p.budget) / (1 << 30));
  p.now[use] += bytes;
  p.total += bytes;
  p.peak[use] = std::max(p.peak[use], p.now[use]);
  p.total_peak = std::max(p.total_peak, p.total);
}

void MemoryAccounting::release(Pool pool, int use, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  PoolUsage& p = pools_[static_cast<int>(pool)];
  BCD_CHECK(p.now[use] >= bytes, "release of {} bytes of {} in {}: only {} charged", bytes, use_name(use),
            pool_name(pool), p.now[use]);
  p.now[use] -= bytes;
  p.total -= bytes;
}

PoolUsage MemoryAccounting::usage(Pool pool) const {
  std::lock_guard<std::mutex> lk(mu_);
  return pools_[static_cast<int>(pool)];
}

nlohmann::json MemoryAccounting::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (int i = 0; i < kNumPools; ++i) {
    const PoolUsage p = usage(static_cast<Pool>(i));
    nlohmann::json j = {{"total", p.total}, {"peak", p.total_peak}, {"budget", p.budget}};
    for (int u = 0; u < kNumUses; ++u)
      if (p.peak[u] > 0) j[use_name(u)] = p.now[u], j[std::string("peak_") + use_name(u)] = p.peak[u];
    out[pool_name(static_cast<Pool>(i))] = j;
  }
  return out;
}

Charge::Charge(MemoryAccounting* acct, Pool pool, int use, uint64_t bytes)
    : acct_(acct), pool_(pool), use_(use), bytes_(bytes) {
  if (acct_ && bytes_ > 0) acct_->charge(pool_, use_, bytes_);
}

Charge& Charge::operator=(Charge&& o) noexcept {
  if (this != &o) {
    reset();
    acct_ = o.acct_, pool_ = o.pool_, use_ = o.use_, bytes_ = o.bytes_;
    o.acct_ = nullptr, o.bytes_ = 0;
  }
  return *this;
}

void Charge::reset() {
  if (acct_ && bytes_ > 0) acct_->release(pool_, use_, bytes_);
  acct_ = nullptr, bytes_ = 0;
}

}  // namespace bcd
