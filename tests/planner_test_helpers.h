// Shapes, trainings and budgets the planner tests plan with (test_planner.cpp, test_planner_stream.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/config.h"

namespace bcd::plantest {

inline constexpr uint64_t kGiB = 1ull << 30;

inline ModelConfig small_shape(int variant) {
  ModelConfig m;
  m.vocab_size = 97;
  m.d_model = 48;
  m.n_layers = 3;
  m.n_heads = 6;
  m.max_seq_len = 32;
  switch (variant) {
    case 0: m.n_kv_heads = 2; m.d_ff = 100; break;           // GQA, odd d_ff
    case 1: m.qkv_bias = true; m.n_kv_heads = 3; break;      // Qwen2 style, default d_ff
    case 2: m.tie_embeddings = true; m.vocab_size = 50; break;  // tied head
    case 4: m.qk_norm = true; m.d_head = 12; m.n_kv_heads = 2; break;  // Qwen3 style: q/k norms, wider heads
    default: m.n_kv_heads = 1; m.qkv_bias = true; m.tie_embeddings = true; m.d_ff = 7; break;
  }
  return m;
}

inline ModelConfig llama2_7b() {
  ModelConfig m;
  m.vocab_size = 32000;
  m.d_model = 4096;
  m.n_layers = 32;
  m.n_heads = 32;
  m.n_kv_heads = 32;
  m.d_ff = 11008;
  m.max_seq_len = 4096;
  return m;
}

inline TrainConfig bf16_train(int64_t batch, int64_t seq) {
  TrainConfig t;
  t.dtype = Dtype::kBf16;
  t.batch_size = batch;
  t.seq_len = seq;
  return t;
}

inline MemoryConfig budgets(uint64_t compute, uint64_t pinned, uint64_t host, std::vector<std::string> nvme) {
  MemoryConfig m;
  m.compute_bytes = {compute, false};
  m.pinned_bytes = {pinned, false};
  m.host_bytes = {host, false};
  m.nvme_paths = std::move(nvme);
  return m;
}

}  // namespace bcd::plantest
