// Floating-point work of a training step, counted from the model's shapes and what the step
// really runs (DESIGN.md §4): forward through every block; backward only from the active unit's
// lowest block up, with input gradients through each block that has autograd and weight
// gradients for the trainable matrices alone; with activation checkpointing, a second forward
// of each layer that has autograd. Matmuls and attention only: norms, activations, softmax and
// the optimizer are bandwidth, not FLOPs, and are left out (as MFU conventionally does).
#pragma once

#include <cstdint>

#include "model/llama.h"

namespace bcd {

struct StepFlops {
  double forward = 0;          // every block, once
  double backward_input = 0;   // gradients of activations: blocks at and above grad_from
  double backward_weight = 0;  // gradients of the trainable matrices
  double recompute = 0;        // activation checkpointing: the forward of layers with autograd, again
  double total() const { return forward + backward_input + backward_weight + recompute; }
};

// One micro-batch of `batch` sequences of `seq_len` tokens, with the model's trainable set as it
// is now and backward from block `grad_from` (0 = full-parameter). Attention counts causal work:
// position t attends to t + 1 positions (what the fused attention kernels compute).
StepFlops micro_batch_flops(const LlamaModel& model, int grad_from, int64_t batch, int64_t seq_len);

}  // namespace bcd
