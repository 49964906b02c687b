// Block partition (units) and the BCD visiting schedule.
#include "optim/bcd_scheduler.h"

#include <algorithm>
#include <numeric>

#include "model/llama.h"
#include "base/error.h"

namespace bcd {

std::vector<UnitShape> make_units(const LlamaModel& model, const BcdConfig& cfg) {
  return unit_shapes(model.config(), cfg);
}

namespace {
// splitmix64: a tiny, well-mixed generator whose output is the same on every platform
// (std::shuffle's algorithm is implementation-defined, so it is not used for the schedule).
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

BcdScheduler::BcdScheduler(int n_units, const BcdConfig& cfg, uint64_t seed, std::vector<int> fixed)
    : n_units_(n_units), order_kind_(cfg.order), switch_every_(cfg.switch_every), seed_(seed),
      fixed_(std::move(fixed)) {
  BCD_CHECK(n_units > 0);
  if (!cfg.enabled) order_kind_ = BlockOrder::kAscending, switch_every_ = INT64_MAX;
  if (order_kind_ == BlockOrder::kFixed) {
    BCD_CHECK(!fixed_.empty(), "fixed order needs units");
    for (int u : fixed_) BCD_CHECK(u >= 0 && u < n_units, "fixed order unit {}", u);
  }
  order_ = epoch_order(0);
}

std::vector<int> BcdScheduler::epoch_order(uint64_t epoch) const {
  if (order_kind_ == BlockOrder::kFixed) return fixed_;
  std::vector<int> o(n_units_);
  std::iota(o.begin(), o.end(), 0);
  if (order_kind_ == BlockOrder::kDescending) std::reverse(o.begin(), o.end());
  if (order_kind_ == BlockOrder::kRandom) {
    uint64_t s = seed_ ^ (0xD1B54A32D192ED03ull * (epoch + 1));
    for (int i = n_units_ - 1; i > 0; --i) {
      const int j = static_cast<int>(splitmix64(s) % static_cast<uint64_t>(i + 1));
      std::swap(o[i], o[j]);
    }
  }
  return o;
}

std::vector<int> BcdScheduler::lookahead(int n) const {
  std::vector<int> out;
  uint64_t e = state_.epoch, p = state_.position;
  std::vector<int> ord = order_;
  while (static_cast<int>(out.size()) < n) {
    if (++p >= ord.size()) {
      ++e, p = 0;
      ord = epoch_order(e);
    }
    out.push_back(ord[p]);
  }
  return out;
}

bool BcdScheduler::step() {
  if (++state_.step_in_visit < static_cast<uint64_t>(switch_every_)) return false;
  state_.step_in_visit = 0;
  if (++state_.position >= order_.size()) {
    ++state_.epoch, state_.position = 0;
    order_ = epoch_order(state_.epoch);
  }
  return true;
}

void BcdScheduler::restore(const SchedulerState& s) {
  std::vector<int> ord = epoch_order(s.epoch);
  if (s.position >= ord.size() || s.step_in_visit >= static_cast<uint64_t>(switch_every_))
    user_error("scheduler state (epoch {}, position {}, step {}) does not fit {} blocks with switch_every {}",
               s.epoch, s.position, s.step_in_visit, ord.size(), switch_every_);
  state_ = s;
  order_ = std::move(ord);
}

}  // namespace bcd
