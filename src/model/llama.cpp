// Llama-family forward pass over block-owned parameters, with optional per-layer checkpointing.
#include "model/llama.h"

#include <torch/version.h>


#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "base/model_shape.h"
#include "kernels/random_normal.h"
#include "model/fused_loss.h"
#include "model/matmul.h"
#include "model/rope.h"

namespace bcd {

namespace {
// A batch built on the CPU, onto the compute device. To a GPU through page-locked memory and
// without blocking: a copy from pageable memory makes the host wait for the GPU's queue to drain.
torch::Tensor to_compute(const torch::Tensor& t, const torch::Device& device) {
  if (!device.is_cuda() || !t.device().is_cpu()) return t.to(device);
  return t.pin_memory().to(device, /*non_blocking=*/true);
}
}  // namespace

namespace F = torch::nn::functional;
using torch::indexing::Slice;

// ---- Building blocks of the computation ----

bool attention_keeps_scores(bool on_cuda) {
#if TORCH_VERSION_MAJOR >= 2
  return !on_cuda;
#else
  (void)on_cuda;
  return true;
#endif
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  // HF LlamaRMSNorm: normalize in fp32, cast back, then scale.
  torch::Tensor xf = x.to(x.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32);
  torch::Tensor y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * y.to(x.scalar_type());
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  // rotate_half: (x1, x2) -> (-x2, x1) over the two halves of the head dimension
  const int64_t half = x.size(-1) / 2;
  torch::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  torch::Tensor rot = torch::cat({-x2, x1}, -1);
  return x * cos + rot * sin;
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t h = q.size(1), kv = k.size(1);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  // GQA inside the kernel (query head j reads kv head j / (H/KV), as HF repeat_kv): K and V are
  // not copied once per query head (4x for Llama-3-8B, and again when a checkpointed layer
  // recomputes), and the fused CUDA kernels read the KV heads as they are.
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt,
                                          /*enable_gqa=*/kv != h);
#else
  torch::Tensor kk = k, vv = v;
  if (kv != h) {
    // GQA: query head j reads kv head j / (H/KV), as HF repeat_kv
    kk = k.repeat_interleave(h / kv, 1);
    vv = v.repeat_interleave(h / kv, 1);
  }
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, kk, vv, {}, 0.0, /*is_causal=*/true);
#else
  const int64_t t = q.size(2), s = kk.size(2);
  torch::Tensor scores = torch::matmul(q, kk.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor mask = torch::ones({t, s}, torch::TensorOptions().dtype(torch::kBool).device(q.device()))
                           .triu(s - t + 1);
  scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
  torch::Tensor probs = torch::softmax(scores.to(q.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32), -1)
                            .to(q.scalar_type());
  return torch::matmul(probs, vv);
#endif
#endif
}

namespace {

// One use of a layer's weights (LayerWeights::acquire .. release); nothing without a source.
class LayerUse {
 public:
  LayerUse(LayerWeights* w, int block) : w_(w), block_(block) {
    if (w_) w_->acquire(block_);
  }
  ~LayerUse() {
    if (w_) w_->release(block_);
  }
  LayerUse(const LayerUse&) = delete;
  LayerUse& operator=(const LayerUse&) = delete;

 private:
  LayerWeights* w_;
  int block_;
};

torch::Tensor dense(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b = {}) {
  return gemm_linear(x, w, b);
}

// x times the matrix in block b's `slot` (+ bias): with grad_into_blocks, a trainable matrix of a
// block that sums its gradient in fp32 gets it there by one product in backward (linear_into_grad_sum).
torch::Tensor dense(const Block& b, const char* slot, const torch::Tensor& x, bool grad_into_blocks,
                    const torch::Tensor& bias = {}) {
  const torch::Tensor& w = b.param(slot);
  if (grad_into_blocks && w.requires_grad() && b.sums_grad_in_fp32() && torch::GradMode::is_enabled()) {
    const torch::Tensor sum = b.grad_of(slot);
    if (sum.defined()) return linear_into_grad_sum(x, w, bias, sum);
  }
  return dense(x, w, bias);
}

// Activation checkpointing: the forward keeps only the layer input; backward recomputes the layer
// with autograd on and differentiates it (the reentrant scheme of torch.utils.checkpoint).
struct CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                torch::Tensor x, at::TensorList params,
                                                int64_t layer, int64_t model_ptr, bool grad_into_blocks) {
    ctx->save_for_backward({x});
    ctx->saved_data["into_blocks"] = grad_into_blocks;
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["model"] = model_ptr;
    ctx->saved_data["n_params"] = static_cast<int64_t>(params.size());
    ctx->saved_data["x_requires_grad"] = x.requires_grad();
    const auto* model = reinterpret_cast<const LlamaModel*>(model_ptr);
    return {model->layer_forward(static_cast<int>(layer), x)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto* model = reinterpret_cast<const LlamaModel*>(ctx->saved_data["model"].toInt());
    const int layer = static_cast<int>(ctx->saved_data["layer"].toInt());
    const int64_t n_params = ctx->saved_data["n_params"].toInt();
    const bool x_grad = ctx->saved_data["x_requires_grad"].toBool();
    const bool into_blocks = ctx->saved_data["into_blocks"].toBool();
    torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(x_grad);
    const Block& blk = model->block(layer + 1);
    std::vector<torch::Tensor> inputs;
    if (x_grad) inputs.push_back(x);
    for (const auto& p : blk.params())
      if (p.requires_grad()) inputs.push_back(p);
    torch::autograd::variable_list out(1 + n_params + 3);
    if (inputs.empty()) return out;
    // A streamed layer's weights stay bound through the recomputation and its gradient.
    const LayerUse use(model->layer_weights(), layer + 1);
    torch::Tensor y;
    {
      torch::AutoGradMode on(true);
      y = model->layer_forward(layer, x, into_blocks);
    }
    // A matrix whose gradient went into its block's sum has none here (allow_unused): none goes
    // on, and its accumulator still runs, with nothing to add.
    auto grads = torch::autograd::grad({y}, inputs, {grad_out[0]}, /*retain_graph=*/std::nullopt,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    size_t g = 0;
    if (x_grad) out[0] = grads[g++];
    for (int64_t i = 0; i < n_params; ++i)
      if (blk.params()[i].requires_grad()) out[1 + i] = grads[g++];
    return out;
  }
};

// The embedding lookup while the embedding trains a vocabulary slice (Block::row_grad), or the
// whole reduced-precision table in the trainer's pass (first_row 0, every row): forward is
// torch::embedding; backward adds the output gradient of the tokens in the slice's rows into the
// slice's gradient sum (fp32) and returns none for the weight, whose other rows are frozen (or
// whose sum already has it): no V x C gradient in the working dtype exists. Out-of-slice tokens
// add zero rows (no data-dependent shapes, so no device sync); repeated tokens are summed in a
// fixed order (bitwise resume).
// `anchor`, an empty tensor that requires grad, is what makes the output require grad.
struct SliceEmbedding : public torch::autograd::Function<SliceEmbedding> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor anchor, torch::Tensor weight,
                               torch::Tensor tokens, const torch::Tensor* sum, int64_t first_row) {
    ctx->saved_data["tokens"] = tokens;
    ctx->saved_data["sum"] = *sum;  // (an undefined tensor cannot be an input; the sum comes by pointer)
    ctx->saved_data["first_row"] = first_row;
    torch::NoGradGuard ng;
    return torch::embedding(weight, tokens);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const torch::Tensor tokens = ctx->saved_data["tokens"].toTensor().reshape({-1});
    torch::Tensor sum = ctx->saved_data["sum"].toTensor();
    const int64_t first = ctx->saved_data["first_row"].toInt();
    ctx->saved_data.clear();
    torch::NoGradGuard ng;
    const torch::Tensor in = (tokens >= first) & (tokens < first + sum.size(0));
    const torch::Tensor rows = slice_embedding_rows(tokens, first, sum.size(0));
    const auto acc = sum.scalar_type();
    const torch::Tensor g = grad_out[0].reshape({-1, sum.size(1)}).to(acc) * in.unsqueeze(1).to(acc);
    // Both sum repeated rows in a fixed order: CUDA's index_put_ with accumulate sorts the indices
    // (its index_add_ uses atomics); the CPU's index_add_ adds them in index order (its
    // index_put_ with accumulate uses parallel atomics on large fp32 inputs).
    if (sum.is_cuda()) sum.index_put_({rows}, g, /*accumulate=*/true);
    else sum.index_add_(0, rows, g);
    return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor slice_embedding_rows(const torch::Tensor& tokens, int64_t first, int64_t rows) {
  const torch::Tensor ids = tokens.reshape({-1});
  const torch::Tensor in = (ids >= first) & (ids < first + rows);
  const torch::Tensor spread = torch::arange(ids.numel(), ids.options()).remainder(rows);
  return torch::where(in, ids - first, spread);
}

// ---- Model ----

LlamaModel::LlamaModel(const ModelConfig& cfg, torch::TensorOptions opts, std::optional<uint64_t> seed,
                       const BlockStorage& storage)
    : cfg_(cfg), opts_(opts) {
  auto store = [&](int block) { return storage ? storage(block) : torch::Tensor(); };
  BCD_CHECK(cfg.vocab_size > 0, "model vocab_size must be resolved before building the model");
  const int n = model_block_count(cfg);
  blocks_.reserve(n);
  for (int b = 0; b < n; ++b) {
    blocks_.emplace_back(model_block_name(cfg, b), model_block_slots(cfg, b), opts, store(b));
  }

  reserve_positions(1);
  if (seed) init_weights(*seed);
}

// Rotary tables, computed in fp32 on the CPU as transformers computes them (model/rope.h), then
// cast: every device and dtype sees the same angles. The new positions are built a few thousand
// at a time (the transients stay small); the tables are what the planner counts
// (rope_table_bytes).
void LlamaModel::grow_rope(int64_t tokens) const {
  const int64_t want = rope_table_positions(cfg_, tokens);
  const int64_t have = cos_.defined() ? cos_.size(0) : 0;
  if (want <= have) return;
  const int64_t d = cfg_.head_dim();
  const torch::Tensor inv_freq = rope_inv_freq(cfg_);
  torch::Tensor cos = torch::empty({want, d}, opts_), sin = torch::empty({want, d}, opts_);
  if (have > 0) cos.narrow(0, 0, have).copy_(cos_), sin.narrow(0, 0, have).copy_(sin_);
  constexpr int64_t kChunk = 4096;
  for (int64_t p0 = have; p0 < want; p0 += kChunk) {
    const int64_t len = std::min(kChunk, want - p0);
    const auto [c, s] = rope_tables(cfg_, inv_freq, p0, len);
    cos.narrow(0, p0, len).copy_(c.to(opts_.dtype()));
    sin.narrow(0, p0, len).copy_(s.to(opts_.dtype()));
  }
  cos_ = cos, sin_ = sin;  // views handed out before keep the old tables alive
}

std::pair<torch::Tensor, torch::Tensor> LlamaModel::rope(int64_t tokens) const {
  BCD_CHECK(tokens >= 1 && tokens <= cfg_.max_seq_len, "rope({}) with max_seq_len {}", tokens, cfg_.max_seq_len);
  const std::lock_guard<std::mutex> lock(*rope_mu_);
  grow_rope(tokens);
  return {cos_.narrow(0, 0, tokens), sin_.narrow(0, 0, tokens)};
}

void LlamaModel::reserve_positions(int64_t tokens) const {
  const std::lock_guard<std::mutex> lock(*rope_mu_);
  grow_rope(std::min(tokens, cfg_.max_seq_len));
}

int64_t LlamaModel::rope_positions() const {
  const std::lock_guard<std::mutex> lock(*rope_mu_);
  return cos_.size(0);
}

uint64_t LlamaModel::rope_bytes() const {
  const std::lock_guard<std::mutex> lock(*rope_mu_);
  return static_cast<uint64_t>(cos_.nbytes() + sin_.nbytes());
}

BlockAccess::BlockAccess(const LlamaModel& model, int block) : w_(model.layer_weights()), block_(block) {
  if (w_) w_->open_block(block_);
}

BlockAccess::~BlockAccess() {
  if (w_ && open_) try {
      w_->close_block(block_, false);
    } catch (const std::exception&) {  // closing without a write does no I/O; nothing to report
    }
}

void BlockAccess::commit() {
  if (!w_ || !open_) return;
  open_ = false;
  w_->close_block(block_, true);
}

namespace {

// splitmix64's finaliser (Steele, Lea & Flood 2014): neighbouring inputs give unrelated outputs.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

// Each matrix is a counter-based stream of normals keyed by (seed, block, slot)
// (kernels/random_normal.h), drawn in parallel slices on TBB's threads (at::parallel_for runs
// serially in code built without -fopenmp, as ours is): the weights are a pure function of the
// seed, whatever the device, the dtype (drawn in fp32, then cast) or the number of threads. The
// draw is on the CPU, into the working buffer where that is CPU fp32, else into an fp32 scratch
// buffer (reused block after block) copied over once per parameter.
void LlamaModel::init_weights(uint64_t seed) {
  torch::NoGradGuard ng;
  const double out_std = cfg_.init_std / std::sqrt(2.0 * static_cast<double>(cfg_.n_layers));
  torch::Tensor scratch;  // fp32 draws bound for other dtypes or devices: one buffer, faulted in once
  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    Block& b = blocks_[bi];
    BlockAccess access(*this, static_cast<int>(bi));
    const torch::Tensor& data = b.data();
    const bool direct = data.device().is_cpu() && data.scalar_type() == torch::kFloat32;
    if (!direct && (!scratch.defined() || scratch.numel() < data.numel()))
      scratch = torch::empty({data.numel()}, torch::kFloat32);
    std::vector<NormalDraw> draws;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (parameter, its fp32 draw)
    int64_t covered = 0;  // the block's elements up to the end of the latest slot
    for (size_t i = 0; i < b.slots().size(); ++i) {
      const ParamSlot& s = b.slots()[i];
      const torch::Tensor& p = b.params()[i];
      // The layout's padding before this slot (slots are in offset order) reads as zero.
      BCD_CHECK(s.offset >= covered, "block {}: slot {} is out of offset order", b.name(), s.name);
      if (s.offset > covered) data.narrow(0, covered, s.offset - covered).zero_();
      covered = s.offset + s.numel();
      if (s.name.find("norm") != std::string::npos) {  // every RMSNorm gain: norm, attn_norm, q_norm, ...
        p.fill_(1.0);
        continue;
      }
      if (s.shape.size() < 2) {
        p.zero_();
        continue;
      }
      const double sd = (s.name == slot::kWo || s.name == slot::kWDown) ? out_std : cfg_.init_std;
      torch::Tensor flat = (direct ? data : scratch).narrow(0, s.offset, s.numel());
      if (!direct) copies.emplace_back(p, flat);
      draws.push_back({flat.data_ptr<float>(), s.numel(), mix64(mix64(mix64(seed) ^ bi) ^ i), static_cast<float>(sd)});
    }
    if (covered < data.numel()) data.narrow(0, covered, data.numel() - covered).zero_();
    fill_normals(draws);
    for (auto& [p, r] : copies) p.copy_(r.view(p.sizes()));
    access.commit();
  }
}

int LlamaModel::block_index(const std::string& name) const {
  for (size_t i = 0; i < blocks_.size(); ++i)
    if (blocks_[i].name() == name) return static_cast<int>(i);
  return -1;
}

int64_t LlamaModel::num_params() const {
  int64_t n = 0;
  for (const Block& b : blocks_)
    for (const auto& s : b.slots()) n += s.numel();
  return n;
}

torch::Tensor LlamaModel::embed_weight() const { return blocks_.front().param(slot::kTokEmbeddings); }

torch::Tensor LlamaModel::embed(const torch::Tensor& tokens, bool grad_into_blocks) const {
  if (torch::GradMode::is_enabled()) {
    const Block& b = blocks_.front();
    const Block::RowGrad rows = b.row_grad(slot::kTokEmbeddings);
    // The whole table, trainable, in the trainer's pass: its rows' gradient into the fp32 sum, as a
    // slice's (repeated tokens summed in fp32, not in the working dtype; no bf16 V x C buffer).
    const bool whole = !rows.sum.defined() && grad_into_blocks && embed_weight().requires_grad() && b.sums_grad_in_fp32();
    const torch::Tensor sum = rows.sum.defined() ? rows.sum : whole ? b.grad_of(slot::kTokEmbeddings) : torch::Tensor();
    if (sum.defined()) {
      const torch::Tensor anchor = torch::empty({0}, opts_.requires_grad(true));
      return SliceEmbedding::apply(anchor, embed_weight(), tokens, &sum, rows.sum.defined() ? rows.first_row : 0);
    }
  }
  return torch::embedding(embed_weight(), tokens);
}

torch::Tensor LlamaModel::head_weight() const {
  return cfg_.tie_embeddings ? embed_weight() : blocks_.back().param(slot::kOutput);
}

torch::Tensor LlamaModel::layer_forward(int layer, const torch::Tensor& x, bool grad_into_blocks) const {
  const LayerUse use(weights_, layer + 1);
  const Block& b = blocks_.at(layer + 1);
  const int64_t bsz = x.size(0), t = x.size(1);
  const int64_t h = cfg_.n_heads, kv = cfg_.kv_heads(), d = cfg_.head_dim();
  const auto [cos, sin] = rope(t);

  // attention: (B, T, C) -> q (B, H, T, D), k/v (B, KV, T, D)
  torch::Tensor hn = rms_norm(x, b.param(slot::kAttnNorm), cfg_.norm_eps);
  torch::Tensor bq, bk, bv;
  if (cfg_.qkv_bias) bq = b.param(slot::kBq), bk = b.param(slot::kBk), bv = b.param(slot::kBv);
  torch::Tensor q = dense(b, slot::kWq, hn, grad_into_blocks, bq).view({bsz, t, h, d});
  torch::Tensor k = dense(b, slot::kWk, hn, grad_into_blocks, bk).view({bsz, t, kv, d});
  if (cfg_.qk_norm) {  // Qwen3: each head's q and k RMS-normalised over D, before RoPE
    q = rms_norm(q, b.param(slot::kQNorm), cfg_.norm_eps);
    k = rms_norm(k, b.param(slot::kKNorm), cfg_.norm_eps);
  }
  q = q.transpose(1, 2), k = k.transpose(1, 2);
  torch::Tensor v = dense(b, slot::kWv, hn, grad_into_blocks, bv).view({bsz, t, kv, d}).transpose(1, 2);
  q = apply_rotary(q, cos, sin);
  k = apply_rotary(k, cos, sin);
  torch::Tensor a = causal_attention(q, k, v).transpose(1, 2).reshape({bsz, t, h * d});
  torch::Tensor y = x + dense(b, slot::kWo, a, grad_into_blocks);

  // SwiGLU MLP: (B, T, C) -> (B, T, F) -> (B, T, C)
  torch::Tensor hm = rms_norm(y, b.param(slot::kMlpNorm), cfg_.norm_eps);
  torch::Tensor g = torch::silu(dense(b, slot::kWGate, hm, grad_into_blocks)) * dense(b, slot::kWUp, hm, grad_into_blocks);
  return y + dense(b, slot::kWDown, g, grad_into_blocks);
}

torch::Tensor LlamaModel::forward(const torch::Tensor& tokens, int grad_from, const torch::Tensor& below) const {
  return dense(final_hidden(tokens, grad_from, below), head_weight());
}

torch::Tensor LlamaModel::final_hidden(const torch::Tensor& tokens, int grad_from, const torch::Tensor& below,
                                        bool grad_into_blocks) const {
  BCD_CHECK(tokens.dim() == 2, "tokens must be (B, T)");
  const int64_t t = tokens.size(1);
  if (t > cfg_.max_seq_len)
    user_error("sequence of {} tokens exceeds model max_seq_len {}", t, cfg_.max_seq_len);
  const int n_layers = static_cast<int>(cfg_.n_layers);
  const bool grad_on = torch::GradMode::is_enabled();
  expect_pass(below.defined() ? grad_from - 1 : 0, n_layers, grad_on && cfg_.activation_checkpointing, grad_from);
  torch::Tensor x;
  if (below.defined()) {
    BCD_CHECK(grad_from >= 1 && below.size(0) == tokens.size(0) && below.size(1) == t,
              "forward: the frozen prefix does not match the batch or grad_from {}", grad_from);
    x = below;
  } else if (grad_from >= 1) {
    x = frozen_blocks(tokens, grad_from);
  } else {
    torch::AutoGradMode mode(grad_on);
    x = embed(to_compute(tokens, opts_.device()), grad_into_blocks);
  }
  // blocks [0, grad_from) are done: embed and layers [0, grad_from - 1)
  for (int i = std::max(grad_from - 1, 0); i < n_layers; ++i) {
    const bool grad_here = grad_on && (i + 1) >= grad_from;
    torch::AutoGradMode mode(grad_here);
    if (grad_here && cfg_.activation_checkpointing) {
      const Block& b = blocks_[i + 1];
      x = CheckpointedLayer::apply(x, at::TensorList(b.params()), static_cast<int64_t>(i),
                                   reinterpret_cast<int64_t>(this), grad_into_blocks)[0];
    } else {
      x = layer_forward(i, x, grad_here && grad_into_blocks);
    }
  }
  torch::AutoGradMode mode(grad_on);
  return rms_norm(x, blocks_.back().param(slot::kNorm), cfg_.norm_eps);
}

torch::Tensor LlamaModel::frozen_prefix(const torch::Tensor& batch_in, int upto) const {
  BCD_CHECK(upto >= 1 && upto <= n_blocks() - 1, "frozen_prefix: upto {} outside [1, {}]", upto, n_blocks() - 1);
  expect_pass(0, upto - 1, /*backward=*/false, 0);
  return frozen_blocks(batch_in.narrow(1, 0, batch_in.size(1) - 1), upto);
}

void LlamaModel::frozen_prefixes(const std::vector<torch::Tensor>& batches, std::vector<torch::Tensor>& below,
                                 int upto) const {
  BCD_CHECK(upto >= 1 && upto <= n_blocks() - 1, "frozen_prefixes: upto {} outside [1, {}]", upto, n_blocks() - 1);
  BCD_CHECK(below.size() == batches.size(), "frozen_prefixes: {} prefixes for {} batches", below.size(), batches.size());
  torch::NoGradGuard ng;
  std::vector<size_t> todo;
  std::vector<torch::Tensor> x;  // (B, T, C) each
  for (size_t i = 0; i < batches.size(); ++i) {
    if (below[i].defined()) continue;
    todo.push_back(i);
    const torch::Tensor& b = batches[i];
    x.push_back(torch::embedding(embed_weight(), to_compute(b.narrow(1, 0, b.size(1) - 1), opts_.device())));
  }
  if (todo.empty()) return;
  expect_pass(0, upto - 1, /*backward=*/false, 0);
  for (int i = 0; i < upto - 1; ++i) {
    const LayerUse use(weights_, i + 1);  // held across the batches: one copy of a streamed layer
    for (torch::Tensor& xi : x) xi = layer_forward(i, xi);
  }
  for (size_t k = 0; k < todo.size(); ++k) below[todo[k]] = std::move(x[k]);
}

void LlamaModel::expect_pass(int first_layer, int end_layer, bool backward, int grad_from) const {
  if (!weights_) return;
  std::vector<int> order;
  for (int i = std::max(first_layer, 0); i < end_layer; ++i) order.push_back(i + 1);
  // The checkpointed layers (i + 1 >= grad_from) recompute in backward, the top one first.
  if (backward)
    for (int i = end_layer - 1; i >= 0 && i + 1 >= grad_from; --i) order.push_back(i + 1);
  weights_->expect(order);
}

torch::Tensor LlamaModel::frozen_blocks(const torch::Tensor& tokens, int upto) const {
  torch::NoGradGuard ng;
  torch::Tensor x = torch::embedding(embed_weight(), to_compute(tokens, opts_.device()));
  for (int i = 0; i < upto - 1; ++i) x = layer_forward(i, x);
  return x;
}

int64_t LlamaModel::loss_chunk(int64_t tokens) const {
  return cfg_.loss_chunk(tokens, static_cast<int64_t>(c10::elementSize(opts_.dtype().toScalarType())));
}

// (B, T+1) -> the next-token cross entropy of every position, each weighted by `scale` (B*T,),
// summed: the head and the loss fused and chunked (model/fused_loss.h), so that the B*T*V logits
// never exist whole. With grad_into_blocks the head weight's gradient goes straight into its
// block's fp32 sum; a vocabulary slice's rows always do (model/block.h: row_grad).
torch::Tensor LlamaModel::cross_entropy(const torch::Tensor& batch_in, int grad_from, const torch::Tensor& below,
                                        const torch::Tensor& scale, bool grad_into_blocks) const {
  const torch::Tensor batch = to_compute(batch_in, opts_.device());  // loaders and samplers build on the CPU
  const int64_t t = batch.size(1) - 1;
  torch::Tensor inputs = batch.narrow(1, 0, t), targets = batch.narrow(1, 1, t);
  torch::Tensor hn = final_hidden(inputs, grad_from, below, grad_into_blocks);
  hn = hn.reshape({-1, hn.size(-1)});
  const torch::Tensor w = head_weight();
  torch::Tensor sink;
  int64_t first_row = 0;
  if (torch::GradMode::is_enabled()) {
    const Block& owner = cfg_.tie_embeddings ? blocks_.front() : blocks_.back();
    const char* name = cfg_.tie_embeddings ? slot::kTokEmbeddings : slot::kOutput;
    if (grad_into_blocks && w.requires_grad()) {
      sink = owner.grad_of(name);
      const auto acc = w.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
      if (sink.defined() && sink.scalar_type() != acc) sink = torch::Tensor();
    } else if (!w.requires_grad()) {
      const Block::RowGrad rows = owner.row_grad(name);  // a vocabulary slice: its rows' only way in
      sink = rows.sum, first_row = rows.first_row;
    }
  }
  return chunked_linear_cross_entropy(hn, w, targets.reshape({-1}), scale, loss_chunk(hn.size(0)), sink, first_row);
}

torch::Tensor LlamaModel::loss(const torch::Tensor& batch, int grad_from, const torch::Tensor& below) const {
  Batch b;
  b.tokens = batch;
  return loss(b, grad_from, below, LossOptions{});
}

torch::Tensor LlamaModel::loss(const Batch& b, int grad_from, const torch::Tensor& below) const {
  return loss(b, grad_from, below, LossOptions{});
}

torch::Tensor LlamaModel::loss(const Batch& b, int grad_from, const torch::Tensor& below, const LossOptions& opt) const {
  const int64_t n = b.tokens.size(0) * (b.tokens.size(1) - 1);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(opts_.device());
  torch::Tensor scale;
  if (!b.mask.defined()) {
    scale = torch::full({n}, opt.scale / static_cast<double>(n), f64);
  } else {
    // No counted target in the whole global batch: a zero loss that still reaches every weight.
    const torch::Tensor mask = to_compute(b.mask, opts_.device()).reshape({-1}).to(torch::kFloat64);
    scale = mask * (opt.scale / (b.divisor > 0 ? b.divisor : 1.0));
  }
  return cross_entropy(b.tokens, grad_from, below, scale, opt.grad_into_blocks);
}

void LlamaModel::set_trainable(bool trainable) {
  for (Block& b : blocks_) b.set_trainable(trainable);
}

void LlamaModel::set_direct_sums(bool on) {
  for (Block& b : blocks_) {
    std::vector<bool> direct;  // empty: off
    if (on)
      for (const ParamSlot& s : b.slots()) direct.push_back(grad_summed_directly(s));
    b.set_direct_sums(std::move(direct));
  }
}

void LlamaModel::zero_grad() {
  for (Block& b : blocks_) b.zero_grad();
}

void LlamaModel::accumulate_grads() {
  for (Block& b : blocks_)
    if (b.trainable()) b.accumulate_grad();
}

}  // namespace bcd
