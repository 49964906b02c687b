// Llama-family decoder (Llama 2/3/3.1+, Mistral, Qwen2, Qwen3 shapes) whose parameters live in blocks:
// "embed", "layer.0" ... "layer.{L-1}", "head" (final norm + LM head; with tied embeddings
// the LM head is embed's matrix). Conventions follow HF transformers' LlamaModel: RMSNorm in
// fp32, rotary embeddings in the half-split (rotate_half) layout (model/rope.h), SwiGLU MLP;
// Qwen3 normalises each head of q and k. The slots of each block: base/model_shape.h.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "data/batch.h"
#include "model/block.h"
#include "base/config.h"

namespace bcd {

// Where decoder layers' working weights are while a layer computes (DESIGN.md §2: frozen layers'
// weights streamed from host memory). The model announces each pass's order of layer blocks
// (expect), then brackets every use of a layer's weights with acquire/release; in between, that
// block's data() holds its weights on the compute device. Uses nest (a checkpointed layer's
// backward holds its block across the recomputation and the gradient). The runtime implements
// it (runtime/streamed_weights.h); without one, every block is resident.
class LayerWeights {
 public:
  virtual ~LayerWeights() = default;
  // Blocks the coming pass will use, in order: its forward, then (when a backward follows) the
  // layers the checkpointed backward recomputes, top down.
  virtual void expect(const std::vector<int>& blocks) = 0;
  virtual void acquire(int block) = 0;
  virtual void release(int block) = 0;
  // Access outside a pass (initialisation, weights files, checkpoints) to a block whose data()
  // does not always hold its weights (a home on the NVMe tier): between open_block and
  // close_block it does; closing with `commit` sends what was written home (UserError on an I/O
  // error). Through BlockAccess; no-ops for every other block.
  virtual void open_block(int block) { (void)block; }
  virtual void close_block(int block, bool commit) { (void)block, (void)commit; }
};

class LlamaModel {
 public:
  // B = batch, T = sequence length, C = d_model, H = heads, KV = kv heads, D = head dim,
  // V = vocabulary, L = layers.
  // Weights drawn by init_weights(*seed), or all zero with no seed: a 7B model's draw is 6.7B
  // normals, wasted when a checkpoint or a weights file overwrites it.
  // `storage(i)`: block i's flat working buffer (Block's `storage`), or undefined to allocate it
  // on opts' device; a streamed block's lives in host memory.
  using BlockStorage = std::function<torch::Tensor(int block)>;
  LlamaModel(const ModelConfig& cfg, torch::TensorOptions opts = torch::kFloat32,
             std::optional<uint64_t> seed = 0, const BlockStorage& storage = {});

  // Normal(0, init_std) for matrices, output projections (wo, w_down) scaled by 1/sqrt(2L),
  // norms 1, biases 0; a pure function of the seed (not of the device, dtype or thread count),
  // drawn in parallel.
  void init_weights(uint64_t seed);

  const ModelConfig& config() const { return cfg_; }
  int n_blocks() const { return static_cast<int>(blocks_.size()); }
  Block& block(int i) { return blocks_.at(i); }
  const Block& block(int i) const { return blocks_.at(i); }
  std::vector<Block>& blocks() { return blocks_; }
  int block_index(const std::string& name) const;  // -1 when absent
  int64_t num_params() const;                      // real parameters (no padding)

  // tokens (B, T) int64 -> logits (B, T, V).
  // Blocks before `grad_from` run under NoGradGuard: none of their activations are kept and
  // backward stops at block `grad_from` (the BCD truncated backward, DESIGN.md §4).
  torch::Tensor forward(const torch::Tensor& tokens, int grad_from = 0, const torch::Tensor& below = {}) const;

  // Tokens per chunk of the fused head + loss ([model] loss_chunk_tokens, or its automatic
  // value for this many tokens and the working dtype).
  int64_t loss_chunk(int64_t tokens) const;

  // batch (B, T+1) -> mean next-token cross entropy over the B*T positions (fp32 scalar), the
  // head's matmul and the loss fused and chunked over tokens (model/fused_loss.h).
  // `below`: frozen_prefix(batch, grad_from) computed earlier (bitwise what forward would
  // compute, as long as blocks [0, grad_from) have not changed since), or undefined.
  torch::Tensor loss(const torch::Tensor& batch, int grad_from = 0, const torch::Tensor& below = {}) const;
  // A loader's batch: with a mask, the sum of the counted targets' cross entropy over
  // batch.divisor (so ranks' means combine into the global batch's mean per counted target);
  // without one, loss(batch.tokens, ...).
  torch::Tensor loss(const Batch& batch, int grad_from = 0, const torch::Tensor& below = {}) const;
  // How the trainer takes a micro-batch's loss: multiplied by `scale` (1/grad_accum) and, with
  // grad_into_blocks, the head weight's gradient added straight into its block's fp32 gradient
  // sum during the forward pass, and a reduced-precision layer's matrices' in backward, each by
  // one product summed in fp32 (no bf16 gradient buffer is filled for them: layer_forward); the
  // returned loss must then be backpropagated as it is, once. A vocabulary slice of the head's matrix (or of a
  // tied embedding) always takes its rows' gradient that way, whatever grad_into_blocks says,
  // and the embedding's slice in backward (Block::row_grad).
  struct LossOptions {
    double scale = 1.0;
    bool grad_into_blocks = false;
  };
  torch::Tensor loss(const Batch& batch, int grad_from, const torch::Tensor& below, const LossOptions& opt) const;

  // The part of forward below the active unit: batch (B, T+1)'s inputs through blocks
  // [0, upto) with no autograd -> hidden state (B, T, C); upto >= 1. It does not depend on the
  // active unit's weights, so data-parallel BCD runs the next step's prefix while this step's
  // gradient is on the wire (DESIGN.md §6).
  torch::Tensor frozen_prefix(const torch::Tensor& batch, int upto) const;
  // The same for several batches (a step's micro-batches), layer by layer: each layer runs every
  // batch while its weights are on the compute tier, so a streamed layer is copied once for all
  // of them. below[i] gets batches[i]'s prefix where it is undefined (a defined one is kept);
  // bitwise what frozen_prefix gives each batch.
  void frozen_prefixes(const std::vector<torch::Tensor>& batches, std::vector<torch::Tensor>& below, int upto) const;

  // One decoder layer: (B, T, C) -> (B, T, C). Public for tests and checkpointed recompute.
  // With grad_into_blocks, under autograd, a reduced-precision trainable layer's matrices send
  // their gradients straight into the block's fp32 sum in backward (model/matmul.h:
  // linear_into_grad_sum), not through autograd's working-dtype buffer.
  torch::Tensor layer_forward(int layer, const torch::Tensor& x, bool grad_into_blocks = false) const;

  // Layers' weights fetched through `w` (not owned; nullptr: all resident).
  void set_layer_weights(LayerWeights* w) { weights_ = w; }
  LayerWeights* layer_weights() const { return weights_; }

  void set_trainable(bool trainable);  // every block
  // The trainer's pass for every gradient: reduced-precision blocks leave the slots it sums
  // directly (base/model_shape.h: grad_summed_directly) out of autograd's buffer (Block::
  // set_direct_sums); every pass that computes gradients must then set grad_into_blocks. Call
  // while every block is frozen.
  void set_direct_sums(bool on);
  void zero_grad();
  // After a backward: every trainable block's autograd buffer into its fp32 sum (Block::accumulate_grad).
  void accumulate_grads();

  // Rotary tables (positions, D) in the working dtype: cos and sin of position * inv_freq, the
  // D/2 frequencies repeated twice (HF layout), for the first `tokens` positions (<= max_seq_len).
  // They hold rope_table_positions (base/model_shape.h) of the longest sequence seen so far,
  // grown when a longer one comes (the declared context, up to 2^25 positions, may be far more
  // than a run uses); reserve_positions grows them ahead, before memory is counted. Thread-safe.
  std::pair<torch::Tensor, torch::Tensor> rope(int64_t tokens) const;
  void reserve_positions(int64_t tokens) const;
  int64_t rope_positions() const;  // held now
  uint64_t rope_bytes() const;     // of both tables now

 private:
  torch::Tensor embed_weight() const;
  // tokens (B, T) on the compute device -> (B, T, C); while the embedding trains a vocabulary
  // slice, through the lookup that adds the slice's rows' gradient into its block (block.h:
  // row_grad), and so with grad_into_blocks for a whole reduced-precision table (into its fp32 sum).
  torch::Tensor embed(const torch::Tensor& tokens, bool grad_into_blocks = false) const;
  torch::Tensor head_weight() const;
  // tokens (B, T) through blocks [0, upto) with no autograd: forward below grad_from.
  torch::Tensor cross_entropy(const torch::Tensor& batch, int grad_from, const torch::Tensor& below,
                              const torch::Tensor& scale, bool grad_into_blocks) const;
  // forward up to the head: the final norm's output (B, T, C).
  torch::Tensor final_hidden(const torch::Tensor& tokens, int grad_from, const torch::Tensor& below,
                             bool grad_into_blocks = false) const;
  torch::Tensor frozen_blocks(const torch::Tensor& tokens, int upto) const;
  // Tells weights_ the blocks of a pass: layers [first, L) forward; with `backward`, then the
  // layers from grad_from's down the checkpointed backward recomputes.
  void expect_pass(int first_layer, int end_layer, bool backward, int grad_from) const;

  void grow_rope(int64_t tokens) const;  // under *rope_mu_

  ModelConfig cfg_;
  torch::TensorOptions opts_;
  std::vector<Block> blocks_;
  mutable std::shared_ptr<std::mutex> rope_mu_ = std::make_shared<std::mutex>();
  mutable torch::Tensor cos_, sin_;
  LayerWeights* weights_ = nullptr;
};

// A scope in which model.block(block).data() holds the block's weights, to read them or (then
// commit()) to write them; see LayerWeights::open_block.
class BlockAccess {
 public:
  BlockAccess(const LlamaModel& model, int block);
  ~BlockAccess();  // closes without sending writes home unless commit() ran
  BlockAccess(const BlockAccess&) = delete;
  BlockAccess& operator=(const BlockAccess&) = delete;
  void commit();

 private:
  LayerWeights* w_;
  int block_;
  bool open_ = true;
};

// Whether causal_attention keeps a T x T score matrix for backward (the planner counts it): with
// LibTorch 1.x attention is matmul + softmax; with 2.x it is scaled_dot_product_attention, whose
// fused CUDA kernels (flash, memory-efficient) keep only the output and a log-sum-exp per row.
// On the CPU 2.x may still take the materialising path: counted as keeping them.
bool attention_keeps_scores(bool on_cuda);

// HF-style helpers, exposed for tests.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// x (B, H, T, D); cos/sin (T, D)
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// q (B, H, T, D), k/v (B, KV, T, D) -> (B, H, T, D), causal
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
// The rows of an embedding slice (rows first .. first + rows) that the backward of looking up
// `tokens` adds each token's gradient into: its own for a token in the slice; for the others,
// whose gradient is masked to zero, rows spread over the slice by position (adding +0 changes no
// sum), so no row receives the whole batch's out-of-slice tokens: on CUDA index_put_ sorts the
// rows and sums each row's run serially, and one row taking most of a batch was a run as long
// as the batch.
torch::Tensor slice_embedding_rows(const torch::Tensor& tokens, int64_t first, int64_t rows);

}  // namespace bcd
