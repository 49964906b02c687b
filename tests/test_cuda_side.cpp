// The CUDA side (kernels/cuda_side.h) is loaded only when a GPU is asked for: the binary maps
// none of CUDA's libraries before, and loading the side late registers CUDA with LibTorch as
// linking LibTorch's CUDA library would. This executable links LibTorch's CPU library alone, as
// bcdtrain does (tests/CMakeLists.txt).
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>
#include <string>

#include "base/error.h"
#include "kernels/cuda_side.h"
#include "runtime/machine.h"
#include "test_util.h"

namespace bcd {
namespace {

bool mapped(const char* soname) {
  void* h = ::dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
  if (h) ::dlclose(h);
  return h != nullptr;
}

// CUDA's libraries and the side, as the dynamic loader names them when it starts one.
const char* const kCudaLibraries[] = {"libbcdtrain_cuda.so", "libtorch_cuda.so", "libc10_cuda.so", "libcublas",
                                      "libcudnn",            "libnccl"};

// The libraries above that LD_DEBUG=files output shows started ("calling init: PATH").
std::string cuda_libraries_started(const std::string& ld_debug_output) {
  std::string found;
  std::istringstream lines(ld_debug_output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("calling init: ") == std::string::npos) continue;
    for (const char* lib : kCudaLibraries)
      if (line.find(lib) != std::string::npos) found += std::string(found.empty() ? "" : ", ") + lib;
  }
  return found;
}

TEST(CudaSide, LoadedLateItRegistersCudaWithLibTorch) {
  if (!cuda_side_built()) GTEST_SKIP() << "this build has no CUDA side (no CUDA toolkit or a CPU LibTorch)";
  ASSERT_FALSE(cuda_side_loaded());
  EXPECT_FALSE(mapped("libtorch_cuda.so")) << "this test links LibTorch's CPU library alone";
  EXPECT_FALSE(c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA));
  // What a run does before it resolves its device (threads, GEMM, CUDA's matmul precision, as
  // start_compute does) must not ask LibTorch about CUDA: it keeps its first answer.
  configure_compute(TrainConfig{}, 1);
  // "cpu" loads nothing; nor does "auto" on a machine that shows no GPU driver.
  EXPECT_EQ(resolve_device(DeviceChoice::kCpu, 0, 1), torch::Device(torch::kCPU));
  if (!nvidia_driver_present()) {
    EXPECT_EQ(resolve_device(DeviceChoice::kAuto, 0, 1), torch::Device(torch::kCPU));
  }
  EXPECT_FALSE(cuda_side_loaded());
  EXPECT_FALSE(mapped("libtorch_cuda.so"));

  const CudaSide& side = cuda_side();
  EXPECT_TRUE(cuda_side_loaded());
  EXPECT_EQ(side.abi, kCudaSideAbi);
  EXPECT_TRUE(mapped("libtorch_cuda.so"));
  // LibTorch's CUDA hooks and device guard, registered by its CUDA library as it loaded: its
  // stand-in hooks would throw "without ATen_cuda library" here.
  EXPECT_TRUE(c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA));
  EXPECT_GT(at::detail::getCUDAHooks().versionCUDART(), 0);
  // The side's errors are the program's: an internal check and a refusal thrown there are caught
  // here by their types (the side keeps its own copy of base/error.cpp).
  EXPECT_THROW(side.adamw_step(nullptr, nullptr, false, nullptr, nullptr, -1, AdamWHyper{}, nullptr, nullptr),
               InternalError);
  // train.tf32 sets LibTorch's legacy and per-backend matmul precisions together: a reader of the
  // flag (TunableOp's) threw when only the new one was set.
  TrainConfig tf32;
  tf32.tf32 = true;
  configure_compute(tf32, 1);
  EXPECT_TRUE(at::globalContext().allowTF32CuBLAS());
  EXPECT_EQ(at::globalContext().float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL),
            at::Float32Precision::TF32);
  configure_compute(TrainConfig{}, 1);
  EXPECT_FALSE(at::globalContext().allowTF32CuBLAS());
  if (!torch::cuda::is_available()) {
    EXPECT_THROW(side.cap_allocator(0, 1ull << 30), UserError);  // no device to read the size of
    return;  // the rest needs a GPU
  }
  const torch::Tensor a = torch::ones({1024}, torch::TensorOptions(torch::kCUDA));
  EXPECT_EQ((a * 2).sum().item<float>(), 2048.0f);
  EXPECT_TRUE(side.device_usable());
  EXPECT_NE(side.device_name(0), "");
}

TEST(CudaSide, CommandsThatNeedNoGpuMapNoCudaLibrary) {
  if (!cuda_side_built()) GTEST_SKIP() << "this build has no CUDA side";
  const std::string plan = "plan --config " + test::source_path("configs/llama2-7b-1x4090.toml");
  for (const std::string& args : {std::string("--help"), plan}) {
    const test::RunResult r = test::run_shell("LD_DEBUG=files " + std::string(BCD_BINARY) + " " + args + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << args;
    EXPECT_NE(r.output.find("calling init: "), std::string::npos) << "LD_DEBUG said nothing: " << r.output.substr(0, 400);
    EXPECT_EQ(cuda_libraries_started(r.output), "") << "`bcdtrain " << args << "` loaded CUDA";
  }
  // What loading the binary costs: LibTorch's CPU library, not its CUDA one (~480 MB with it).
  const uint64_t loaded = test::peak_rss_bytes("--help");
  ASSERT_GT(loaded, 0u);
  EXPECT_LE(loaded, 200ull << 20) << "bcdtrain --help peaked at " << (loaded >> 20) << " MiB";
  if (nvidia_driver_present()) return;  // below: a machine without a GPU
  // A GPU asked for loads the side, which then finds no device.
  test::TempDir dir;
  const test::RunResult r =
      test::run_shell("LD_DEBUG=files " + std::string(BCD_BINARY) + " train --config " +
                      test::source_path("configs/tiny.toml") + " --train.device=cuda --train.run_dir=" + dir.file("run") +
                      " 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(cuda_libraries_started(r.output).find("libtorch_cuda.so"), std::string::npos);
  EXPECT_NE(r.output.find("no usable CUDA device"), std::string::npos) << r.output.substr(r.output.size() - 600);
}

}  // namespace
}  // namespace bcd
