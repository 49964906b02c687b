// FaultEngine: decides per request (through the shared FaultPlan) whether to fail, shorten or
// corrupt it, forwards the rest to the wrapped engine, and maps completions back.
#include "io/fault_engine.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <string>

#include "base/error.h"

namespace bcd {

const char* to_string(FaultKind kind) {
  switch (kind) {
    case FaultKind::kEio: return "EIO";
    case FaultKind::kEnospc: return "ENOSPC";
    case FaultKind::kShort: return "short transfer";
    case FaultKind::kBitFlip: return "bit flip";
  }
  return "?";
}

std::vector<Fault> parse_faults(const std::string& spec, const std::string& source) {
  std::vector<Fault> out;
  std::stringstream items(spec);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    std::vector<std::string> f;
    std::stringstream parts(item);
    std::string p;
    while (std::getline(parts, p, ':')) f.push_back(p);
    auto bad = [&](const std::string& why) {
      user_error("{}: fault '{}': {} (expected OP:N:KIND[:BIT], OP read|write, KIND eio|enospc|short|bitflip)",
                 source, item, why);
    };
    if (f.size() < 3 || f.size() > 4) bad("wrong number of fields");
    Fault fault;
    if (f[0] == "read") fault.op = IoOp::kRead;
    else if (f[0] == "write") fault.op = IoOp::kWrite;
    else bad("unknown operation");
    auto number = [&](const std::string& text) -> uint64_t {
      if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 18)
        bad("'" + text + "' is not a count");
      return std::stoull(text);
    };
    fault.nth = number(f[1]);
    if (fault.nth == 0) bad("requests count from 1");
    const std::map<std::string, FaultKind> kinds = {{"eio", FaultKind::kEio},
                                                    {"enospc", FaultKind::kEnospc},
                                                    {"short", FaultKind::kShort},
                                                    {"bitflip", FaultKind::kBitFlip}};
    auto k = kinds.find(f[2]);
    if (k == kinds.end()) bad("unknown kind");
    fault.kind = k->second;
    if (f.size() == 4) {
      if (fault.kind != FaultKind::kBitFlip) bad("only bitflip takes a bit");
      fault.bit = number(f[3]);
    }
    out.push_back(fault);
  }
  if (out.empty()) user_error("{}: no faults in '{}'", source, spec);
  return out;
}

// ---- FaultPlan ----

std::optional<Fault> FaultPlan::next(IoOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t nth = ++seen_[static_cast<int>(op)];
  for (const Fault& f : faults_) {
    if (f.op == op && f.nth == nth) {
      fired_.push_back(f);
      return f;
    }
  }
  return std::nullopt;
}

uint64_t FaultPlan::injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_.size();
}

uint64_t FaultPlan::seen(IoOp op) const {
  std::lock_guard<std::mutex> lock(mu_);
  return seen_[static_cast<int>(op)];
}

std::vector<Fault> FaultPlan::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

// ---- FaultEngine ----

FaultEngine::FaultEngine(std::unique_ptr<IoEngine> inner, std::shared_ptr<FaultPlan> plan)
    : plan_(std::move(plan)), inner_(std::move(inner)) {
  BCD_CHECK(inner_ && plan_);
}

namespace {

void flip_bit(void* buf, uint64_t length, uint64_t bit) {
  bit %= length * 8;
  static_cast<unsigned char*>(buf)[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
}

}  // namespace

int FaultEngine::submit(const IoRequest* reqs, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (int rc = validate_request(reqs[i])) return rc;
  for (size_t i = 0; i < n; ++i) {
    const IoRequest& req = reqs[i];
    const std::optional<Fault> fault = plan_->next(req.op);
    const FaultKind kind = fault ? fault->kind : FaultKind::kEio;
    if (fault && (kind == FaultKind::kEio || kind == FaultKind::kEnospc)) {
      ready_.push_back(IoCompletion{req.tag, kind == FaultKind::kEio ? -EIO : -ENOSPC});
      continue;
    }
    IoRequest fwd = req;
    fwd.tag = next_tag_++;
    InFlight f{req.tag, fault, req.buf, req.length, req.length, AlignedBuffer()};
    if (fault && kind == FaultKind::kShort) {
      f.reported = req.length / 2 / kIoAlign * kIoAlign;
      if (f.reported == 0) {
        ready_.push_back(IoCompletion{req.tag, 0});
        continue;
      }
      fwd.length = f.reported;
    } else if (fault && kind == FaultKind::kBitFlip && req.op == IoOp::kWrite) {
      f.bounce = AlignedBuffer(req.length);
      std::memcpy(f.bounce.data(), req.buf, req.length);
      flip_bit(f.bounce.data(), req.length, fault->bit);
      fwd.buf = f.bounce.data();
    }
    const int rc = inner_->submit(fwd);
    BCD_CHECK(rc == 0, "validated request refused: {}", errno_text(rc));
    in_flight_.emplace(fwd.tag, std::move(f));
  }
  return 0;
}

size_t FaultEngine::translate(IoCompletion* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    auto it = in_flight_.find(out[i].tag);
    BCD_CHECK(it != in_flight_.end(), "completion for unknown tag {}", out[i].tag);
    InFlight& f = it->second;
    out[i].tag = f.tag;
    if (f.fault && f.fault->kind == FaultKind::kShort && out[i].result >= 0) {
      out[i].result = static_cast<int64_t>(f.reported);
    } else if (f.fault && f.fault->kind == FaultKind::kBitFlip && f.fault->op == IoOp::kRead &&
               out[i].result == static_cast<int64_t>(f.length)) {
      flip_bit(f.buf, f.length, f.fault->bit);
    }
    in_flight_.erase(it);
  }
  return n;
}

size_t FaultEngine::take_ready(IoCompletion* out, size_t max) {
  const size_t n = std::min(max, ready_.size());
  for (size_t i = 0; i < n; ++i) {
    out[i] = ready_.front();
    ready_.pop_front();
  }
  return n;
}

size_t FaultEngine::poll(IoCompletion* out, size_t max) {
  size_t n = take_ready(out, max);
  if (n < max) n += translate(out + n, inner_->poll(out + n, max - n));
  return n;
}

size_t FaultEngine::wait(IoCompletion* out, size_t max, size_t min_complete) {
  const size_t want = std::min({min_complete, max, pending()});
  size_t n = take_ready(out, max);
  if (n < want)
    n += translate(out + n, inner_->wait(out + n, max - n, want - n));
  else if (n < max)
    n += translate(out + n, inner_->poll(out + n, max - n));
  return n;
}

}  // namespace bcd
