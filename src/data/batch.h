// What a step trains on: one rank's rows of a global batch. The loader makes it and the model
// reads it; the model includes this header, never the loader's.
#pragma once

#include <torch/torch.h>

namespace bcd {

// One rank's rows of a step's global batch.
// B = batch, T = seq_len.
struct Batch {
  torch::Tensor tokens;  // (B, T+1) int64: inputs tokens[:, :T], targets tokens[:, 1:]
  // (B, T) float32, 1 where the target counts in the loss (instruction data: response tokens),
  // 0 where it does not; undefined when every target counts (plain text).
  torch::Tensor mask;
  // What the loss divides its sum over counted targets by: the counted targets of the whole
  // global batch (all ranks' rows) over the number of ranks, so the ranks' mean of their losses
  // is the global batch's mean per counted target. B * T without a mask; 0 when no target of
  // the global batch counts (the loss is then 0).
  double divisor = 0;
};

}  // namespace bcd
