// Benchmark head: the LM head and its loss for a vocabulary-sized head (Llama 3: V = 128,256),
// d_model 512, 2 x 2048 tokens a micro-batch, fp32 on the CPU: the fused, chunked head + cross
// entropy (model/fused_loss.h, the trainer's path: the weight's gradient into its fp32 sum)
// against the unfused one (logits whole, cross entropy, autograd). Each side runs in a fresh
// child process (fork before any torch call), so its peak memory is its own: the peak RSS
// (VmHWM) above the RSS once the inputs and the weight's gradient buffer exist, i.e. what the
// loss and its backward add; and the wall time of that forward + backward. Each round runs both,
// alternating which goes first; the ratios are medians of the per-round ratios (fused / unfused).
// Goals: peak memory <= 0.15, time <= 1.05. Settings: BENCH_VOCAB (128256), BENCH_D (512),
// BENCH_TOKENS (4096), BENCH_ROUNDS (3), BENCH_CHUNK (0: the automatic chunk). Last line: JSON.
#include <fmt/format.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "base/config.h"
#include "bench_util.h"
#include "model/fused_loss.h"

using namespace bcd;

namespace {

struct Side {
  double peak_bytes = 0, seconds = 0, loss = 0;
};

struct Settings {
  int64_t vocab, d, tokens, chunk;
};

// "VmRSS" or "VmHWM" of this process, in bytes.
double status_bytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::atof(line.c_str() + std::string(key).size() + 1) * 1024.0;
  return 0;
}

// One side, in this (child) process.
Side run_side(const Settings& s, bool fused_side) {
  torch::manual_seed(1);
  torch::Tensor h = torch::randn({s.tokens, s.d}).requires_grad_(true);
  torch::Tensor w = (torch::randn({s.vocab, s.d}) * 0.02).requires_grad_(true);
  const torch::Tensor y = torch::randint(s.vocab, {s.tokens}, torch::kInt64);
  // The weight's gradient buffer exists before the step in both (a trainable block's flat
  // gradient): autograd accumulates into it in place; the fused loss adds into it directly.
  torch::Tensor wgrad = torch::zeros({s.vocab, s.d});
  if (!fused_side) w.mutable_grad() = wgrad;
  h.mutable_grad() = torch::zeros_like(h);
  const double base = status_bytes("VmRSS:");
  const auto t0 = std::chrono::steady_clock::now();
  torch::Tensor loss;
  if (fused_side) {
    const torch::Tensor scale = torch::full({s.tokens}, 1.0 / static_cast<double>(s.tokens));
    loss = chunked_linear_cross_entropy(h, w, y, scale, s.chunk, wgrad);
  } else {
    loss = torch::nn::functional::cross_entropy(torch::nn::functional::linear(h, w), y);
  }
  loss.backward();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {status_bytes("VmHWM:") - base, secs, loss.item<double>()};
}

// Runs one side in a child process and reads its figures back through a pipe.
Side in_child(const Settings& s, bool fused_side) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const Side r = run_side(s, fused_side);
    const std::string line = fmt::format("{:.17g} {:.17g} {:.17g}\n", r.peak_bytes, r.seconds, r.loss);
    if (::write(fds[1], line.data(), line.size()) < 0) _exit(1);
    _exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fmt::print(stderr, "bench_head: the {} side failed (status {})\n", fused_side ? "fused" : "unfused", status);
    std::exit(1);
  }
  Side r;
  if (std::sscanf(text.c_str(), "%lf %lf %lf", &r.peak_bytes, &r.seconds, &r.loss) != 3) std::exit(1);
  return r;
}

std::string list(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += (s.empty() ? "" : ",") + fmt::format("{:.4f}", x);
  return s;
}

}  // namespace

int main() {
  ModelConfig m;
  m.vocab_size = bench::env_int("BENCH_VOCAB", 128256);
  m.loss_chunk_tokens = bench::env_int("BENCH_CHUNK", 0);
  Settings s{m.vocab_size, bench::env_int("BENCH_D", 512), bench::env_int("BENCH_TOKENS", 4096), 0};
  s.chunk = m.loss_chunk(s.tokens, 4);
  const int rounds = bench::env_int("BENCH_ROUNDS", 3);
  fmt::print(stderr, "bench_head: V {}, d_model {}, {} tokens, fp32, chunk {} tokens, {} rounds\n", s.vocab, s.d, s.tokens,
             s.chunk, rounds);
  std::vector<double> mem_ratios, time_ratios, fused_peak, unfused_peak, fused_s, unfused_s;
  for (int r = 0; r < rounds; ++r) {
    Side f, u;
    if (r % 2 == 0) {
      f = in_child(s, true), u = in_child(s, false);
    } else {
      u = in_child(s, false), f = in_child(s, true);
    }
    if (std::abs(f.loss - u.loss) > 1e-5 * std::abs(u.loss)) {
      fmt::print(stderr, "bench_head: the losses differ: fused {} unfused {}\n", f.loss, u.loss);
      return 1;
    }
    mem_ratios.push_back(f.peak_bytes / u.peak_bytes);
    time_ratios.push_back(f.seconds / u.seconds);
    fused_peak.push_back(f.peak_bytes / (1 << 20)), unfused_peak.push_back(u.peak_bytes / (1 << 20));
    fused_s.push_back(f.seconds), unfused_s.push_back(u.seconds);
    fmt::print(stderr,
               "round {}: fused {:.0f} MiB {:.2f} s | unfused {:.0f} MiB {:.2f} s | memory {:.4f} time {:.4f} | loss {:.6f}\n",
               r + 1, fused_peak.back(), f.seconds, unfused_peak.back(), u.seconds, mem_ratios.back(),
               time_ratios.back(), f.loss);
  }
  fmt::print(
      "{{\"bench\":\"head\",\"vocab\":{},\"d_model\":{},\"tokens\":{},\"dtype\":\"fp32\",\"chunk_tokens\":{},"
      "\"rounds\":{},\"fused_peak_mib\":{:.1f},\"unfused_peak_mib\":{:.1f},\"fused_s\":{:.3f},\"unfused_s\":{:.3f},"
      "\"memory_ratios\":[{}],\"time_ratios\":[{}],\"memory_ratio\":{:.4f},\"time_ratio\":{:.4f},\"ratio\":{:.4f}}}\n",
      s.vocab, s.d, s.tokens, s.chunk, rounds, bench::median(fused_peak), bench::median(unfused_peak),
      bench::median(fused_s), bench::median(unfused_s), list(mem_ratios), list(time_ratios), bench::median(mem_ratios),
      bench::median(time_ratios), bench::median(mem_ratios));
  return 0;
}
