// Reads of device values by the host during training, through one function: on a GPU each read
// waits for the device's queue to drain, so a step makes none but where it must (the loss and
// the gradient norm on logged steps, the validation loss). Counted process-wide, so a test can
// hold the step to that on the CPU, and metrics.jsonl carries the count (host_reads_total).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace bcd {

// The values of `t` (any shape, any device), as doubles, in one read.
std::vector<double> host_read(const torch::Tensor& t);
// The single value of a one-element tensor.
double host_read_scalar(const torch::Tensor& t);
// Reads so far, this process.
uint64_t host_reads();

// How a read of a device tensor waits for the device's queue before it copies: `wait` (the NCCL
// process group polls against dist.timeout_s, so a dead peer ends the rank with a message naming
// it instead of a read that blocks in CUDA for ever), or blocking in the copy when unset
// (nullptr). Process-wide; the group sets it while it lives.
void set_device_wait(std::function<void()> wait);

}  // namespace bcd
