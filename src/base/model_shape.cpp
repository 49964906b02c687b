// The slot table of the Llama-family decoder's blocks (base/model_shape.h).
#include "base/model_shape.h"

#include "base/error.h"

namespace bcd {

int64_t SlotShape::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int model_block_count(const ModelConfig& cfg) { return static_cast<int>(cfg.n_layers) + 2; }

std::string model_block_name(const ModelConfig& cfg, int block) {
  if (block == 0) return "embed";
  if (block == model_block_count(cfg) - 1) return "head";
  return "layer." + std::to_string(block - 1);
}

std::vector<SlotShape> model_block_slots(const ModelConfig& cfg, int block) {
  BCD_CHECK(block >= 0 && block < model_block_count(cfg), "block {} of a model of {} blocks", block,
            model_block_count(cfg));
  const int64_t c = cfg.d_model, d = cfg.head_dim(), h = cfg.n_heads, kv = cfg.kv_heads();
  const int64_t f = cfg.ff_dim(), v = cfg.vocab_size;
  if (block == 0) return {{"tok_embeddings", {v, c}, true, ""}};
  if (block == model_block_count(cfg) - 1) {
    std::vector<SlotShape> head = {{"norm", {c}, false, ""}};
    if (!cfg.tie_embeddings) head.push_back({"output", {v, c}, true, ""});
    return head;
  }
  std::vector<SlotShape> s = {
      {"attn_norm", {c}, false, "attn"}, {"wq", {h * d, c}, true, "attn"}, {"wk", {kv * d, c}, true, "attn"},
      {"wv", {kv * d, c}, true, "attn"}, {"wo", {c, h * d}, true, "attn"},
  };
  if (cfg.qkv_bias) {
    s.push_back({"bq", {h * d}, false, "attn"});
    s.push_back({"bk", {kv * d}, false, "attn"});
    s.push_back({"bv", {kv * d}, false, "attn"});
  }
  if (cfg.qk_norm) {
    s.push_back({"q_norm", {d}, false, "attn"});
    s.push_back({"k_norm", {d}, false, "attn"});
  }
  s.push_back({"mlp_norm", {c}, false, "mlp"});
  s.push_back({"w_gate", {f, c}, true, "mlp"});
  s.push_back({"w_up", {f, c}, true, "mlp"});
  s.push_back({"w_down", {c, f}, true, "mlp"});
  return s;
}

}  // namespace bcd
