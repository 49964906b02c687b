// FLOPs of a training step (runtime/flops.h).
#include "runtime/flops.h"

#include "base/model_shape.h"

namespace bcd {

namespace {

// 2 FLOPs (a multiply and an add) per weight per token, over the block's matrices; the
// embedding's table is a gather, not a matmul.
double matmul_flops_per_token(const Block& b, bool trainable_only) {
  double n = 0;
  for (size_t i = 0; i < b.slots().size(); ++i) {
    const ParamSlot& s = b.slots()[i];
    if (s.shape.size() < 2 || s.name == slot::kTokEmbeddings) continue;
    if (trainable_only && !b.params()[i].requires_grad()) continue;
    n += 2.0 * static_cast<double>(s.numel());
  }
  return n;
}

}  // namespace

StepFlops micro_batch_flops(const LlamaModel& model, int grad_from, int64_t batch, int64_t seq_len) {
  const ModelConfig& c = model.config();
  const double tokens = static_cast<double>(batch) * static_cast<double>(seq_len);
  const double t = static_cast<double>(seq_len);
  // Scores (q k^T) and the weighted sum (p v), causal: on average (T + 1) / 2 positions per query,
  // 2 FLOPs per multiply-add, over every head's D dimensions.
  const double attn_fwd = 2.0 * 2.0 * static_cast<double>(c.n_heads * c.head_dim()) * (t + 1) / 2;
  const double head_fwd = 2.0 * static_cast<double>(c.vocab_size) * static_cast<double>(c.d_model);
  const int last = model.n_blocks() - 1;  // the head
  StepFlops f;
  for (int b = 0; b <= last; ++b) {
    const Block& blk = model.block(b);
    const bool layer = b > 0 && b < last;
    // The head's matmul is the LM head (tied: the embedding's table, used as a matrix).
    double fwd = b == last ? head_fwd : matmul_flops_per_token(blk, false);
    if (layer) fwd += attn_fwd;
    f.forward += fwd;
    if (b < grad_from) continue;  // no autograd below the active unit
    // Input gradients: each matmul once more (dX = dY W^T); attention's backward runs four
    // products for the forward's two. The embedding has no input to take a gradient for.
    if (b > 0) f.backward_input += fwd + (layer ? attn_fwd : 0.0);
    if (layer && c.activation_checkpointing) f.recompute += fwd;
    // Weight gradients (dW = X^T dY) of the trainable matrices only.
    if (b == last) {
      const bool tied = c.tie_embeddings;
      const bool head_trains = tied ? model.block(0).params()[0].requires_grad() : blk.param(slot::kOutput).requires_grad();
      if (head_trains) f.backward_weight += head_fwd;
    } else {
      f.backward_weight += matmul_flops_per_token(blk, true);
    }
  }
  f.forward *= tokens;
  f.backward_input *= tokens;
  f.backward_weight *= tokens;
  f.recompute *= tokens;
  return f;
}

}  // namespace bcd
