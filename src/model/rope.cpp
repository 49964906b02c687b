// Rotary frequencies and tables (model/rope.h): transformers' modeling_rope_utils.py and
// LlamaRotaryEmbedding.forward, op for op in fp32.
#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace bcd {

int64_t rope_original_max_len(const ModelConfig& cfg) {
  return cfg.rope_original_max_len > 0 ? cfg.rope_original_max_len : cfg.max_seq_len;
}

torch::Tensor rope_inv_freq(const ModelConfig& cfg) {
  torch::NoGradGuard ng;
  const int64_t dim = cfg.head_dim();
  const double base = cfg.rope_theta, factor = cfg.rope_factor;
  // base ** (arange(0, dim, 2) / dim), in fp32
  const torch::Tensor exponents = torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat32) / dim;
  const torch::Tensor pos_freqs = torch::pow(base, exponents);
  torch::Tensor inv = 1.0 / pos_freqs;
  const double original = static_cast<double>(rope_original_max_len(cfg));
  switch (cfg.rope_type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      inv = inv / factor;
      break;
    case RopeType::kLlama3: {
      const double low = cfg.rope_low_freq_factor, high = cfg.rope_high_freq_factor;
      const double low_wavelen = original / low, high_wavelen = original / high;
      const torch::Tensor wavelen = (2 * M_PI) / inv;
      torch::Tensor llama = torch::where(wavelen > low_wavelen, inv / factor, inv);
      const torch::Tensor smooth = (original / wavelen - low) / (high - low);
      const torch::Tensor smoothed = (1 - smooth) * llama / factor + smooth * llama;
      const torch::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
      inv = torch::where(medium, smoothed, llama);
      break;
    }
    case RopeType::kYarn: {
      // The dimension at which a wavelength makes `rotations` turns over the original context.
      auto correction_dim = [&](double rotations) {
        return static_cast<double>(dim) * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(base));
      };
      double lo = correction_dim(cfg.rope_beta_fast), hi = correction_dim(cfg.rope_beta_slow);
      if (cfg.rope_truncate) lo = std::floor(lo), hi = std::ceil(hi);
      lo = std::max(lo, 0.0), hi = std::min(hi, static_cast<double>(dim - 1));
      if (lo == hi) hi += 0.001;  // as transformers: no division by zero
      const torch::Tensor extrapolation_inv = 1.0 / pos_freqs, interpolation_inv = 1.0 / (factor * pos_freqs);
      const torch::Tensor ramp = ((torch::arange(dim / 2, torch::kFloat32) - lo) / (hi - lo)).clamp(0, 1);
      const torch::Tensor extrapolation = 1 - ramp;  // share of the unscaled frequency
      inv = interpolation_inv * (1 - extrapolation) + extrapolation_inv * extrapolation;
      break;
    }
  }
  return inv;
}

double rope_attention_scale(const ModelConfig& cfg) {
  if (cfg.rope_type != RopeType::kYarn) return 1.0;
  if (cfg.rope_attention_factor > 0) return cfg.rope_attention_factor;
  return cfg.rope_factor <= 1 ? 1.0 : 0.1 * std::log(cfg.rope_factor) + 1.0;
}

std::pair<torch::Tensor, torch::Tensor> rope_tables(const ModelConfig& cfg, const torch::Tensor& inv_freq,
                                                    int64_t first, int64_t n) {
  torch::NoGradGuard ng;
  const torch::Tensor positions = torch::arange(first, first + n, torch::kInt64).to(torch::kFloat32);
  const torch::Tensor freqs = torch::outer(positions, inv_freq);  // one product each, as a K = 1 matmul
  const torch::Tensor emb = torch::cat({freqs, freqs}, -1);
  const double scale = rope_attention_scale(cfg);
  return {emb.cos() * scale, emb.sin() * scale};
}

}  // namespace bcd
