// The model tests' small model, its batches and its perturbation (test_model.cpp, test_matmul.cpp).
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "base/config.h"
#include "model/llama.h"

namespace bcd::test {

inline ModelConfig tiny_config() {
  ModelConfig m;
  m.vocab_size = 37;
  m.d_model = 16;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.d_ff = 24;
  m.max_seq_len = 32;
  m.init_std = 0.2;  // large enough that every path matters in the checks below
  return m;
}

inline torch::Tensor random_tokens(int64_t b, int64_t t, int64_t v, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(v, {b, t}, torch::kInt64);
}

// Makes norms and biases non-trivial too, so the gradient checks exercise them.
inline void perturb_all(LlamaModel& m, uint64_t seed) {
  torch::NoGradGuard ng;
  torch::manual_seed(seed);
  for (Block& b : m.blocks()) b.data().add_(torch::randn_like(b.data()) * 0.1);
}

}  // namespace bcd::test
