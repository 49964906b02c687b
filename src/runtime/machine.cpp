// The machine a rank runs on: device, threads, memory share.
#include "runtime/machine.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "kernels/cuda_side.h"
#ifdef BCD_HAVE_CUDA_KERNELS
#include "kernels/adamw_cuda.h"
#include "kernels/host_memory.h"
#endif

#include "base/error.h"
#include "model/matmul.h"
#include "memory/planner.h"
#include "runtime/cuda_torch.h"

namespace bcd {

int cuda_device_for_rank(int local_rank, int local_ranks, int visible) {
  BCD_CHECK(local_rank >= 0 && local_rank < std::max(local_ranks, 1) && visible >= 1,
            "cuda_device_for_rank({}, {}, {})", local_rank, local_ranks, visible);
  if (local_rank < visible && local_ranks <= visible) return local_rank;  // one GPU each, as torchrun
  if (visible == 1) return 0;  // each rank was handed its own (Slurm --gpus-per-task, CUDA_VISIBLE_DEVICES)
  user_error("config: [train] device = \"cuda\": {} ranks on this machine but {} GPUs visible to local rank {}; "
             "each rank needs a GPU of its own (start at most {} ranks here, or give each rank one GPU through "
             "CUDA_VISIBLE_DEVICES)",
             local_ranks, visible, local_rank, visible);
}

torch::Device resolve_device(DeviceChoice device, int local_rank, int local_ranks) {
  const bool built = cuda_side_built();
  // The CUDA side is loaded only for a GPU asked for, or for "auto" where a GPU driver is seen:
  // a CPU run, and every command on a machine without a GPU, maps none of CUDA's libraries. It
  // is loaded before LibTorch is asked about CUDA (LibTorch keeps its first answer).
  if (device == DeviceChoice::kCpu || (device == DeviceChoice::kAuto && !(built && nvidia_driver_present())))
    return torch::kCPU;
  if (built) cuda_side();
  const bool usable = built && torch::cuda::is_available();
  if (device == DeviceChoice::kAuto && !usable) return torch::kCPU;
  if (!usable)
    user_error("config: [train] device = \"cuda\" but {}", built ? "LibTorch finds no usable CUDA device (is this LibTorch built with CUDA, is a GPU visible?)"
                                                                 : "this build has no CUDA kernels (configure with -DBCD_CUDA=ON and a CUDA toolkit)");
  const int index = cuda_device_for_rank(local_rank, local_ranks, static_cast<int>(torch::cuda::device_count()));
  // This rank's GPU is current before anything touches CUDA (no context on another GPU, the
  // allocator initialised for cap_cuda_allocator).
  start_cuda_device(index);
#ifdef BCD_HAVE_CUDA_KERNELS
  const std::string why = adamw_cuda_unsupported_reason(index);
  if (!why.empty()) {
    if (device == DeviceChoice::kAuto) return torch::kCPU;
    user_error("config: [train] device = \"cuda\" but {}", why);
  }
#endif
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void apply_device_budget(MemoryConfig& mem, const torch::Device& device) {
  if (!device.is_cuda() || !mem.compute_bytes.is_auto) return;
#ifdef BCD_HAVE_CUDA_KERNELS
  const size_t total = cuda_device_total_bytes(cuda_index(device));
  if (total > 0) mem.compute_bytes = Bytes{total, false};
#endif
}

uint64_t meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream is(line.substr(key.size() + 1));
    uint64_t kb = 0;
    if (is >> kb) return kb * 1024;
  }
  user_error("plan: cannot read {} from /proc/meminfo; give the [memory] sizes explicitly", key);
}

void share_machine_memory(MemoryConfig& mem, const torch::Device& device, int local_ranks) {
  local_ranks = std::max(1, local_ranks);
  const auto share = [&](const char* key) { return Bytes{meminfo_bytes(key) / static_cast<uint64_t>(local_ranks), false}; };
  if (mem.host_bytes.is_auto) mem.host_bytes = share("MemAvailable");
  if (mem.compute_bytes.is_auto && !device.is_cuda()) mem.compute_bytes = share("MemTotal");
}

void configure_threads(int64_t threads, int local_ranks) {
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  // More threads than a few per core only slow a run down; far more exhaust the machine.
  if (threads > 4 * cores)
    user_error("config: [train] threads = {}: at most 4 per core ({} on this machine; 0 = one per core)", threads,
               4 * cores);
  const int64_t n = threads > 0 ? threads : std::max<int64_t>(1, cores / std::max(1, local_ranks));
  torch::set_num_threads(static_cast<int>(n));
}

void configure_compute(const TrainConfig& tc, int local_ranks) {
  configure_threads(tc.threads, local_ranks);
  set_cpu_matmul(tc.cpu_matmul);
  // The allow_tf32 flag sets LibTorch's legacy matmul precision and its per-backend one together
  // (2.9's setFloat32Precision alone leaves the legacy one at "highest", and a reader of the
  // flag, such as TunableOp, then throws that the two APIs were mixed).
  at::globalContext().setAllowTF32CuBLAS(tc.tf32);
}

}  // namespace bcd
