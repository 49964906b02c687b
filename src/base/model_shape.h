// The model's shape, torch-free and written once: the parameter slots of each block of the
// Llama-family decoder (model/llama.h builds its blocks from them, the planner sizes them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/config.h"

namespace bcd {

// One parameter of a block, before layout (model/block.h places it in the flat buffer).
struct SlotShape {
  std::string name;              // e.g. "wq"
  std::vector<int64_t> shape;
  bool decay = false;            // weight decay applies (matrices); norms and biases do not
  std::string part;              // sub-block a BCD unit may train alone: "attn", "mlp"; "" = none
  int64_t numel() const;
};

// Blocks in order: "embed", "layer.0" ... "layer.{L-1}", "head".
int model_block_count(const ModelConfig& cfg);
std::string model_block_name(const ModelConfig& cfg, int block);
// C = d_model, D = head dim, H = heads, KV = kv heads, F = d_ff, V = vocabulary:
// embed: tok_embeddings (V, C). A layer: attn_norm (C), wq (H*D, C), wk and wv (KV*D, C),
// wo (C, H*D), [bq (H*D), bk and bv (KV*D) with qkv_bias], [q_norm and k_norm (D) with qk_norm],
// then mlp_norm (C), w_gate and w_up (F, C), w_down (C, F). head: norm (C), output (V, C)
// unless the embeddings are tied.
std::vector<SlotShape> model_block_slots(const ModelConfig& cfg, int block);

}  // namespace bcd
