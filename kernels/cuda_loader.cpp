// Loading the CUDA side (kernels/cuda_side.h), and the program's CUDA-facing kernel functions
// (kernels/adamw_cuda.h, copy_streams.h, host_memory.h) as calls through its table.
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/adamw_cuda.h"
#include "kernels/copy_streams.h"
#include "kernels/cuda_side.h"
#include "kernels/host_memory.h"

namespace bcd {

namespace {

std::atomic<const CudaSide*> g_side{nullptr};

#ifdef BCD_HAVE_CUDA_KERNELS
// Where the side may be: BCD_CUDA_SIDE (a file), else beside the executable (an installed or
// copied binary), else where this build put it.
std::vector<std::string> side_candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("BCD_CUDA_SIDE"); env && *env) return {env};
  char exe[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/') + 1);
    out.push_back(dir + "libbcdtrain_cuda.so");
  }
#ifdef BCD_CUDA_SIDE_FILE
  out.push_back(BCD_CUDA_SIDE_FILE);
#endif
  return out;
}
#endif

const CudaSide* load_side() {
#ifndef BCD_HAVE_CUDA_KERNELS
  user_error("this build has no CUDA side (configure with -DBCD_CUDA=ON, a CUDA toolkit and a CUDA LibTorch)");
#else
  std::string tried;
  for (const std::string& path : side_candidates()) {
    if (::access(path.c_str(), R_OK) != 0) {
      tried += (tried.empty() ? "" : "; ") + path + ": not found";
      continue;
    }
    // Global: LibTorch's CUDA library, loaded with the side, is then seen as if linked.
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!h) user_error("{}: cannot load the CUDA side: {}", path, ::dlerror());
    using Entry = const CudaSide* (*)();
    auto entry = reinterpret_cast<Entry>(::dlsym(h, "bcd_cuda_side_table"));
    if (!entry) user_error("{}: not bcdtrain's CUDA side (no bcd_cuda_side_table)", path);
    const CudaSide* t = entry();
    if (!t || t->abi != kCudaSideAbi || t->size != sizeof(CudaSide))
      user_error("{}: a CUDA side of another build (interface {}, this program's {}): rebuild both", path,
                 t ? t->abi : 0, kCudaSideAbi);
    return t;
  }
  user_error("cannot find the CUDA side, libbcdtrain_cuda.so ({}); set BCD_CUDA_SIDE to its path", tried);
#endif
}

}  // namespace

const CudaSide& cuda_side() {
  if (const CudaSide* t = g_side.load(std::memory_order_acquire)) return *t;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (const CudaSide* t = g_side.load(std::memory_order_acquire)) return *t;
  const CudaSide* t = load_side();
  g_side.store(t, std::memory_order_release);
  return *t;
}

bool cuda_side_loaded() { return g_side.load(std::memory_order_acquire) != nullptr; }

bool cuda_side_built() {
#ifdef BCD_HAVE_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

bool nvidia_driver_present() {
  for (const char* p : {"/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/dxg"})
    if (::access(p, F_OK) == 0) return true;
  return false;
}

// ---- kernels/adamw_cuda.h ----

void adamw_step_cuda(float* master, const void* grad, bool grad_is_bf16, float* m, float* v, int64_t n,
                     const AdamWHyper& h, uint16_t* bf16_out, CUstream_st* stream) {
  cuda_side().adamw_step(master, grad, grad_is_bf16, m, v, n, h, bf16_out, stream);
}

std::string adamw_cuda_unsupported_reason(int device) { return cuda_side().adamw_unsupported_reason(device); }

// ---- kernels/host_memory.h ----

bool cuda_device_usable() { return cuda_side().device_usable(); }
std::string cuda_host_register(void* p, size_t bytes) { return cuda_side().host_register(p, bytes); }
void cuda_host_unregister(void* p) { cuda_side().host_unregister(p); }
bool cuda_device_memory(int device, size_t* free_bytes, size_t* total_bytes) {
  return cuda_side().device_memory(device, free_bytes, total_bytes);
}

// ---- kernels/copy_streams.h ----

struct CudaCopyStreams::Impl {
  void* streams = nullptr;  // the side's CudaCopyStreams
};

CudaCopyStreams::CudaCopyStreams(void* compute_stream) : impl_(std::make_unique<Impl>()) {
  impl_->streams = cuda_side().streams_new(compute_stream);
}

CudaCopyStreams::~CudaCopyStreams() {
  if (impl_->streams) cuda_side().streams_delete(impl_->streams);
}

uint64_t CudaCopyStreams::copy_out(void* host, const void* device, size_t bytes) {
  return cuda_side().streams_copy_out(impl_->streams, host, device, bytes);
}
uint64_t CudaCopyStreams::copy_in(void* device, const void* host, size_t bytes) {
  return cuda_side().streams_copy_in(impl_->streams, device, host, bytes);
}
uint64_t CudaCopyStreams::zero(void* device, size_t bytes) {
  return cuda_side().streams_zero(impl_->streams, device, bytes);
}
bool CudaCopyStreams::done(uint64_t token) { return cuda_side().streams_done(impl_->streams, token); }
void CudaCopyStreams::wait(uint64_t token) { cuda_side().streams_wait(impl_->streams, token); }
void CudaCopyStreams::fence() { cuda_side().streams_fence(impl_->streams); }
void CudaCopyStreams::fence(uint64_t token) { cuda_side().streams_fence_token(impl_->streams, token); }
double CudaCopyStreams::copy_seconds() { return cuda_side().streams_copy_seconds(impl_->streams); }
double CudaCopyStreams::wait_seconds() { return cuda_side().streams_wait_seconds(impl_->streams); }
size_t CudaCopyStreams::live_copies() const { return cuda_side().streams_live_copies(impl_->streams); }
uint64_t CudaCopyStreams::events_created() const { return cuda_side().streams_events_created(impl_->streams); }

}  // namespace bcd
