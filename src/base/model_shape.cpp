// The model's shape (base/model_shape.h): slot tables, block layouts, BCD units.
#include "base/model_shape.h"

#include <algorithm>
#include <numeric>

#include "base/error.h"

namespace bcd {

namespace {

int64_t round_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

// A shape from a flag or a file is refused before anything is sized by it when no machine could
// hold it: element counts must stay far from int64 overflow and the per-block tables small.
void check_shape_bounds(const ModelConfig& cfg) {
  constexpr int64_t kMaxLayers = int64_t{1} << 16;
  constexpr double kMaxElems = static_cast<double>(int64_t{1} << 50);  // 4 PiB of fp32
  if (cfg.n_layers > kMaxLayers)
    user_error("model: n_layers {} is beyond any model a machine holds (at most {})", cfg.n_layers, kMaxLayers);
  const double params = cfg.n_params();
  if (params > kMaxElems)
    user_error("model: {} layers of d_model {}, d_ff {} with vocab_size {} make {:.3g} parameters, beyond any "
               "machine (at most 2^50)",
               cfg.n_layers, cfg.d_model, cfg.ff_dim(), cfg.vocab_size, params);
  if (cfg.max_seq_len > kMaxPositions)
    user_error("model: max_seq_len {} is beyond any model's context (the longest released is 10M positions); at "
               "most {}",
               cfg.max_seq_len, kMaxPositions);
}

}  // namespace

int64_t rope_table_positions(const ModelConfig& cfg, int64_t tokens) {
  constexpr int64_t kStep = 4096;
  const int64_t want = (std::max<int64_t>(tokens, 1) + kStep - 1) / kStep * kStep;
  return std::min(want, cfg.max_seq_len);
}

bool grad_summed_directly(const SlotShape& s) { return s.shape.size() == 2; }

int64_t SlotShape::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const char* name_of(Part p) {
  switch (p) {
    case Part::kAttn: return "attn";
    case Part::kMlp: return "mlp";
    case Part::kNone: break;
  }
  return "";
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
  constexpr Part kAttn = Part::kAttn, kMlp = Part::kMlp, kNone = Part::kNone;
  if (block == 0) return {{slot::kTokEmbeddings, {v, c}, true, kNone}};
  if (block == model_block_count(cfg) - 1) {
    std::vector<SlotShape> head = {{slot::kNorm, {c}, false, kNone}};
    if (!cfg.tie_embeddings) head.push_back({slot::kOutput, {v, c}, true, kNone});
    return head;
  }
  std::vector<SlotShape> s = {
      {slot::kAttnNorm, {c}, false, kAttn}, {slot::kWq, {h * d, c}, true, kAttn}, {slot::kWk, {kv * d, c}, true, kAttn},
      {slot::kWv, {kv * d, c}, true, kAttn}, {slot::kWo, {c, h * d}, true, kAttn},
  };
  if (cfg.qkv_bias) {
    s.push_back({slot::kBq, {h * d}, false, kAttn});
    s.push_back({slot::kBk, {kv * d}, false, kAttn});
    s.push_back({slot::kBv, {kv * d}, false, kAttn});
  }
  if (cfg.qk_norm) {
    s.push_back({slot::kQNorm, {d}, false, kAttn});
    s.push_back({slot::kKNorm, {d}, false, kAttn});
  }
  s.push_back({slot::kMlpNorm, {c}, false, kMlp});
  s.push_back({slot::kWGate, {f, c}, true, kMlp});
  s.push_back({slot::kWUp, {f, c}, true, kMlp});
  s.push_back({slot::kWDown, {c, f}, true, kMlp});
  return s;
}


BlockShape layout_block(std::string name, const std::vector<SlotShape>& slots) {
  // The rank of a slot: its part's first appearance, then decayed before not decayed; stable, so
  // the layout is a pure function of the slot table.
  std::vector<Part> parts;
  for (const auto& s : slots)
    if (std::find(parts.begin(), parts.end(), s.part) == parts.end()) parts.push_back(s.part);
  auto rank = [&](const SlotShape& s) {
    return 2 * (std::find(parts.begin(), parts.end(), s.part) - parts.begin()) + (s.decay ? 0 : 1);
  };
  BlockShape b;
  b.name = std::move(name);
  b.order.resize(slots.size());
  std::iota(b.order.begin(), b.order.end(), 0);
  std::stable_sort(b.order.begin(), b.order.end(),
                   [&](int64_t x, int64_t y) { return rank(slots[x]) < rank(slots[y]); });
  b.offsets.assign(slots.size(), 0);
  int64_t off = 0;
  for (size_t i = 0; i < b.order.size(); ++i) {
    const SlotShape& s = slots[b.order[i]];
    if (i == 0 || rank(s) != rank(slots[b.order[i - 1]])) {
      off = round_up(off, kBlockAlign);
      if (!b.segments.empty()) b.segments.back().end = off;
      b.segments.push_back({s.part, s.decay, off, off});
    }
    b.offsets[b.order[i]] = off;
    off += s.numel();
    b.params += s.numel();
  }
  b.numel = round_up(off, kBlockAlign);
  if (!b.segments.empty()) b.segments.back().end = b.numel;
  return b;
}

std::vector<BlockShape> block_shapes(const ModelConfig& cfg) {
  if (cfg.vocab_size <= 0) user_error("plan: [model] vocab_size must be set (> 0) to plan memory");
  check_shape_bounds(cfg);
  std::vector<BlockShape> out;
  for (int b = 0; b < model_block_count(cfg); ++b) out.push_back(layout_block(model_block_name(cfg, b), model_block_slots(cfg, b)));
  return out;
}

int64_t count_params(const ModelConfig& cfg) {
  int64_t n = 0;
  for (const auto& b : block_shapes(cfg)) n += b.params;
  return n;
}

int UnitShape::lowest_block() const {
  int b = pieces.empty() ? 0 : pieces.front().block;
  for (const auto& p : pieces) b = std::min(b, p.block);
  return b;
}

int64_t autograd_elems(const ModelConfig& model, const BlockShape& block, const UnitPieceShape& p) {
  // As Block::set_trainable lays autograd's buffer out with direct sums.
  const std::vector<SlotShape> slots = model_block_slots(model, p.block);
  int64_t n = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t at = block.offsets[i];
    const bool whole = at >= p.begin && at + slots[i].numel() <= p.end;
    if (whole && (p.part == Part::kNone || slots[i].part == p.part) && !grad_summed_directly(slots[i]))
      n += slots[i].numel();
  }
  return n;
}

std::vector<UnitShape> unit_shapes(const ModelConfig& model, const BcdConfig& cfg) {
  const std::vector<BlockShape> blocks = block_shapes(model);
  const int n_blocks = static_cast<int>(blocks.size());
  const int n_layers = static_cast<int>(model.n_layers);
  auto whole = [&](int b) { return UnitPieceShape{b, Part::kNone, 0, blocks[b].numel}; };
  // A part's segments are contiguous (Block lays slots out by part): its gradient spans them only.
  auto part_of = [&](int b, Part part) {
    UnitPieceShape p{b, part, blocks[b].numel, 0};
    for (const SegmentShape& s : blocks[b].segments)
      if (s.part == part) p.begin = std::min(p.begin, s.begin), p.end = std::max(p.end, s.end);
    return p;
  };
  std::vector<UnitShape> units;
  // Vocabulary slices of the matrix that starts at element `at` of block `b`: slice k is rows
  // [vocab_slice_row(k), vocab_slice_row(k + 1)); the last runs on to the block's end.
  const int64_t v = model.vocab_size, c = model.d_model, n = cfg.vocab_slices;
  auto slices = [&](const std::string& name, int b, int64_t at, int first_layer) {
    if (n == 1) {
      units.push_back({name, {whole(b)}, first_layer, 0, 0});
      return;
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t begin = at + cfg.vocab_slice_row(v, k) * c;
      const int64_t end = k + 1 == n ? blocks[b].numel : at + cfg.vocab_slice_row(v, k + 1) * c;
      units.push_back({name + "." + std::to_string(k), {{b, Part::kNone, begin, end}}, first_layer, 0, 0});
    }
  };
  if (!cfg.enabled || cfg.blocks == BlockKind::kWhole) {
    UnitShape u{"model", {}, 0, 0, 0};
    for (int i = 0; i < n_blocks; ++i) u.pieces.push_back(whole(i));
    units.push_back(u);
  } else {
    if (n > v)
      user_error("config: [bcd] vocab_slices: {} slices of a vocabulary of {} rows; expected at most {}", n, v, v);
    if (cfg.include_embed) slices("embed", 0, 0, 0);
    if (cfg.blocks == BlockKind::kAttnMlp) {
      for (int l = 0; l < n_layers; ++l)
        for (Part part : {Part::kAttn, Part::kMlp})
          units.push_back({"layer." + std::to_string(l) + "." + name_of(part), {part_of(l + 1, part)}, l, 0, 0});
    } else {
      const int g = static_cast<int>(std::min<int64_t>(cfg.layers_per_block, std::max(n_layers, 1)));
      for (int l = 0; l < n_layers; l += g) {
        const int end = std::min(n_layers, l + g);
        UnitShape u;
        u.name = end - l == 1 ? "layer." + std::to_string(l)
                              : "layers." + std::to_string(l) + "-" + std::to_string(end - 1);
        u.first_layer = l;
        for (int k = l; k < end; ++k) u.pieces.push_back(whole(k + 1));
        units.push_back(u);
      }
    }
    if (cfg.include_head) {
      // The head's matrix (untied) is its decayed segment; tied, the head is the final norm alone.
      const BlockShape& head = blocks[n_blocks - 1];
      if (model.tie_embeddings) units.push_back({"head", {whole(n_blocks - 1)}, n_layers, 0, 0});
      else slices("head", n_blocks - 1, head.segments.front().begin, n_layers);
    }
    if (units.empty()) user_error("config: [bcd] leaves no block to train (include_embed/include_head and layers)");
  }
  for (auto& u : units) {
    for (const auto& p : u.pieces) {
      for (const auto& s : blocks[p.block].segments)
        if (p.part == Part::kNone || s.part == p.part)
          u.state_elems += std::max<int64_t>(0, std::min(s.end, p.end) - std::max(s.begin, p.begin));
      u.grad_elems += p.end - p.begin;
      u.autograd_elems += autograd_elems(model, blocks[p.block], p);
    }
  }
  return units;
}


}  // namespace bcd
