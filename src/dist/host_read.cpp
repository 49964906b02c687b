// Counted host reads of device values (dist/host_read.h).
#include "dist/host_read.h"

#include <atomic>

namespace bcd {

namespace {
std::atomic<uint64_t> g_reads{0};
std::function<void()> g_device_wait;  // set and read by the training thread
}  // namespace

void set_device_wait(std::function<void()> wait) { g_device_wait = std::move(wait); }

std::vector<double> host_read(const torch::Tensor& t) {
  g_reads.fetch_add(1, std::memory_order_relaxed);
  if (!t.device().is_cpu() && g_device_wait) g_device_wait();
  const torch::Tensor h = t.detach().to(torch::kCPU, torch::kFloat64).contiguous().reshape({-1});
  const double* p = h.data_ptr<double>();
  return std::vector<double>(p, p + h.numel());
}

double host_read_scalar(const torch::Tensor& t) { return host_read(t).at(0); }

uint64_t host_reads() { return g_reads.load(std::memory_order_relaxed); }

}  // namespace bcd
