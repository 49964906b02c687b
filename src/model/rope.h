// Rotary position embeddings' frequencies and tables, as transformers computes them (its
// modeling_rope_utils: the default, linear, llama3 and yarn rope_type; LlamaRotaryEmbedding).
#pragma once

#include <torch/torch.h>

#include "base/config.h"

namespace bcd {

// The D/2 inverse frequencies of the model's rotary embedding (D = head dim): (D/2,) fp32 on the
// CPU. A position p rotates pair i by p * inv_freq[i].
//   default  theta^(-2i/D)
//   linear   the default / factor (positions interpolated)
//   llama3   wavelengths 2 pi / f above original / low_freq_factor divided by factor, below
//            original / high_freq_factor kept, smoothed in between (Llama 3.1)
//   yarn     interpolation (/ factor) and extrapolation blended by a linear ramp over the
//            dimensions between the beta_fast and beta_slow rotations of the original context
//            (Peng et al. 2023, "YaRN")
// In fp32 op for op as transformers (and Meta's reference code) compute them: the angles a
// model was trained and is served with, whatever the device.
torch::Tensor rope_inv_freq(const ModelConfig& cfg);

// The scale transformers puts on cos and sin: yarn's attention factor (rope_attention_factor,
// or 0.1 ln(factor) + 1 when that is 0), 1 for every other type.
double rope_attention_scale(const ModelConfig& cfg);

// rope_original_max_len, or max_seq_len when it is 0.
int64_t rope_original_max_len(const ModelConfig& cfg);

// cos and sin of positions [first, first + n) times inv_freq, (n, D) fp32 on the CPU, scaled by
// rope_attention_scale, the D/2 angles repeated twice (HF's rotate_half layout).
std::pair<torch::Tensor, torch::Tensor> rope_tables(const ModelConfig& cfg, const torch::Tensor& inv_freq,
                                                    int64_t first, int64_t n);

}  // namespace bcd
