// The CUDA side of staging: the copy streams' ordering against the compute stream, the stager
// with its compute image in device memory, and BCD training on a GPU with state on NVMe.
// Labelled gpu; each test skips, saying why, without a CUDA build, a device, or CUDA LibTorch.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memory/compute_copy.h"
#include "memory/slab_pool.h"
#include "memory/stager.h"
#include "runtime/cuda_torch.h"
#include "runtime/trainer.h"
#include "staging_test_helpers.h"
#include "test_util.h"

#ifdef BCD_HAVE_CUDA_KERNELS
#include <cuda_runtime_api.h>

#include "cuda_test_helpers.h"
#include "kernels/copy_streams.h"
#endif

namespace bcd {
namespace {

constexpr uint64_t kMiB = 1 << 20;
using test::pattern;

#ifndef BCD_HAVE_CUDA_KERNELS
TEST(CudaStaging, Unavailable) { GTEST_SKIP() << "built without CUDA kernels (BCD_CUDA=OFF or no nvcc found)"; }
#else

using test::DeviceArray;

#define SKIP_WITHOUT_DEVICE()                                 \
  if (const std::string why = test::no_device_reason(); !why.empty()) GTEST_SKIP() << why

// Page-locked host memory (the slabs are; async copies from pageable memory are not async).
class PinnedBuffer {
 public:
  explicit PinnedBuffer(uint64_t n) : n_(n) { CUDA_CHECK(cudaHostAlloc(&p_, n, cudaHostAllocPortable)); }
  ~PinnedBuffer() { cudaFreeHost(p_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  char* get() const { return static_cast<char*>(p_); }
  std::vector<char> vec() const { return std::vector<char>(get(), get() + n_); }
  void fill(const std::vector<char>& h) { std::memcpy(p_, h.data(), h.size()); }

 private:
  void* p_ = nullptr;
  uint64_t n_;
};

// Holds the stream it is enqueued on for `ms` (cudaLaunchHostFunc): compute work that is
// still running when the copies are enqueued.
void CUDART_CB sleep_on_stream(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms)));
}

// copy_out follows the compute stream's last write even when that write is late; copy_in
// follows copy_out; after fence() the compute stream sees copy_in's bytes; a second copy_out
// issued without a fence reads what copy_in wrote. Each checked through the legacy stream.
TEST(CudaCopier, CopiesOrderedAgainstTheComputeStream) {
  SKIP_WITHOUT_DEVICE();
  const uint64_t n = 64 * kMiB;
  auto c = make_cuda_copier(nullptr);
  EXPECT_TRUE(c->on_cuda());
  DeviceArray<char> image(n);
  PinnedBuffer out(n), in(n), seen(n), out2(n);
  in.fill(pattern(n, 2));
  image.upload(pattern(n, 1).data());
  static int hold_ms = 300;
  // The "last update": a write on the compute stream, held back 300 ms, that copy_out must wait for.
  CUDA_CHECK(cudaLaunchHostFunc(cudaStreamLegacy, sleep_on_stream, &hold_ms));
  CUDA_CHECK(cudaMemsetAsync(image.get(), 0x5a, n, cudaStreamLegacy));
  const auto t_out = c->copy_out(out.get(), image.get(), n);
  const auto t_in = c->copy_in(image.get(), in.get(), n);
  EXPECT_FALSE(c->done(t_out)) << "the copy cannot be done while the compute stream is held";
  c->fence();
  // Compute-side work after the fence: must see the incoming image.
  CUDA_CHECK(cudaMemcpyAsync(seen.get(), image.get(), n, cudaMemcpyDeviceToHost, cudaStreamLegacy));
  const auto t_out2 = c->copy_out(out2.get(), image.get(), n);  // no fence before it
  CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  c->wait(t_out);
  c->wait(t_in);
  c->wait(t_out2);
  EXPECT_TRUE(c->done(t_out) && c->done(t_in) && c->done(t_out2));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a \"not ready\" query must not linger as an error";
  EXPECT_TRUE(out.vec() == std::vector<char>(n, 0x5a)) << "copy_out ran before the compute stream's write";
  EXPECT_TRUE(seen.vec() == in.vec()) << "the compute stream ran ahead of copy_in";
  EXPECT_TRUE(out2.vec() == in.vec()) << "copy_out ran ahead of the copy_in before it";
  EXPECT_GT(c->copy_seconds(), 0.0);
}

// The weight stream on CUDA learns of its copies only through fences, never done() or wait():
// thousands of copies issued so leave the ledger holding the copies in flight, not two events
// for every copy ever issued (which grew without bound on a long run).
TEST(CudaCopier, FencedCopiesLeaveNoEventsBehind) {
  SKIP_WITHOUT_DEVICE();
  const uint64_t n = kMiB;
  constexpr int kCatchUp = 64;  // the compute side waits for the copies every 64 of them
  CudaCopyStreams s(nullptr);
  DeviceArray<char> slot(n);
  PinnedBuffer host(n);
  size_t most = 0;
  for (int i = 0; i < 5000; ++i) {
    s.copy_in(slot.get(), host.get(), n);
    s.fence();
    if (i % kCatchUp == kCatchUp - 1) CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    most = std::max(most, s.live_copies());
  }
  EXPECT_LE(most, static_cast<size_t>(kCatchUp + 1));
  EXPECT_LE(s.events_created(), 2u * (kCatchUp + 1));
  EXPECT_GT(s.copy_seconds(), 0.0);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// A fence on one copy: the compute stream waits for it (not for a copy issued after it into
// another buffer), and that wait is timed by the events around it, read without a host sync.
TEST(CudaCopier, AFenceOnACopyIsTimedOnTheComputeStream) {
  SKIP_WITHOUT_DEVICE();
  const uint64_t n = 256 * kMiB;  // ~10 ms over PCIe: the compute stream reaches the wait first
  CudaCopyStreams s(nullptr);
  DeviceArray<char> a(n), b(n);
  PinnedBuffer host(n);
  const uint64_t first = s.copy_in(a.get(), host.get(), n);
  s.copy_in(b.get(), host.get(), n);  // a later prefetch into another buffer
  s.fence(first);
  CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  EXPECT_GT(s.wait_seconds(), 0.0) << "the compute stream's wait was not timed";
  s.fence();
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_GE(s.wait_seconds(), 0.0);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// The slab pool on a GPU machine: anonymous memory registered with CUDA (cudaHostRegister), never
// the driver's cudaHostAlloc mapping, and the NVMe tier's reads land in it.
TEST(CudaStaging, TheSlabPoolIsRegisteredAnonymousMemory) {
  SKIP_WITHOUT_DEVICE();
  MemoryAccounting a;
  SlabPool p(2, 8 * kMiB, &a, /*page_lock=*/true);
  ASSERT_TRUE(p.page_locked()) << p.lock_error();
  EXPECT_EQ(test::mapping_of(p.base()), "") << "the slabs are a driver's mapping";
  cudaPointerAttributes attr{};
  CUDA_CHECK(cudaPointerGetAttributes(&attr, p.base()));
  EXPECT_EQ(attr.type, cudaMemoryTypeHost) << "registered with CUDA";
  test::StagerFixture f(3, Tier::kNvme, 1);
  f.opts.compute_on_cuda = true;
  Stager st(f.units, f.opts, &f.acct);
  std::vector<char> want = pattern(f.units[1].bytes(), 5), got(want.size());
  st.put(1, want.data());
  ASSERT_TRUE(st.get(1, got.data()));  // through a slab: the store's read (O_DIRECT where the directory allows)
  EXPECT_TRUE(got == want);
}

// The stager with its compute image in device memory: every image that comes back is the one
// that went home last, for host and NVMe homes.
TEST(CudaStager, SwapsReturnWhatWentHome) {
  SKIP_WITHOUT_DEVICE();
  for (Tier home : {Tier::kPinned, Tier::kNvme}) {
    test::StagerFixture f(5, home, 1);
    f.opts.compute_on_cuda = true;
    Stager st(f.units, f.opts, &f.acct);
    EXPECT_TRUE(st.on_cuda());
    uint64_t largest = 0;
    for (const auto& u : f.units) largest = std::max(largest, u.bytes());
    DeviceArray<char> compute(static_cast<int64_t>(largest));
    std::map<int, std::vector<char>> truth;
    std::mt19937 g(11);
    std::vector<int> seq;
    for (int i = 0; i < 30; ++i) seq.push_back(static_cast<int>(g() % 5));
    int active = -1;
    for (size_t i = 0; i < seq.size(); ++i) {
      const int to = seq[i];
      if (to == active) continue;
      const bool loaded = st.swap(active, to, compute.get());
      st.fence();
      CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
      const uint64_t nb = f.units[to].bytes();
      EXPECT_EQ(loaded, truth.count(to) == 1) << "visit " << i;
      if (loaded) {
        ASSERT_TRUE(compute.download(static_cast<int64_t>(nb)) == truth[to]) << "home " << static_cast<int>(home) << " visit " << i;
      }
      truth[to] = pattern(nb, static_cast<uint32_t>(100 + i));
      compute.upload(truth[to].data(), static_cast<int64_t>(nb));
      active = to;
      if (i + 1 < seq.size()) st.prefetch(seq[i + 1]);
    }
    st.flush();
    for (auto& [u, want] : truth) {
      if (u == active) continue;
      std::vector<char> got(f.units[u].bytes());
      ASSERT_TRUE(st.get(u, got.data()));
      EXPECT_TRUE(got == want) << "unit " << u;
    }
    EXPECT_GT(st.stats().compute_in_bytes, 0u);
  }
}

// LibTorch must be a CUDA build for model tensors on the GPU (Debian's is CPU-only).
#define SKIP_WITHOUT_TORCH_CUDA()                                                     \
  SKIP_WITHOUT_DEVICE();                                                             \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "LibTorch here is built without CUDA"

// A run's set-up is its process's first CUDA work: the rank's GPU made current, then LibTorch's
// allocator capped before any tensor exists (setMemoryFraction on an allocator LibTorch has not
// initialised fails). ctest runs each test in a process of its own, so nothing came before.
TEST(CudaDevice, TheRanksGpuIsCurrentAndCappedBeforeAnyTensor) {
  SKIP_WITHOUT_TORCH_CUDA();
  const int last = static_cast<int>(torch::cuda::device_count()) - 1;
  start_cuda_device(last);
  int current = -1;
  CUDA_CHECK(cudaGetDevice(&current));
  EXPECT_EQ(current, last);
  const uint64_t cap = 1ull << 30;
  ASSERT_NO_THROW(cap_cuda_allocator(last, cap));
  const auto bytes = torch::TensorOptions(torch::kUInt8).device(torch::kCUDA);  // LibTorch's current device
  const torch::Tensor under = torch::empty({static_cast<int64_t>(cap / 4)}, bytes);
  EXPECT_EQ(under.device().index(), last);
  EXPECT_THROW(torch::empty({static_cast<int64_t>(cap)}, bytes), c10::OutOfMemoryError) << "the cap is not in force";
}

// cuBLAS reads its workspace configuration when its first handle is made: set for the whole
// binary, before any test runs, so deterministic mode finds it in force.
const bool kCublasDeterministic = setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0) == 0;

// Deterministic GPU kernels for a bitwise comparison, for one scope. Deterministic mode raises on
// an op without a deterministic kernel rather than warning: a warning would let the op run and
// the comparison flake. Attention takes SDPA's math path: the fused kernels' backward accumulates
// with atomics in an order that varies from run to run.
class DeterministicGpu {
 public:
  DeterministicGpu() {
    auto& ctx = at::globalContext();
    det_ = ctx.deterministicAlgorithms(), warn_ = ctx.deterministicAlgorithmsWarnOnly();
    ctx.setDeterministicAlgorithms(true, /*warn_only=*/false);
#if TORCH_VERSION_MAJOR >= 2
    flash_ = ctx.userEnabledFlashSDP(), mem_ = ctx.userEnabledMemEfficientSDP();
    ctx.setSDPUseFlash(false), ctx.setSDPUseMemEfficient(false);
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 3
    cudnn_ = ctx.userEnabledCuDNNSDP();
    ctx.setSDPUseCuDNN(false);
#endif
#endif
  }
  ~DeterministicGpu() {
    auto& ctx = at::globalContext();
    ctx.setDeterministicAlgorithms(det_, warn_);
#if TORCH_VERSION_MAJOR >= 2
    ctx.setSDPUseFlash(flash_), ctx.setSDPUseMemEfficient(mem_);
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 3
    ctx.setSDPUseCuDNN(cudnn_);
#endif
#endif
  }
  DeterministicGpu(const DeterministicGpu&) = delete;
  DeterministicGpu& operator=(const DeterministicGpu&) = delete;

 private:
  bool det_ = false, warn_ = false, flash_ = true, mem_ = true, cudnn_ = true;
};

// BCD on the GPU with moments on NVMe: the same as with moments in host memory (the copies move
// bytes, never change them; deterministic kernels), and close to the CPU run.
TEST(CudaTraining, NvmeHomesEqualHostHomesAndTrackTheCpu) {
  SKIP_WITHOUT_TORCH_CUDA();
  ASSERT_TRUE(kCublasDeterministic);
  const DeterministicGpu deterministic;
  test::TempDir dir("bcd-cuda-staging");
  const torch::Device gpu(torch::kCUDA, 0);
  for (bool bf16 : {false, true}) {
    const auto dtype = bf16 ? torch::kBFloat16 : torch::kFloat32;
    const test::Trained host = test::train_small(dtype, "random", "layer", true, Tier::kPinned, dir.path(), gpu);
    const test::Trained nvme = test::train_small(dtype, "random", "layer", true, Tier::kNvme, dir.path(), gpu);
    EXPECT_EQ(host.losses, nvme.losses) << (bf16 ? "bf16" : "fp32");
    ASSERT_EQ(host.weights.size(), nvme.weights.size());
    for (size_t i = 0; i < host.weights.size(); ++i) EXPECT_TRUE(torch::equal(host.weights[i], nvme.weights[i])) << i;
    EXPECT_GT(nvme.staging.nvme_read_bytes, 0u);
    EXPECT_GT(nvme.staging.compute_in_bytes, 0u);
    if (!bf16) {
      const test::Trained cpu = test::train_small(dtype, "random", "layer", true, Tier::kPinned, dir.path());
      ASSERT_EQ(cpu.losses.size(), host.losses.size());
      // fp32 on both; summation order differs, and Adam's first steps turn tiny differences
      // into lr-sized ones, so "close" is 1e-2 on a loss near 4: a wrong update is far off.
      for (size_t i = 0; i < cpu.losses.size(); ++i) EXPECT_NEAR(cpu.losses[i], host.losses[i], 1e-2) << "step " << i;
    }
  }
}

// The whole trainer on the GPU: `train --train.device=cuda` with state on NVMe runs, stages, and
// writes a model and checkpoint that load on the CPU.
TEST(CudaTraining, TrainerRunsOnTheGpu) {
  SKIP_WITHOUT_TORCH_CUDA();
  test::TempDir dir("bcd-cuda-train");
  auto prep = test::prepare_fortunes(dir.file("data"));
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  const std::string args = "train --config " + test::source_path("configs/tiny.toml") + " --data.path=" +
                           dir.file("data") + " --train.steps=24 --train.device=cuda --train.dtype=bf16 --bcd.switch_every=4" +
                           " --train.checkpoint_every=12 --memory.home=nvme --memory.nvme_paths='[\"" +
                           dir.file("nvme") + "\"]' --train.run_dir=" + dir.file("run");
  auto r = test::run_bcdtrain(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on cuda"), std::string::npos) << r.output;
  const auto recs = test::read_metrics(dir.file("run/metrics.jsonl"));
  ASSERT_FALSE(recs.empty());
  EXPECT_LT(recs.back()["loss"].get<double>(), recs.front()["loss"].get<double>());
  EXPECT_GT(recs.back()["staged_bytes"]["nvme_read"].get<uint64_t>(), 0u);
  auto g = test::run_bcdtrain("generate --run " + dir.file("run") + " --prompt 'The' --max-new-tokens 8");
  EXPECT_EQ(g.exit_code, 0) << g.output;
  // Resuming the GPU run from its mid-run checkpoint reproduces its logged losses.
  auto resumed = test::run_bcdtrain("train --resume " + dir.file("run/checkpoints/step-00000012.h5") +
                                    " --train.run_dir=" + dir.file("run2"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto again = test::read_metrics(dir.file("run2/metrics.jsonl"));
  ASSERT_FALSE(again.empty());
  EXPECT_NEAR(again.back()["loss"].get<double>(), recs.back()["loss"].get<double>(), 1e-4);
}

#endif

}  // namespace
}  // namespace bcd
