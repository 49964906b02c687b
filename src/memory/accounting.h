// Runtime accounting of memory: bytes per pool (compute, pinned, host, NVMe) and per use (the
// state kinds, activations, staging), now and at peak, checked against the pools' budgets.
// Every allocation of model state goes through a Charge, so the peaks are exact.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "memory/tier.h"

namespace bcd {

// Uses beyond the state kinds: the activation reservation and the staging slabs.
constexpr int kUseActivations = kNumStateKinds;
constexpr int kUseStaging = kNumStateKinds + 1;
constexpr int kNumUses = kNumStateKinds + 2;
const char* use_name(int use);  // state_kind_name, "activations", "staging"

struct PoolUsage {
  std::array<uint64_t, kNumUses> now{}, peak{};  // peak per use, each over time
  uint64_t total = 0, total_peak = 0;            // all uses together
  uint64_t budget = 0;                           // 0 = unlimited
  uint64_t state_now() const;                    // the state kinds only (no activations/staging)
};

// Thread-safe.
class MemoryAccounting {
 public:
  MemoryAccounting() = default;
  // With each pool's budget (by Pool; 0 = unlimited).
  explicit MemoryAccounting(const std::array<uint64_t, kNumPools>& budgets);
  void set_budget(Pool pool, uint64_t bytes);  // 0 = unlimited

  // Adds `bytes` to (pool, use). UserError naming the pool, what it would hold and its budget
  // when the budget would be exceeded; nothing is charged then.
  void charge(Pool pool, int use, uint64_t bytes);
  void release(Pool pool, int use, uint64_t bytes);

  PoolUsage usage(Pool pool) const;
  // {"compute": {"total": .., "peak": .., "budget": .., "working": .., ...}, ...}
  nlohmann::json to_json() const;

 private:
  mutable std::mutex mu_;
  std::array<PoolUsage, kNumPools> pools_{};
};

// One charge, released on destruction (movable). A null accounting charges nothing.
class Charge {
 public:
  Charge() = default;
  Charge(MemoryAccounting* acct, Pool pool, int use, uint64_t bytes);
  ~Charge() { reset(); }
  Charge(Charge&& o) noexcept { *this = std::move(o); }
  Charge& operator=(Charge&& o) noexcept;
  Charge(const Charge&) = delete;
  Charge& operator=(const Charge&) = delete;
  void reset();
  uint64_t bytes() const { return bytes_; }

 private:
  MemoryAccounting* acct_ = nullptr;
  Pool pool_ = Pool::kCompute;
  int use_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace bcd
