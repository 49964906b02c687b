// Benchmark `adamw-kernel`: fused CPU AdamW vs torch::optim::AdamW vs a parallel memcpy moving
// the same bytes, on one flat fp32 buffer. Last stdout line: one JSON record (scripts/bench.sh).
// Usage: bench_adamw [--params N] [--rounds R] [--threads T] [--isa scalar|avx2|avx512]
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "kernels/adamw.h"

namespace {

using Clock = std::chrono::steady_clock;
using bcd::bench::median;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Parallel std::memcpy over `chunk`-byte pieces, statically split over the threads like the
// fused kernel's work. Two chunk sizes are timed because glibc changes strategy with the size:
// one huge piece per thread streams with non-temporal stores, 256 KiB pieces use ordinary
// stores; whichever is faster on this machine is the bandwidth reported.
void parallel_memcpy(char* dst, const char* src, size_t bytes, size_t chunk) {
  const size_t chunks = (bytes + chunk - 1) / chunk;
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, chunks),
      [&](const tbb::blocked_range<size_t>& r) {
        const size_t b = r.begin() * chunk, e = std::min(bytes, r.end() * chunk);
        for (size_t off = b; off < e; off += chunk)
          std::memcpy(dst + off, src + off, std::min(chunk, e - off));
      },
      tbb::static_partitioner());
}

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "bench_adamw: " << why
            << "\nusage: bench_adamw [--params N] [--rounds R] [--threads T] [--isa scalar|avx2|avx512]\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = int64_t{64} << 20;  // 64M parameters: far beyond any cache, like a real block
  int rounds = 7;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string isa;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage("missing value for " + a);
    const std::string val = argv[++i];
    try {
      if (a == "--params") n = std::stoll(val);
      else if (a == "--rounds") rounds = std::stoi(val);
      else if (a == "--threads") threads = std::stoi(val);
      else if (a == "--isa") isa = val;
      else usage("unknown flag " + a);
    } catch (const std::logic_error&) {
      usage("bad value for " + a + ": " + val);
    }
  }
  if (n <= 0 || rounds <= 0 || threads <= 0) usage("--params, --rounds and --threads must be positive");
  if (!isa.empty()) {
    bool found = false;
    for (auto k : {bcd::AdamWIsa::kScalar, bcd::AdamWIsa::kAvx2, bcd::AdamWIsa::kAvx512})
      if (isa == bcd::adamw_isa_name(k)) {
        if (!bcd::adamw_cpu_isa_supported(k)) usage("this CPU lacks " + isa);
        bcd::adamw_cpu_force_isa(k);
        found = true;
      }
    if (!found) usage("unknown ISA " + isa);
  }
  // The same cores for both: torch's intra-op pool (OpenMP) and TBB.
  at::set_num_threads(threads);
  tbb::global_control tbb_threads(tbb::global_control::max_allowed_parallelism, threads);
  torch::NoGradGuard no_grad;

  // ---- Buffers ----
  // torch: its parameter, plus the m and v it allocates; fused: master, m, v. Same initial
  // weights and the same gradient, so the two must end up equal (checked below).
  torch::manual_seed(0);
  torch::Tensor p_torch = torch::randn({n});
  torch::Tensor grad = torch::randn({n});
  torch::Tensor master = p_torch.clone(), m = torch::zeros({n}), v = torch::zeros({n});
  p_torch.mutable_grad() = grad;
  bcd::AdamWHyper h;
  h.step = 0;  // fused_step counts up before each call, as torch's state does
  h.lr = 1e-3f, h.beta1 = 0.9f, h.beta2 = 0.95f, h.eps = 1e-8f, h.weight_decay = 0.1f;
  torch::optim::AdamW opt({p_torch}, torch::optim::AdamWOptions(h.lr).betas({h.beta1, h.beta2})
                                         .eps(h.eps).weight_decay(h.weight_decay));
  // Fused AdamW reads master, grad, m, v and writes master, m, v: 28 bytes per parameter.
  const size_t fused_bytes = static_cast<size_t>(n) * 28;
  // The memcpy moves as many bytes: reads half of them, writes the other half.
  const size_t copy_bytes = fused_bytes / 2;
  std::unique_ptr<char[]> src(new char[copy_bytes]), dst(new char[copy_bytes]);
  std::memset(src.get(), 1, copy_bytes);  // fault every page in before timing
  std::memset(dst.get(), 0, copy_bytes);

  auto fused_step = [&] {
    ++h.step;
    bcd::adamw_step_cpu(master.data_ptr<float>(), grad.data_ptr<float>(), m.data_ptr<float>(),
                        v.data_ptr<float>(), n, h);
  };

  // ---- Interleaved rounds (round 0 warms up: torch allocates its state) ----
  const size_t big_chunk = (copy_bytes + threads - 1) / threads, small_chunk = size_t{256} << 10;
  std::cout << fmt::format("adamw-kernel: {} params, {} threads, isa {}, {} rounds + warm-up\n", n,
                           threads, bcd::adamw_cpu_isa(), rounds);
  std::vector<double> torch_ms, fused_ms, copy_big_ms, copy_small_ms;
  for (int r = 0; r <= rounds; ++r) {
    auto t0 = Clock::now();
    opt.step();
    const double tt = ms_since(t0);
    t0 = Clock::now();
    fused_step();
    const double tf = ms_since(t0);
    t0 = Clock::now();
    parallel_memcpy(dst.get(), src.get(), copy_bytes, big_chunk);
    const double tb = ms_since(t0);
    t0 = Clock::now();
    parallel_memcpy(dst.get(), src.get(), copy_bytes, small_chunk);
    const double ts = ms_since(t0);
    std::cout << fmt::format("round {}{}: torch {:.1f} ms, fused {:.1f} ms, memcpy {:.1f} ms "
                             "(one piece per thread) / {:.1f} ms (256 KiB pieces)\n",
                             r, r == 0 ? " (warm-up)" : "", tt, tf, tb, ts);
    if (r == 0) continue;
    torch_ms.push_back(tt), fused_ms.push_back(tf);
    copy_big_ms.push_back(tb), copy_small_ms.push_back(ts);
  }

  // ---- Sanity: both optimizers took the same steps on the same data ----
  const double diff = (master - p_torch).abs().max().item<double>();
  std::cout << fmt::format("check: max |fused - torch| over master after {} steps = {:g}\n",
                           rounds + 1, diff);
  if (!(diff <= 1e-5)) {
    std::cerr << "bench_adamw: fused and torch AdamW disagree\n";
    return 1;
  }

  const double t_torch = median(torch_ms), t_fused = median(fused_ms);
  const double t_big = median(copy_big_ms), t_small = median(copy_small_ms);
  const double t_copy = std::min(t_big, t_small);
  const char* copy_kind = t_big <= t_small ? "tbb_std_memcpy_one_piece_per_thread"
                                           : "tbb_std_memcpy_256KiB_pieces";
  const double fused_gbs = static_cast<double>(fused_bytes) / (t_fused * 1e-3) / 1e9;
  const double copy_gbs = 2.0 * static_cast<double>(copy_bytes) / (t_copy * 1e-3) / 1e9;
  std::cout << fmt::format(
      "{{\"name\":\"adamw-kernel\",\"params\":{},\"torch_ms\":{:.2f},\"fused_ms\":{:.2f},"
      "\"ratio\":{:.2f},\"fused_gb_s\":{:.2f},\"memcpy_gb_s\":{:.2f},\"fraction_of_memcpy\":{:.3f},"
      "\"isa\":\"{}\",\"threads\":{},\"rounds\":{},\"memcpy\":\"{}\"}}\n",
      n, t_torch, t_fused, t_torch / t_fused, fused_gbs, copy_gbs, fused_gbs / copy_gbs,
      bcd::adamw_cpu_isa(), threads, rounds, copy_kind);
  return 0;
}
