// Typed run configuration: one struct per TOML table, each field with a default and a doc line.
// Loading rejects unknown keys and wrong types, naming the file (or flag) and the key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace bcd {

// ---- Closed sets ----
// A key that takes one of a few names is an enum, parsed when the config is loaded: past loading
// no code compares those names. Choices<E>::names are the TOML names of E's values, in order.
template <class E>
struct Choices;

enum class Dtype { kFp32, kBf16 };                             // train.dtype: the working weights'
enum class DeviceChoice { kCpu, kCuda, kAuto };                 // train.device
enum class CpuMatmul { kAuto, kOneDnn, kBlas };                 // train.cpu_matmul
enum class OptimImpl { kFused, kTorch };                        // optim.impl
enum class BlockOrder { kRandom, kAscending, kDescending, kFixed };  // bcd.order
enum class BlockKind { kLayer, kAttnMlp, kWhole };             // bcd.blocks: what a block is
enum class StateOnSwitch { kKeep, kReset };                     // bcd.state_on_switch
enum class Home { kAuto, kHost, kNvme };                        // memory.home, memory.stream_home
enum class StreamWeights { kAuto, kOn, kOff };                  // memory.stream_weights
enum class Backend { kAuto, kGloo, kNccl };                     // dist.backend
enum class ChatTemplate { kPlain, kLlama2, kLlama3, kChatML };  // how a conversation is laid out (data/chat.h)
// sample.chat_template: auto (the dataset's template, when it holds instruction data), none
// (prompts are text to continue), or one template.
enum class SampleChat { kAuto, kNone, kPlain, kLlama2, kLlama3, kChatML };
// model.rope_type: how the rotary frequencies are derived from rope_theta (model/rope.h), as
// transformers' rope_type of the same name.
enum class RopeType { kDefault, kLinear, kLlama3, kYarn };

template <> struct Choices<Dtype> { static constexpr const char* names[] = {"fp32", "bf16"}; };
template <> struct Choices<DeviceChoice> { static constexpr const char* names[] = {"cpu", "cuda", "auto"}; };
template <> struct Choices<CpuMatmul> { static constexpr const char* names[] = {"auto", "onednn", "blas"}; };
template <> struct Choices<OptimImpl> { static constexpr const char* names[] = {"fused", "torch"}; };
template <> struct Choices<BlockOrder> { static constexpr const char* names[] = {"random", "ascending", "descending", "fixed"}; };
template <> struct Choices<BlockKind> { static constexpr const char* names[] = {"layer", "attn_mlp", "whole"}; };
template <> struct Choices<StateOnSwitch> { static constexpr const char* names[] = {"keep", "reset"}; };
template <> struct Choices<Home> { static constexpr const char* names[] = {"auto", "host", "nvme"}; };
template <> struct Choices<StreamWeights> { static constexpr const char* names[] = {"auto", "on", "off"}; };
template <> struct Choices<Backend> { static constexpr const char* names[] = {"auto", "gloo", "nccl"}; };
template <> struct Choices<ChatTemplate> { static constexpr const char* names[] = {"plain", "llama2", "llama3", "chatml"}; };
template <> struct Choices<RopeType> { static constexpr const char* names[] = {"default", "linear", "llama3", "yarn"}; };
template <> struct Choices<SampleChat> {
  static constexpr const char* names[] = {"auto", "none", "plain", "llama2", "llama3", "chatml"};
};

template <class E, class = void>
struct is_choice : std::false_type {};
template <class E>
struct is_choice<E, std::void_t<decltype(Choices<E>::names)>> : std::true_type {};

template <class E>
const char* name_of(E e) {
  return Choices<E>::names[static_cast<size_t>(e)];
}
template <class E>
std::optional<E> parse_choice(std::string_view name) {
  for (size_t i = 0; i < std::size(Choices<E>::names); ++i)
    if (name == Choices<E>::names[i]) return static_cast<E>(i);
  return std::nullopt;
}
// The names for a message: "\"fp32\" or \"bf16\"".
template <class E>
std::string choice_list() {
  std::string out;
  const size_t n = std::size(Choices<E>::names);
  for (size_t i = 0; i < n; ++i)
    out += (i == 0 ? "" : i + 1 == n ? " or " : ", ") + std::string("\"") + Choices<E>::names[i] + "\"";
  return out;
}

// The template a sample.chat_template names, or none for auto / none.
inline std::optional<ChatTemplate> named_template(SampleChat c) {
  if (c == SampleChat::kAuto || c == SampleChat::kNone) return std::nullopt;
  return static_cast<ChatTemplate>(static_cast<int>(c) - static_cast<int>(SampleChat::kPlain));
}

// What `train --resume` may do with a key, declared with the key (its visit() call) so that a new
// key cannot miss it:
enum class Resume {
  kFixed,      // the checkpoint's weights, optimizer state and schedule are made of it: refused
  kChanges,    // changes what the remaining steps compute: applied, with a warning
  kPlacement,  // where and how the run goes (paths, logging, memory, threads, device, ranks): applied
};

// A byte count from the config: a size with units ("24GiB", "1.5GB"), an integer, or "auto"
// (value then resolved by whoever reads it; see MemoryConfig).
struct Bytes {
  uint64_t value = 0;
  bool is_auto = true;
};

// A RoPE base the fp32 frequency tables can use (model/rope.h): above 1 (below, every frequency
// exceeds a radian a token) and finite in fp32.
inline bool rope_theta_ok(double theta) { return theta > 1 && theta <= 3.4e38; }

struct ModelConfig {
  std::string hf_config;          // HF config.json to take the shape from (llama, mistral, qwen2, qwen3)
  std::string init_from;          // initial weights: "" (random), "hf:DIR" or a bcdtrain .h5 file
  int64_t vocab_size = 0;         // 0: the dataset tokenizer's vocabulary size
  int64_t d_model = 256;          // hidden size (HF: hidden_size)
  int64_t n_layers = 4;           // decoder layers (HF: num_hidden_layers)
  int64_t n_heads = 4;            // attention heads (HF: num_attention_heads)
  int64_t n_kv_heads = 0;         // key/value heads for GQA; 0 = n_heads (HF: num_key_value_heads)
  int64_t d_ff = 0;               // SwiGLU hidden size; 0 = 8/3 d_model rounded up to 64
  int64_t d_head = 0;             // dimension of one attention head; 0 = d_model / n_heads (HF: head_dim)
  int64_t max_seq_len = 1024;     // longest sequence the model accepts
  double rope_theta = 10000.0;    // rotary embedding base
  // RoPE scaling (HF rope_type and its parameters; model/rope.h): the factor (linear, llama3,
  // yarn), llama3's low/high frequency factors, the pre-training context (llama3, yarn; 0 =
  // max_seq_len), yarn's ramp bounds, its cos/sin scale (0 = 0.1 ln(factor) + 1) and truncation.
  RopeType rope_type = RopeType::kDefault;
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_len = 0;
  double rope_beta_fast = 32.0;
  double rope_beta_slow = 1.0;
  double rope_attention_factor = 0.0;
  bool rope_truncate = true;
  double norm_eps = 1e-5;         // RMSNorm epsilon
  bool qkv_bias = false;          // bias on q/k/v projections (Qwen2)
  bool qk_norm = false;           // RMSNorm over each head of q and k before RoPE (Qwen3)
  bool tie_embeddings = false;    // LM head shares the embedding matrix
  double init_std = 0.02;         // std of the normal init; output projections scaled by 1/sqrt(2L)
  bool activation_checkpointing = false;  // recompute each layer's activations in backward
  int64_t loss_chunk_tokens = 0;  // tokens per chunk of the fused head + loss; 0 = auto

  void validate() const;  // this section alone; UserError naming the key
  template <class V>
  void visit(V& v) {
    v("hf_config", hf_config, "HF config.json to take the shape from (llama, mistral, qwen2, qwen3; both the transformers 4 and 5 forms); fills the fields below", Resume::kFixed);
    v("init_from", init_from, "initial weights: \"\" = random (init_std); \"hf:DIR\" = a Hugging Face model directory (config.json + safetensors); or a bcdtrain .h5 weights file or checkpoint. The file also gives the shape, unless hf_config is set", Resume::kPlacement);
    v("vocab_size", vocab_size, "vocabulary size; 0 = the dataset tokenizer's", Resume::kFixed);
    v("d_model", d_model, "hidden size (HF hidden_size)", Resume::kFixed);
    v("n_layers", n_layers, "decoder layers (HF num_hidden_layers)", Resume::kFixed);
    v("n_heads", n_heads, "attention heads (HF num_attention_heads)", Resume::kFixed);
    v("n_kv_heads", n_kv_heads, "key/value heads for grouped-query attention; 0 = n_heads", Resume::kFixed);
    v("d_ff", d_ff, "SwiGLU hidden size (HF intermediate_size); 0 = 8/3 d_model rounded up to 64", Resume::kFixed);
    v("d_head", d_head, "dimension of one attention head (HF head_dim); 0 = d_model / n_heads. The q and o projections are n_heads * d_head wide", Resume::kFixed);
    v("max_seq_len", max_seq_len, "longest sequence the model accepts", Resume::kChanges);
    v("rope_theta", rope_theta, "rotary embedding base", Resume::kChanges);
    v("rope_type", rope_type, "how the rotary frequencies derive from rope_theta, as transformers' rope_type: default, linear (positions / rope_factor), llama3 (Llama 3.1+: low frequencies / rope_factor, smoothed between the low and high frequency factors) or yarn", Resume::kChanges);
    v("rope_factor", rope_factor, "RoPE scaling factor (linear, llama3, yarn)", Resume::kChanges);
    v("rope_low_freq_factor", rope_low_freq_factor, "llama3 RoPE: wavelengths above rope_original_max_len / this are divided by rope_factor", Resume::kChanges);
    v("rope_high_freq_factor", rope_high_freq_factor, "llama3 RoPE: wavelengths below rope_original_max_len / this are kept", Resume::kChanges);
    v("rope_original_max_len", rope_original_max_len, "llama3 and yarn RoPE: the context length of pre-training (HF original_max_position_embeddings); 0 = max_seq_len", Resume::kChanges);
    v("rope_beta_fast", rope_beta_fast, "yarn RoPE: rotations where the ramp from extrapolation begins", Resume::kChanges);
    v("rope_beta_slow", rope_beta_slow, "yarn RoPE: rotations where the ramp to interpolation ends", Resume::kChanges);
    v("rope_attention_factor", rope_attention_factor, "yarn RoPE: scale of cos and sin; 0 = 0.1 ln(rope_factor) + 1", Resume::kChanges);
    v("rope_truncate", rope_truncate, "yarn RoPE: round the ramp's bounds to whole dimensions", Resume::kChanges);
    v("norm_eps", norm_eps, "RMSNorm epsilon", Resume::kChanges);
    v("qkv_bias", qkv_bias, "bias on the q/k/v projections (Qwen2 style)", Resume::kFixed);
    v("qk_norm", qk_norm, "RMSNorm over each head of q and k (weights of d_head) before the rotary embedding (Qwen3 style)", Resume::kFixed);
    v("tie_embeddings", tie_embeddings, "LM head shares the embedding matrix", Resume::kFixed);
    v("init_std", init_std, "std of the normal init; output projections scaled by 1/sqrt(2 n_layers)", Resume::kPlacement);
    v("activation_checkpointing", activation_checkpointing, "recompute each layer's activations during backward", Resume::kPlacement);
    v("loss_chunk_tokens", loss_chunk_tokens, "tokens per chunk of the fused head matmul + cross entropy (the B*T*V logits are never held whole, one chunk's at a time); 0 = auto: as many as keep a chunk's logits, their fp32 copy and gradient within 256 MiB", Resume::kChanges);
  }
  // Tokens per chunk of the fused head + loss for a micro-batch of `tokens` in a working dtype of
  // `dtype_bytes`: loss_chunk_tokens, else as many as keep one chunk's logits, their fp32 copy
  // and gradient (vocab * (dtype_bytes + 8) bytes a token) within kLossChunkBytes, at least 16;
  // never more than `tokens` (nor less than 1).
  static constexpr int64_t kLossChunkBytes = int64_t{256} << 20;
  int64_t loss_chunk(int64_t tokens, int64_t dtype_bytes) const {
    const int64_t per_token = (vocab_size > 0 ? vocab_size : 1) * (dtype_bytes + 8);
    const int64_t want = loss_chunk_tokens > 0 ? loss_chunk_tokens
                                               : (kLossChunkBytes / per_token > 16 ? kLossChunkBytes / per_token : 16);
    return want < tokens ? want : (tokens > 0 ? tokens : 1);
  }
  int64_t head_dim() const { return d_head > 0 ? d_head : d_model / n_heads; }
  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t ff_dim() const { return d_ff > 0 ? d_ff : ((8 * d_model / 3 + 63) / 64) * 64; }
  // Parameters of the model this describes (vocab_size resolved), in double: a shape from a flag
  // or a file is judged by it before any int64 element count of it could overflow.
  double n_params() const {
    const double c = static_cast<double>(d_model), d = static_cast<double>(head_dim());
    const double h = static_cast<double>(n_heads), kv = static_cast<double>(kv_heads());
    const double layer = 2 * c + (h + 2 * kv) * d * c + c * h * d + 3 * static_cast<double>(ff_dim()) * c +
                         (qkv_bias ? (h + 2 * kv) * d : 0.0) + (qk_norm ? 2 * d : 0.0);
    return static_cast<double>(vocab_size) * c * (tie_embeddings ? 1 : 2) + c + static_cast<double>(n_layers) * layer;
  }
};

// Bounds a config may not pass: a step's tokens per rank (batch_size x seq_len x grad_accum),
// [bcd] vocab_slices, [sample] max_new_tokens.
constexpr int64_t kMaxStepTokens = int64_t{1} << 31;
constexpr int64_t kMaxVocabSlices = 256;
constexpr int64_t kMaxNewTokens = int64_t{1} << 20;

struct TrainConfig {
  int64_t steps = 100;            // optimizer steps
  int64_t batch_size = 8;         // sequences per micro-batch
  int64_t seq_len = 128;          // tokens per sequence
  int64_t grad_accum = 1;         // micro-batches per optimizer step
  double lr = 3e-4;               // peak learning rate
  int64_t warmup_steps = 0;       // linear warmup steps
  double min_lr_ratio = 0.1;      // cosine decays to lr * min_lr_ratio
  double grad_clip = 1.0;         // global gradient norm clip; 0 = off
  std::string run_dir = "runs/default";
  int64_t seed = 1234;
  int64_t val_every = 0;          // validation every N steps (and at the end); 0 = only at the end
  int64_t val_batches = 8;        // validation micro-batches per evaluation
  int64_t log_every = 1;          // metrics/progress every N steps
  int64_t threads = 0;            // CPU threads for compute; 0 = all cores
  int64_t checkpoint_every = 0;   // checkpoint every N steps (and on SIGINT/SIGTERM); 0 = only on signals
  int64_t keep_checkpoints = 3;   // newest checkpoints kept; 0 = all
  Dtype dtype = Dtype::kFp32;     // working weights dtype
  DeviceChoice device = DeviceChoice::kCpu;  // compute device: cpu, cuda, auto (cuda when usable)
  double peak_tflops = 0;         // the device's peak TFLOP/s for MFU; 0 = known GPUs' data sheet
  CpuMatmul cpu_matmul = CpuMatmul::kAuto;  // fp32 CPU GEMMs: oneDNN or LibTorch's BLAS (model/matmul.h)
  bool tf32 = false;              // CUDA fp32 GEMMs on TF32 tensor cores
  bool save_model = true;         // write model.h5 and samples.txt at the end (false: measurements)
  bool plot = false;              // draw <run_dir>/plots (report/plots.h) when the run ends
  bool tensorboard = false;       // also write metrics.jsonl's scalars as TensorBoard events

  void validate() const;  // this section alone; UserError naming the key
  template <class V>
  void visit(V& v) {
    v("steps", steps, "optimizer steps", Resume::kChanges);
    v("batch_size", batch_size, "sequences per micro-batch", Resume::kChanges);
    v("seq_len", seq_len, "tokens per sequence", Resume::kChanges);
    v("grad_accum", grad_accum, "micro-batches per optimizer step", Resume::kChanges);
    v("lr", lr, "peak learning rate", Resume::kChanges);
    v("warmup_steps", warmup_steps, "linear warmup steps", Resume::kChanges);
    v("min_lr_ratio", min_lr_ratio, "cosine schedule decays to lr * min_lr_ratio", Resume::kChanges);
    v("grad_clip", grad_clip, "clip the global gradient norm to this; 0 = off", Resume::kChanges);
    v("run_dir", run_dir, "output directory: config.toml, metrics.jsonl, model.h5, samples.txt", Resume::kPlacement);
    v("seed", seed, "seed for init, data order and sampling", Resume::kFixed);
    v("val_every", val_every, "validation loss every N steps (always at the end); 0 = only at the end", Resume::kPlacement);
    v("val_batches", val_batches, "validation micro-batches per evaluation", Resume::kPlacement);
    v("log_every", log_every, "progress line and metrics.jsonl record every N steps", Resume::kPlacement);
    v("threads", threads, "CPU compute threads; 0 = all cores", Resume::kPlacement);
    v("checkpoint_every", checkpoint_every, "write <run_dir>/checkpoints/step-N.h5 every N steps (always on SIGINT/SIGTERM); 0 = only on those signals", Resume::kPlacement);
    v("keep_checkpoints", keep_checkpoints, "newest checkpoints kept in <run_dir>/checkpoints; 0 = all", Resume::kPlacement);
    v("dtype", dtype, "working weights dtype: fp32, or bf16 (with an fp32 master copy per block)", Resume::kFixed);
    v("device", device, "compute device: \"cpu\", \"cuda\" (the compute tier is GPU memory; needs a CUDA build and device), or \"auto\" (cuda when usable)", Resume::kPlacement);
    v("cpu_matmul", cpu_matmul, "fp32 matrix products on the CPU: auto (oneDNN when the CPU has AVX-512, where its kernels run about twice the FLOP/s of LibTorch's BLAS on AMD parts; else the BLAS), onednn, blas; both round in fp32 (in another order)", Resume::kPlacement);
    v("tf32", tf32, "CUDA, fp32 working weights: matrix products on TF32 tensor cores (inputs rounded to a 10-bit mantissa, fp32 accumulation; about 8x plain fp32's FLOP/s on A100/H100-class GPUs); false = plain fp32. bf16 runs multiply in bf16 on the tensor cores already, the fp32-summed head weight gradient included", Resume::kPlacement);
    v("save_model", save_model, "write <run_dir>/model.h5 and samples.txt when the run ends; false for measuring runs (a 7B model.h5 is 27 GB)", Resume::kPlacement);
    v("peak_tflops", peak_tflops, "the device's dense peak TFLOP/s in the working dtype, for the MFU in metrics.jsonl; 0 = from a table of known GPUs (none on the CPU)", Resume::kPlacement);
    v("plot", plot, "when the run ends (finished or stopped by a signal), draw its PNGs into <run_dir>/plots (needs gnuplot; without it a warning)", Resume::kPlacement);
    v("tensorboard", tensorboard, "also write every metrics.jsonl record's scalars to <run_dir>/tensorboard/events.out.tfevents.* (tensorboard --logdir), as the run goes; a resume rewrites them from metrics.jsonl, so no step appears twice", Resume::kPlacement);
  }
};

struct BcdConfig {
  bool enabled = false;
  int64_t switch_every = 50;
  BlockOrder order = BlockOrder::kRandom;
  std::vector<std::string> fixed_order;
  BlockKind blocks = BlockKind::kLayer;
  int64_t layers_per_block = 1;
  bool include_embed = true;
  bool include_head = true;
  StateOnSwitch state_on_switch = StateOnSwitch::kKeep;
  int64_t visit_warmup = 0;       // LR warmup steps at the start of every visit; 0 = none
  int64_t vocab_slices = 1;       // units the embedding and the LM head each train as (rows of the vocabulary)

  void validate() const;  // this section alone; UserError naming the key
  // Rows [first, end) of the vocabulary that slice k of vocab_slices covers (V rows): floor(k V / n).
  int64_t vocab_slice_row(int64_t vocab, int64_t k) const { return k * vocab / vocab_slices; }
  template <class V>
  void visit(V& v) {
    v("enabled", enabled, "train one block at a time (block coordinate descent); false = full-parameter AdamW", Resume::kFixed);
    v("switch_every", switch_every, "optimizer steps per visit of a block (K)", Resume::kChanges);
    v("order", order, "block order: random (new permutation each block-epoch, seeded), ascending, descending, fixed", Resume::kFixed);
    v("fixed_order", fixed_order, "block names in visiting order for order = \"fixed\" (e.g. [\"head\", \"layer.1\"])", Resume::kFixed);
    v("blocks", blocks, "what a block is: layer (embed, each layer group, head), attn_mlp (attention and MLP halves), whole (one block: the model)", Resume::kFixed);
    v("layers_per_block", layers_per_block, "decoder layers per block with blocks = \"layer\"", Resume::kFixed);
    v("include_embed", include_embed, "train the embedding as a block (else it stays frozen)", Resume::kFixed);
    v("include_head", include_head, "train the head (final norm + LM head) as a block (else it stays frozen)", Resume::kFixed);
    v("state_on_switch", state_on_switch, "Adam moments on switch: keep (persist between visits) or reset (dropped, as BAdam)", Resume::kFixed);
    v("vocab_slices", vocab_slices, "the embedding and the untied LM head each train as this many units, consecutive row ranges of the vocabulary (embed.0 .., head.0 ..; the final norm trains with the last head slice), each with its own master and moments and a gradient of its rows only; 1 = one unit each (embed, head)", Resume::kFixed);
    v("visit_warmup", visit_warmup, "the first N steps of every visit ramp the LR linearly up to the schedule's (step i of a visit takes (i+1)/(N+1) of it), so a block's first updates from fresh or stale moments are small; 0 = off; fewer than switch_every", Resume::kChanges);
  }
};

struct OptimConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  OptimImpl impl = OptimImpl::kFused;  // AdamW implementation

  void validate() const;  // this section alone; UserError naming the key
  template <class V>
  void visit(V& v) {
    v("beta1", beta1, "AdamW beta1", Resume::kChanges);
    v("beta2", beta2, "AdamW beta2", Resume::kChanges);
    v("eps", eps, "AdamW epsilon", Resume::kChanges);
    v("weight_decay", weight_decay, "decoupled weight decay (applied to matrices, not norms/biases)", Resume::kChanges);
    v("impl", impl, "AdamW implementation: fused (one SIMD/CUDA pass per block segment) or torch (torch::optim::AdamW; full-parameter fp32 only)", Resume::kFixed);
  }
};

struct DataConfig {
  std::string path;               // dataset directory written by `bcdtrain prepare`
  std::vector<std::string> paths; // instead of path: several datasets, mixed by weight
  std::vector<double> weights;    // paths' shares of the training windows (empty: equal)

  // path, or paths' first (the dataset whose tokenizer and attributes the run reports)
  const std::string& first() const { return paths.empty() ? path : paths.front(); }

  void validate() const;  // this section alone; UserError naming the key
  template <class V>
  void visit(V& v) {
    v("path", path, "dataset directory written by `bcdtrain prepare`", Resume::kChanges);
    v("paths", paths,
      "instead of path: several dataset directories (prepared with one tokenizer) mixed by `weights`; "
      "each keeps its own resumable position", Resume::kChanges);
    v("weights", weights, "`paths`' shares of the training (and validation) windows; empty = equal shares", Resume::kChanges);
  }
};

struct SampleConfig {
  std::vector<std::string> prompts = {"The", "A man", "Life is"};
  int64_t max_new_tokens = 64;
  double temperature = 0.8;
  int64_t top_k = 40;
  double top_p = 0.95;
  SampleChat chat_template = SampleChat::kAuto;

  void validate() const;  // this section alone; UserError naming the key
  template <class V>
  void visit(V& v) {
    v("prompts", prompts, "prompts for the samples printed at the end of training", Resume::kPlacement);
    v("chat_template", chat_template, "prompts are user turns laid out by this template (plain, llama2, llama3, chatml); \"auto\" = the dataset's when it holds instruction data; \"none\" = prompts are text to continue", Resume::kPlacement);
    v("max_new_tokens", max_new_tokens, "tokens generated per sample", Resume::kPlacement);
    v("temperature", temperature, "sampling temperature; 0 = greedy", Resume::kPlacement);
    v("top_k", top_k, "keep the k most likely tokens; 0 = off", Resume::kPlacement);
    v("top_p", top_p, "nucleus sampling mass; 1 = off", Resume::kPlacement);
  }
};

// Budgets of the three tiers (DESIGN.md §2); src/memory/planner.h places every block's state in them.
// "auto": compute_bytes = MemTotal (right for CPU-only builds, where compute is host memory; GPU
// runs give the card's size), host_bytes = MemAvailable (both from /proc/meminfo),
// pinned_bytes = exactly the staging pool the plan needs, activation_bytes = the planner's estimate.
struct MemoryConfig {
  Bytes compute_bytes;            // compute-device (GPU) memory budget
  Bytes pinned_bytes;             // pinned host staging pool
  Bytes host_bytes;               // all host RAM for model state (the pinned pool included)
  std::vector<std::string> nvme_paths;  // directories of the NVMe tier, striped
  int64_t prefetch_depth = 1;     // units of look-ahead the pinned pool holds
  bool prefetch = true;           // read the coming units' state while the active one trains
  Home home = Home::kAuto;        // where inactive master/moments live: auto, host, nvme
  Bytes activation_bytes;         // activation memory on the compute device; auto = estimate
  bool keep_nvme_state = false;   // leave the NVMe tier's files when the run ends
  // Frozen decoder layers' working weights streamed from host memory (DESIGN.md §2).
  StreamWeights stream_weights = StreamWeights::kAuto;  // auto (only what does not fit), on (every layer), off
  Home stream_home = Home::kAuto;  // home of streamed weights: auto (host memory first, the rest on NVMe), host, nvme
  int64_t stream_depth = 2;       // compute-tier window buffers for streamed layers (>= 2)
  double stream_gbps = 0;         // host -> compute copy bandwidth the plan assumes; 0 = by device
  double stream_tflops = 0;       // sustained compute the plan assumes; 0 = by device
  double stream_nvme_gbps = 0;    // NVMe read bandwidth the plan assumes for NVMe-homed layers; 0 = by device
  bool accept_slow_stream = false;  // train even when the plan says the stream cannot keep up

  void validate() const;  // this section alone; UserError naming the key
  template <class V>
  void visit(V& v) {
    v("compute_bytes", compute_bytes, "compute-device memory budget (\"24GiB\", bytes, or \"auto\": the GPU's memory on CUDA, the host's MemTotal on the CPU)", Resume::kPlacement);
    v("pinned_bytes", pinned_bytes, "pinned host staging pool (\"auto\": exactly (prefetch_depth + 1) units of master + moments)", Resume::kPlacement);
    v("host_bytes", host_bytes, "host RAM for model state, pinned pool included (\"auto\": MemAvailable)", Resume::kPlacement);
    v("nvme_paths", nvme_paths, "directories of the NVMe tier (state that does not fit host_bytes is striped over them)", Resume::kPlacement);
    v("prefetch_depth", prefetch_depth, "units of look-ahead the pinned staging pool must hold", Resume::kPlacement);
    v("prefetch", prefetch, "read the next units' master and moments into the pinned pool while the active unit trains; false = read each at its switch, in the step (to measure what prefetching hides: the GPU check's prefetch_off run)", Resume::kPlacement);
    v("home", home, "home of inactive master weights and moments: auto (host memory first, the rest on NVMe), host, nvme", Resume::kPlacement);
    v("activation_bytes", activation_bytes, "activation memory on the compute device (\"auto\": the planner's estimate)", Resume::kPlacement);
    v("keep_nvme_state", keep_nvme_state,
      "leave the NVMe tier's extent files when a run ends (else removed: its checkpoints hold the state)", Resume::kPlacement);
    v("stream_weights", stream_weights,
      "frozen decoder layers' working weights live in host memory and stream to the compute tier as they are used: "
      "auto (only the layers that do not fit the compute budget), on (every decoder layer), off (all resident)", Resume::kPlacement);
    v("stream_home", stream_home,
      "home of streamed layers' weights: auto (host memory, one copy per machine, first; the layers that do not fit "
      "it on the NVMe tier, read through pinned buffers), host, nvme", Resume::kPlacement);
    v("stream_depth", stream_depth, "compute-tier window buffers for streamed layers: 2 = double buffering", Resume::kPlacement);
    v("stream_gbps", stream_gbps,
      "host -> compute copy bandwidth in GB/s the plan assumes (0: 25 on CUDA, PCIe 4.0 x16 pinned; 10 on the CPU)", Resume::kPlacement);
    v("stream_tflops", stream_tflops,
      "sustained compute in TFLOP/s the plan assumes for hiding the stream (0: half of train.peak_tflops or of a "
      "known GPU's peak, else 80 on CUDA; 0.1 on the CPU)", Resume::kPlacement);
    v("stream_nvme_gbps", stream_nvme_gbps,
      "NVMe read bandwidth in GB/s the plan assumes for layers whose weights are homed there (0: 6 on CUDA, a PCIe "
      "4.0 drive; 2 on the CPU)", Resume::kPlacement);
    v("accept_slow_stream", accept_slow_stream,
      "train even when the plan says the weight stream cannot keep up with compute (its copies would be exposed)", Resume::kPlacement);
  }
};

// Data-parallel training (DESIGN.md §6): ranks are processes started by `bcdtrain launch`,
// torchrun or Slurm; their rank, world size and rendezvous come from the environment.
struct DistConfig {
  Backend backend = Backend::kAuto;  // collectives: auto (nccl on CUDA, gloo on the CPU), gloo, nccl
  int64_t timeout_s = 300;        // a collective or the rendezvous waiting longer fails the run
  Bytes bucket_bytes{25ull << 20, false};  // the active unit's gradient is reduced in pieces of at most this
  bool overlap_forward = true;    // run the next step's forward below the active unit while the gradient is on the wire
  bool shard_state = true;        // each rank owns 1/N of every unit's master and moments (world size > 1)
  int64_t nproc = 1;              // ranks per machine this config is written for (plan and launch without --nproc)

  void validate() const;  // this section alone; UserError naming the key
  template <class V>
  void visit(V& v) {
    v("backend", backend, "collectives backend: auto (nccl on CUDA, gloo on the CPU), gloo, nccl", Resume::kPlacement);
    v("timeout_s", timeout_s, "seconds a rendezvous or collective may wait for the other ranks before the run fails", Resume::kPlacement);
    v("bucket_bytes", bucket_bytes, "the active unit's gradient is reduced in buckets of at most this many bytes", Resume::kPlacement);
    v("overlap_forward", overlap_forward,
      "while the gradient is reduced, run the next step's forward through the frozen blocks below the active unit", Resume::kPlacement);
    v("shard_state", shard_state,
      "with several ranks, each owns a contiguous 1/N slice of every unit's master weights and Adam moments "
      "(updates it, stages it, checkpoints it in a file of its own); false: every rank holds all of it", Resume::kPlacement);
    v("nproc", nproc,
      "data-parallel ranks per machine this config is written for (its [memory] budgets are per rank): "
      "`bcdtrain plan` plans them and `bcdtrain launch` starts them when --nproc is not given", Resume::kPlacement);
  }
};

struct Config {
  ModelConfig model;
  TrainConfig train;
  OptimConfig optim;
  BcdConfig bcd;
  DataConfig data;
  SampleConfig sample;
  MemoryConfig memory;
  DistConfig dist;

  template <class V>
  void visit_sections(V& v) {
    v("model", model);
    v("train", train);
    v("optim", optim);
    v("bcd", bcd);
    v("data", data);
    v("sample", sample);
    v("memory", memory);
    v("dist", dist);
  }
};

// Reads FILE (if not empty), then applies overrides of the form "section.key=value"
// (with or without a leading "--"). Values are parsed as TOML, falling back to a string.
// Relative paths inside the file stay relative to the working directory.
Config load_config(const std::string& file, const std::vector<std::string>& overrides);
// The same from TOML text already read (e.g. the config stored in a checkpoint).
Config load_config_text(const std::string& text, const std::string& source, const std::vector<std::string>& overrides);

// Applies TOML text onto cfg; `source` names the file or flag in errors.
void apply_config_text(Config& cfg, const std::string& toml_text, const std::string& source);

// Checks cross-field constraints (positive sizes, divisibility, known enum values).
void validate_config(const Config& cfg);

// "section.key" -> its resume class, for every key (from the keys' declarations).
std::vector<std::pair<std::string, Resume>> resume_classes();

// The whole config as TOML text, every key present (written to <run_dir>/config.toml).
std::string config_to_toml(const Config& cfg);

// Every key as ("section.key", its value as config.toml writes it: 0.002, 'runs/a', [ 1, 2 ]),
// in declaration order: what ranks compare before they train (dist/run_identity.h).
std::vector<std::pair<std::string, std::string>> config_values(Config& cfg);

// Markdown reference of every key with its default and doc line.
std::string config_reference();

}  // namespace bcd
