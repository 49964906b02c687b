// The copies a copy engine has issued and not yet found finished, with the two timed events each
// holds (start, end), reused once it is found finished. CUDA-free: CudaCopyStreams instantiates it
// with CUDA events, the CPU tests with events they finish by hand.
//
// Every open() first sweeps the copies found finished, so the ledger holds only the copies still
// in flight (plus one), however its owner learns of completions: by done()/wait() per copy, or
// only through fences, which wait on the streams and never on a copy's own events (the weight
// stream on CUDA). Without the sweep the map and its events grew by one copy per copy issued.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace bcd {

// Events: a type with
//   using Event = ...;                 a copyable handle
//   Event create();                    a new timed event (may throw)
//   bool finished(Event end);          the event has completed; throws on an error status
//   double seconds(Event a, Event b);  time between two completed events (0 when untimed)
//   void destroy(Event e);             never throws
template <class Events>
class CopyLedger {
 public:
  using Event = typename Events::Event;
  struct Copy {
    Event start{}, end{};
  };

  explicit CopyLedger(Events events = {}) : events_(std::move(events)) {}
  ~CopyLedger() {
    for (auto& [t, c] : live_) events_.destroy(c.start), events_.destroy(c.end);
    for (const Copy& w : waits_) events_.destroy(w.start), events_.destroy(w.end);
    for (Event e : spare_) events_.destroy(e);
  }
  CopyLedger(const CopyLedger&) = delete;
  CopyLedger& operator=(const CopyLedger&) = delete;

  Events& events() { return events_; }

  // A new copy's token (1, 2, ...) and its two events, after retiring every finished copy.
  std::pair<uint64_t, Copy> open() {
    sweep();
    Copy c;
    c.start = take();
    c.end = take();
    const uint64_t t = next_++;
    live_.emplace(t, c);
    return {t, c};
  }

  // The copy `t` while it is live; nullptr once retired (or never issued).
  const Copy* find(uint64_t t) const {
    auto it = live_.find(t);
    return it == live_.end() ? nullptr : &it->second;
  }

  // `t` has finished: its time counted, its events back to the spares.
  void retire(uint64_t t) {
    auto it = live_.find(t);
    if (it == live_.end()) return;
    seconds_ += events_.seconds(it->second.start, it->second.end);
    spare_.push_back(it->second.start);
    spare_.push_back(it->second.end);
    live_.erase(it);
  }

  // Retires every copy whose end event has completed.
  void sweep() {
    for (auto it = live_.begin(); it != live_.end();) {
      const uint64_t t = it->first;
      const bool done = events_.finished(it->second.end);
      ++it;  // retire() erases t only
      if (done) retire(t);
    }
  }

  // A wait of the compute side on a copy: two events from the spares, to be recorded on the
  // compute stream around the wait (the stream reaching it, the stream going on). Its time is
  // counted once the second has finished (waited_seconds), off the host: a query, never a sync.
  Copy open_wait() {
    sweep_waits();
    Copy w;
    w.start = take();
    w.end = take();
    waits_.push_back(w);
    return w;
  }
  // Seconds the compute side spent in the waits found finished so far, summed.
  double waited_seconds() {
    sweep_waits();
    return waited_;
  }
  size_t pending_waits() const { return waits_.size(); }

  size_t live_copies() const { return live_.size(); }
  size_t events_held() const { return 2 * (live_.size() + waits_.size()) + spare_.size(); }  // live and spare
  uint64_t events_created() const { return created_; }
  double seconds() const { return seconds_; }  // summed durations of the retired copies

 private:
  // Waits complete in the compute stream's order: the oldest unfinished one ends the sweep.
  void sweep_waits() {
    size_t n = 0;
    while (n < waits_.size() && events_.finished(waits_[n].end)) {
      waited_ += events_.seconds(waits_[n].start, waits_[n].end);
      spare_.push_back(waits_[n].start);
      spare_.push_back(waits_[n].end);
      ++n;
    }
    waits_.erase(waits_.begin(), waits_.begin() + static_cast<std::ptrdiff_t>(n));
  }

  Event take() {
    if (!spare_.empty()) {
      Event e = spare_.back();
      spare_.pop_back();
      return e;
    }
    Event e = events_.create();
    ++created_;
    return e;
  }

  Events events_;
  std::map<uint64_t, Copy> live_;  // by token
  std::vector<Copy> waits_;         // the compute side's waits not yet found finished, in order
  std::vector<Event> spare_;
  uint64_t next_ = 1;
  uint64_t created_ = 0;
  double seconds_ = 0;
  double waited_ = 0;
};

}  // namespace bcd
