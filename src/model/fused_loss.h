// The head's matmul and the cross-entropy loss fused and chunked over tokens: the B*T*V logits
// (and their fp32 log-softmax and gradient) never exist whole, only one chunk of tokens' at a
// time, in forward and in backward. The loss and the head weight's gradient are accumulated in
// fp32 over the chunks.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace bcd {

// The chunk size: ModelConfig::loss_chunk (base/config.h), which the planner counts too.

// sum_i scale[i] * CE(hidden[i] @ weight^T, targets[i]) as an fp32 scalar, differentiable with
// respect to `hidden` (N, C) and `weight` (V, C) (either may be frozen: its gradient is then not
// computed). targets (N,) int64, scale (N,) fp32: 1/N for a mean, mask / divisor for a loss over
// counted targets. `chunk`: tokens per chunk (>= 1).
// Under autograd the gradients are computed during this forward pass, while each chunk's logits
// exist (backward then only scales them by the output gradient): no logits are recomputed.
// `weight_grad_sum`: where the weight's gradient goes, when given: an fp32 tensor of weight's
// shape (its block's fp32 gradient sum) that this call adds into directly, returning no gradient
// for `weight` to autograd; the caller then backpropagates the returned loss as it is (output
// gradient 1) and only that. Without it the gradient is summed in an fp32 buffer and returned in
// weight's dtype. Either way no gradient is summed across chunks in bf16.
// The sum may hold some rows only, (R, C) for rows [sum_first_row, sum_first_row + R) of weight
// (a vocabulary slice, model/block.h: row_grad): then only those rows' gradient is computed,
// whether or not weight requires grad.
torch::Tensor chunked_linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                           const torch::Tensor& targets, const torch::Tensor& scale, int64_t chunk,
                                           const torch::Tensor& weight_grad_sum = {}, int64_t sum_first_row = 0);

// The same without autograd: each token's cross entropy (N,) fp32, chunk by chunk.
torch::Tensor chunked_cross_entropy_values(const torch::Tensor& hidden, const torch::Tensor& weight,
                                           const torch::Tensor& targets, int64_t chunk);

}  // namespace bcd
