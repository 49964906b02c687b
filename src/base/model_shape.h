// The model's shape, torch-free and written once (DESIGN.md §1): the parameter slots of each
// block of the Llama-family decoder, how a block lays them out in its flat buffer, and how BCD
// partitions the blocks into units (layers, attention/MLP halves, vocabulary slices). The model
// builds its blocks from it (model/block.h), the planner sizes them (memory/planner.h) and the
// scheduler trains its units (optim/bcd_scheduler.h): they cannot disagree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/config.h"

namespace bcd {

// ---- Slots ----

// The sub-block a BCD unit may train alone ([bcd] blocks = "attn_mlp"): a decoder layer's
// attention or MLP half. A slot of a block without halves has kNone; a unit's piece with kNone
// trains every part of its block.
enum class Part { kNone, kAttn, kMlp };
const char* name_of(Part p);  // "", "attn", "mlp"

// The slots' names, written once: the shape table (model_block_slots), the model's forward
// (model/llama.cpp), the FLOP count and the Hugging Face name map (model/hf_weights.cpp).
namespace slot {
inline constexpr const char* kTokEmbeddings = "tok_embeddings";
inline constexpr const char* kNorm = "norm";
inline constexpr const char* kOutput = "output";
inline constexpr const char* kAttnNorm = "attn_norm";
inline constexpr const char* kWq = "wq";
inline constexpr const char* kWk = "wk";
inline constexpr const char* kWv = "wv";
inline constexpr const char* kWo = "wo";
inline constexpr const char* kBq = "bq";
inline constexpr const char* kBk = "bk";
inline constexpr const char* kBv = "bv";
inline constexpr const char* kQNorm = "q_norm";
inline constexpr const char* kKNorm = "k_norm";
inline constexpr const char* kMlpNorm = "mlp_norm";
inline constexpr const char* kWGate = "w_gate";
inline constexpr const char* kWUp = "w_up";
inline constexpr const char* kWDown = "w_down";
}  // namespace slot

// One parameter of a block, before layout.
struct SlotShape {
  std::string name;              // e.g. "wq"
  std::vector<int64_t> shape;
  bool decay = false;            // weight decay applies (matrices); norms and biases do not
  Part part = Part::kNone;
  int64_t numel() const;
};

// A slot whose gradient the trainer's pass adds straight into its block's fp32 sum when the
// working weights are reduced-precision (model/llama.h: grad_into_blocks): every matrix, a layer's
// and the head's by one product in backward, the token embedding table by the lookup's backward
// (model/block.h: set_direct_sums). Autograd's working-dtype buffer leaves it out.
bool grad_summed_directly(const SlotShape& s);

// Blocks in order: "embed", "layer.0" ... "layer.{L-1}", "head".
int model_block_count(const ModelConfig& cfg);
std::string model_block_name(const ModelConfig& cfg, int block);
// C = d_model, D = head dim, H = heads, KV = kv heads, F = d_ff, V = vocabulary:
// embed: tok_embeddings (V, C). A layer: attn_norm (C), wq (H*D, C), wk and wv (KV*D, C),
// wo (C, H*D), [bq (H*D), bk and bv (KV*D) with qkv_bias], [q_norm and k_norm (D) with qk_norm],
// then mlp_norm (C), w_gate and w_up (F, C), w_down (C, F). head: norm (C), output (V, C)
// unless the embeddings are tied.
std::vector<SlotShape> model_block_slots(const ModelConfig& cfg, int block);

// ---- Layout of a block's flat buffer ----

// Slots are grouped by part (in order of first appearance), decayed before not decayed within a
// part; each such run is a segment padded to kBlockAlign elements, so an optimizer treats a
// block (or one part of it) as a few flat ranges.
constexpr int64_t kBlockAlign = 16;  // 64 bytes of fp32: one cache line / AVX-512 vector

struct SegmentShape {
  Part part = Part::kNone;
  bool decay = false;
  int64_t begin = 0, end = 0;  // elements of the flat buffer, begin aligned to kBlockAlign
  int64_t numel() const { return end - begin; }
};

struct BlockShape {
  std::string name;
  int64_t params = 0;      // real parameters
  int64_t numel = 0;       // flat buffer elements, padding included
  std::vector<SegmentShape> segments;
  std::vector<int64_t> order;    // slot indices (of the slots given) in layout order
  std::vector<int64_t> offsets;  // each given slot's first element in the flat buffer
};
BlockShape layout_block(std::string name, const std::vector<SlotShape>& slots);

// The blocks of the model `cfg` describes, laid out. cfg.vocab_size must be > 0; a shape no
// machine could hold (2^50 parameters, 2^16 layers) is a UserError.
std::vector<BlockShape> block_shapes(const ModelConfig& cfg);
int64_t count_params(const ModelConfig& cfg);  // sum of BlockShape::params (no padding)

// ---- Rotary tables ----

// The longest context a model may declare (max_seq_len, HF max_position_embeddings): 2^25
// positions, three times the longest released (10M). Above it the value is a mistake.
constexpr int64_t kMaxPositions = int64_t{1} << 25;
// Positions the rotary tables hold for sequences of up to `tokens`: the multiple of 4096 at or
// above it, at most max_seq_len. The tables grow to what a run uses (the model, model/llama.h),
// not to the context the model declares, and the planner counts the same.
int64_t rope_table_positions(const ModelConfig& cfg, int64_t tokens);

// ---- BCD units ----

// What a BCD unit trains of one block: the segments of `part` (kNone: every segment) within the
// elements [begin, end) of the block's flat buffer, which its gradient buffer spans. A whole block
// spans the block, a part of a layer its part's segments (contiguous); a vocabulary slice
// ([bcd] vocab_slices) is a run of rows of the embedding's or the LM head's matrix (the last head
// slice runs on to the block's end: the final norm).
struct UnitPieceShape {
  int block = 0;
  Part part = Part::kNone;
  int64_t begin = 0, end = 0;
};

// A BCD unit: embed (or embed.K, a vocabulary slice), layer.I, layers.I-J, layer.I.attn /
// layer.I.mlp, head (or head.K), or model (BCD off: every block).
struct UnitShape {
  std::string name;
  std::vector<UnitPieceShape> pieces;
  int first_layer = 0;     // lowest decoder layer run with autograd when this unit is active
  int64_t state_elems = 0; // elements of the unit's segments within its pieces (master, m and v each)
  int64_t grad_elems = 0;  // elements of its gradient buffers: a piece's [begin, end)
  // Of those, the elements of the slots it trains that autograd fills in the trainer's pass with
  // reduced-precision weights (grad_summed_directly): its working-dtype buffer beside the fp32 sum.
  int64_t autograd_elems = 0;
  int lowest_block() const;  // where backward stops (grad_from)
};
// Elements of the slots piece `p` of `block` (block p.block of `model`) trains that autograd fills
// with direct sums (UnitShape::autograd_elems).
int64_t autograd_elems(const ModelConfig& model, const BlockShape& block, const UnitPieceShape& p);
// The partition of the model for `bcd` (enabled = false or blocks = "whole": one unit, model).
// UserError when [bcd] asks for more vocabulary slices than the vocabulary has rows, or leaves
// nothing to train.
std::vector<UnitShape> unit_shapes(const ModelConfig& model, const BcdConfig& bcd);

}  // namespace bcd
