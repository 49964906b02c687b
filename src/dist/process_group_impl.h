// The inside of ProcessGroup, shared by its two source files only: process_group.cpp (rendezvous
// and agreement) and process_group_collectives.cpp (collectives, waits, the lagged sum). c10d's
// headers, the backend and store, the collectives in flight. Nothing else includes this.
#pragma once

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

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "base/error.h"
#include "dist/host_read.h"
#include "dist/rank_facts.h"

#ifdef BCD_HAVE_C10D
#include <c10/util/Logging.h>
#endif

namespace bcd {

namespace pg_detail {

using Clock = std::chrono::steady_clock;

// NCCL's watchdog waits this much longer than dist.timeout_s, so the host's own poll (which names
// the ranks that did not answer) ends a rank first.
constexpr std::chrono::seconds kWatchdogMargin{60};

#ifdef BCD_HAVE_C10D
inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
#endif

// An exception's message in one line: c10's errors carry a backtrace and "Exception raised from"
// after their message.
inline std::string one_line(const std::exception& e) {
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

}  // namespace pg_detail

// What process_group.cpp (rendezvous, agreement) and process_group_collectives.cpp share.
struct ProcessGroup::Impl {
  torch::Device device = torch::kCPU;  // where the backend wants tensors (NCCL: this rank's GPU)
  std::string backend = "none";
  bool agreed = false;                 // agree() ran to its end (either way): nothing to tell when leaving
  bool failed = false;                 // a collective failed (fail()): nothing to drain when leaving
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

}  // namespace bcd
