// Memory planner: activations, home tiers and budget checks, rotary tables and shard ranges; the
// report `bcdtrain plan` prints: plan_report.cpp.
#include "memory/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "base/error.h"

namespace bcd {

namespace {

// Bytes from a floating-point estimate, held below 2^62 so that sums of a few never wrap.
uint64_t saturated_bytes(double b) {
  constexpr double kMax = static_cast<double>(uint64_t{1} << 62);
  return b >= kMax ? uint64_t{1} << 62 : static_cast<uint64_t>(std::max(b, 0.0));
}

}  // namespace

std::string plan_detail::gib(uint64_t b) {
  const double x = static_cast<double>(b);
  if (x >= kGiB / 100) return fmt::format("{:.2f} GiB", x / kGiB);
  if (x >= 1024.0 * 1024.0 / 100) return fmt::format("{:.2f} MiB", x / (1024.0 * 1024.0));
  return fmt::format("{} bytes", b);
}

using namespace plan_detail;

// ---- Activations ----

// Bytes kept for backward while unit u is active, conservative (DESIGN.md §4: layers below
// the unit run without autograd). B = batch, T = seq_len, C = d_model, F = d_ff, H = heads,
// V = vocab, w = working dtype bytes, n = layers at or above the unit's first layer.
//   per layer   A = B*T * (w * (10*C + 6*Q + 4*F) + N + S), Q = H*D the attention's width
//                 (C unless the head dim is set apart from C/H): 10*C + 6*Q (16*C when Q = C):
//                 norm inputs/outputs (fp32 in RMSNorm), q/k/v, rotary copies, GQA repeats,
//                 attention output, residuals; 4*F: gate, up, silu(gate), product;
//                 N = 8*(Q + KV*D), with q/k norms: their fp32 inputs and outputs;
//                 S, attention's own: (2w+4)*H*T when scores are materialised (matmul + softmax:
//                 scores (w), fp32 softmax probs (4) and their cast back (w)), else 4*H (a fused
//                 kernel keeps one fp32 log-sum-exp per row; no T x T buffer).
//   logits      K*V * (w + 2*4)     one chunk of K tokens (ModelConfig::loss_chunk) of the fused head
//               + B*T*C*w           + loss: working-dtype logits, their fp32 copy and gradient; and
//                                   the final hidden states' gradient, computed in the forward pass
//   no checkpointing:   n*A + logits
//   checkpointing:      n * B*T*C*w (each layer's input) + A (one layer recomputed) + logits
uint64_t estimate_activation_bytes(const ModelConfig& m, const TrainConfig& t, const UnitShape& u, bool fused_attention) {
  const double w = t.dtype == Dtype::kBf16 ? 2.0 : 4.0;
  const double bt = static_cast<double>(t.batch_size) * static_cast<double>(t.seq_len);
  const double c = static_cast<double>(m.d_model), f = static_cast<double>(m.ff_dim());
  const double h = static_cast<double>(m.n_heads), tt = static_cast<double>(t.seq_len);
  const double q = h * static_cast<double>(m.head_dim()), kvd = static_cast<double>(m.kv_heads() * m.head_dim());
  const double n = static_cast<double>(std::max<int64_t>(0, m.n_layers - u.first_layer));
  const double scores = fused_attention ? 4 * h : (2 * w + 4) * h * tt;
  const double qk_norms = m.qk_norm ? 8 * (q + kvd) : 0.0;
  const double layer = bt * (w * (10 * c + 6 * q + 4 * f) + qk_norms + scores);
  const double chunk = static_cast<double>(m.loss_chunk(t.batch_size * t.seq_len, static_cast<int64_t>(w)));
  const double logits = chunk * static_cast<double>(m.vocab_size) * (w + 8) + bt * c * w;
  double total;
  if (m.activation_checkpointing) total = n * bt * c * w + (n > 0 ? layer : 0.0) + logits;
  else total = n * layer + logits;
  return saturated_bytes(total);
}

// ---- Budgets ----

CudaReserve cuda_runtime_reserve(int world_ranks) {
  return CudaReserve{kCudaContextBytes, kCublasWorkspaceBytes, world_ranks > 1 ? kNcclBytes : 0};
}

uint64_t TierUsage::total() const {
  uint64_t t = activations + staging + reserved;
  for (uint64_t b : by_kind) t += b;
  return t;
}

uint64_t MemoryPlan::home_bytes(Tier tier, StateKind k) const {
  uint64_t n = 0;
  for (const auto& b : blocks) {
    const StatePlacement& p = b.at(k);
    if (p.has_home && p.home == tier) n += p.bytes;
  }
  return n;
}

// ---- Planning ----

namespace {

// What every phase of plan_memory reads: its arguments, the model's blocks and the byte rules of
// this run's dtype, optimizer and sharding.
struct PlanInputs {
  const ModelConfig& model;
  const BcdConfig& bcd;
  const TrainConfig& train;
  const MemoryConfig& mem;
  bool fused_attention;
  int local_ranks;
  StreamRates rates;
  int shards;
  std::vector<BlockShape> shapes;
  bool single = false;           // one unit: the active unit never changes, all of it on compute
  bool separate_master = false;  // bf16 working weights: an fp32 master beside them
  bool keep_moments = false;     // moments kept between visits (need a home)
  uint64_t w = 4;                // working bytes per element

  // A unit's gradient buffers while active: autograd's in the working dtype over its window, or
  // with bf16 the fp32 sum over the window and autograd's only where the trainer's pass does not
  // sum directly (model/block.h: set_direct_sums).
  uint64_t grad_bytes(int64_t window, int64_t autograd) const {
    const auto g = static_cast<uint64_t>(window);
    return separate_master ? g * 4 + static_cast<uint64_t>(autograd) * w : g * w;
  }
  uint64_t grad_bytes(const UnitShape& u) const { return grad_bytes(u.grad_elems, u.autograd_elems); }

  // This rank's elements of a unit's (or block's) state: the largest slice (optim/block_optimizer.h).
  uint64_t own(int64_t elems) const { return static_cast<uint64_t>(shard_range(elems, 0, shards).len); }
  // A unit's bytes of the kinds that need an off-compute home between visits.
  uint64_t offloaded(int64_t elems) const {
    return single ? 0 : own(elems) * 4 * ((separate_master ? 1 : 0) + (keep_moments ? 2 : 0));
  }
};

int kind(StateKind k) { return static_cast<int>(k); }

// Compute tier: all working weights; room for the largest unit's master/m/v (one flat image)
// and for the largest unit's gradient buffers; activations of the deepest unit.
void plan_compute(const PlanInputs& in, MemoryPlan& plan) {
  uint64_t best = 0, max_state = 0, max_grad = 0;
  for (size_t i = 0; i < plan.units.size(); ++i) {
    const UnitShape& u = plan.units[i];
    const uint64_t st = in.own(u.state_elems) * 4;
    const uint64_t s = st * (in.separate_master ? 3 : 2) + in.grad_bytes(u);
    if (i == 0 || s > best) best = s, plan.largest_unit = static_cast<int>(i);
    max_state = std::max(max_state, st);
    max_grad = std::max(max_grad, in.grad_bytes(u));
  }
  for (const auto& s : in.shapes) plan.compute.by_kind[kind(StateKind::kWorking)] += static_cast<uint64_t>(s.numel) * in.w;
  plan.compute.by_kind[kind(StateKind::kWorking)] += rope_table_bytes(in.model, in.train.dtype, in.train.seq_len);
  plan.compute.by_kind[kind(StateKind::kMaster)] = in.separate_master ? max_state : 0;
  plan.compute.by_kind[kind(StateKind::kAdamM)] = max_state;
  plan.compute.by_kind[kind(StateKind::kAdamV)] = max_state;
  plan.compute.by_kind[kind(StateKind::kGrad)] = max_grad;
  plan.activations_estimated = in.mem.activation_bytes.is_auto;
  uint64_t act = 0;
  for (size_t i = 0; i < plan.units.size(); ++i) {
    const uint64_t a = estimate_activation_bytes(in.model, in.train, plan.units[i], in.fused_attention);
    if (i == 0 || a > act) act = a, plan.deepest_unit = static_cast<int>(i);
  }
  plan.compute.activations = in.mem.activation_bytes.is_auto ? act : in.mem.activation_bytes.value;
  plan.compute.budget = in.mem.compute_bytes.value;
}

// With streamed weights and grad_accum > 1 a step first runs every micro-batch through the
// frozen layers below the active unit while each is on the compute tier (runtime/trainer.cpp),
// so a unit above layer 0 holds the other micro-batches' prefix outputs (B x T x C each) while it
// trains the first: (grad_accum - 1) of them on top of one micro-batch's activations.
uint64_t held_prefix_bytes(const PlanInputs& in, const UnitShape& u) {
  if (in.train.grad_accum <= 1 || u.first_layer < 1) return 0;
  const double w = in.train.dtype == Dtype::kBf16 ? 2.0 : 4.0;
  return saturated_bytes(static_cast<double>(in.train.grad_accum - 1) * static_cast<double>(in.train.batch_size) *
                         static_cast<double>(in.train.seq_len) * static_cast<double>(in.model.d_model) * w);
}

// Streamed weights (memory.stream_weights): "on" streams every decoder layer; "auto" only when
// the all-resident compute tier is over budget, and then the fewest bottom layers that make it
// fit, keeping the top ones resident (used twice per micro-batch above the active unit).
void plan_stream(const PlanInputs& in, MemoryPlan& plan, std::vector<std::string>& why) {
  const int n_layers = static_cast<int>(in.model.n_layers);
  const uint64_t resident_all = plan.compute.by_kind[kind(StateKind::kWorking)];
  // The activations once layers stream: the held prefixes counted (estimated activations only).
  uint64_t act = plan.compute.activations;
  int deepest = plan.deepest_unit;
  if (in.mem.activation_bytes.is_auto)
    for (size_t i = 0; i < plan.units.size(); ++i) {
      const uint64_t a =
          estimate_activation_bytes(in.model, in.train, plan.units[i], in.fused_attention) + held_prefix_bytes(in, plan.units[i]);
      if (i == 0 || a > act) act = a, deepest = static_cast<int>(i);
    }
  // state, gradient, activations (with streaming)
  const uint64_t others = plan.compute.total() - resident_all - plan.compute.activations + act;
  const int depth = static_cast<int>(in.mem.stream_depth);
  auto layout = [&](int n) { return stream_layout(in.shapes, plan.units, n, in.w, depth, in.local_ranks); };
  auto need = [&](const StreamPlan& s) { return resident_all - s.home_bytes + s.window_bytes() + s.active_bytes + others; };
  int n_streamed = 0;
  if (in.mem.stream_weights == StreamWeights::kOn) {
    n_streamed = n_layers;
  } else if (in.mem.stream_weights == StreamWeights::kAuto && plan.compute.total() > plan.compute.budget &&
             n_layers > 0) {
    const StreamPlan all = layout(n_layers);
    if (!in.model.activation_checkpointing) {
      why.push_back("the weights do not fit the compute tier, and streaming frozen layers' weights from host memory "
                    "(memory.stream_weights = auto) needs model.activation_checkpointing = true");
    } else if (need(all) > plan.compute.budget) {
      why.push_back(fmt::format(
          "memory.stream_weights = auto: even with all {} decoder layers' weights streamed from host memory the "
          "compute tier needs {} (the embedding, the LM head and rotary tables {} + stream window {} x {} + active buffer {} + "
          "active unit state and activations {})",
          n_layers, gib(need(all)), gib(resident_all - all.home_bytes), all.depth, gib(all.slot_bytes),
          gib(all.active_bytes), gib(others)));
    } else {
      // need(n) does not grow with n >= 1: one more streamed layer frees its bytes and adds at most
      // as many to the active buffer, and the slot (decoder layers are alike) is set by the first.
      int lo = 1, hi = n_layers;
      while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (need(layout(mid)) <= plan.compute.budget) hi = mid;
        else lo = mid + 1;
      }
      n_streamed = lo;
    }
  }
  plan.stream = layout(n_streamed);
  if (!plan.stream.on()) return;
  plan.compute.activations = act, plan.deepest_unit = deepest;
  plan.compute.by_kind[kind(StateKind::kWorking)] = need(plan.stream) - others;
  plan.stream.gbps = in.mem.stream_gbps > 0 ? in.mem.stream_gbps : in.rates.gbps;
  plan.stream.tflops = in.mem.stream_tflops > 0 ? in.mem.stream_tflops : in.rates.tflops;
  plan.stream.nvme_gbps = in.mem.stream_nvme_gbps > 0 ? in.mem.stream_nvme_gbps : in.rates.nvme_gbps;
  if (!in.model.activation_checkpointing)
    why.push_back("memory.stream_weights = on streams frozen layers' weights, which needs "
                  "model.activation_checkpointing = true (backward recomputes each layer with its weights fetched "
                  "again)");
}

// Pinned staging pool: prefetch_depth slabs coming in plus one going out, each the largest
// unit's image rounded up to 4 KiB (slabs are O_DIRECT buffers). Returns that image's size.
uint64_t plan_staging(const PlanInputs& in, MemoryPlan& plan) {
  uint64_t unit_off = 0;
  for (const auto& u : plan.units) unit_off = std::max(unit_off, in.offloaded(u.state_elems));
  unit_off = (unit_off + 4095) / 4096 * 4096;
  plan.pinned.staging =
      unit_off > 0 ? saturated_bytes((static_cast<double>(in.mem.prefetch_depth) + 1) * static_cast<double>(unit_off)) : 0;
  return unit_off;
}

// Streamed weights' homes (memory.stream_home): host memory first, one copy per machine, for the
// top streamed layers (the most used); what does not fit goes to the NVMe tier, each rank its own
// copy, read through depth + 1 pinned buffers (one per window buffer, one for switches and
// checkpoints). The stream model then runs at the homes' rates.
void plan_stream_homes(const PlanInputs& in, MemoryPlan& plan, uint64_t host_all) {
  if (!plan.stream.on()) return;
  const MemoryConfig& mem = in.mem;
  StreamPlan& s = plan.stream;
  const uint64_t sharers = static_cast<uint64_t>(s.sharers);
  auto share = [&](uint64_t b) { return (b + sharers - 1) / sharers; };
  const uint64_t stage = static_cast<uint64_t>(s.depth + 1) * ((s.slot_bytes + 4095) / 4096 * 4096);
  const uint64_t pinned_units = mem.pinned_bytes.is_auto ? plan.pinned.staging : mem.pinned_bytes.value;
  const uint64_t avail_all = host_all > pinned_units ? host_all - pinned_units : 0;
  if (mem.stream_home == Home::kNvme || (mem.stream_home == Home::kAuto && share(s.home_bytes) > avail_all)) {
    const uint64_t avail = mem.stream_home == Home::kNvme ? 0
                           : !mem.pinned_bytes.is_auto     ? avail_all
                           : avail_all > stage             ? avail_all - stage
                                                           : 0;
    uint64_t host = 0;
    for (int b = static_cast<int>(in.model.n_layers); b >= 1; --b) {
      if (!s.streamed[b]) continue;
      const uint64_t bytes = static_cast<uint64_t>(in.shapes[b].numel) * in.w;
      if (mem.stream_home == Home::kAuto && share(host + bytes) <= avail) {
        host += bytes;
      } else {
        s.home[b] = Tier::kNvme;
        s.nvme_bytes += bytes;
      }
    }
    if (s.nvme_bytes > 0) s.staging_bytes = stage, plan.pinned.staging += stage;
  }
  plan.host.by_kind[kind(StateKind::kWorking)] = share(s.host_bytes());
  plan.nvme.by_kind[kind(StateKind::kWorking)] = s.nvme_bytes;
  model_stream(s, in.shapes, plan.units, in.model, in.train, in.w);
}

// Units' homes: first fit by unit in host memory (a unit moves as one I/O), the rest on NVMe;
// memory.home = "host" or "nvme" places every unit there. The streamed weights come first (read
// every step); units get what is left of host memory, which this returns.
uint64_t plan_unit_homes(const PlanInputs& in, MemoryPlan& plan) {
  const uint64_t host_weights = plan.host.by_kind[kind(StateKind::kWorking)];
  const uint64_t host_units = plan.host.budget > host_weights ? plan.host.budget - host_weights : 0;
  uint64_t host_used = 0;
  for (const UnitShape& u : plan.units) {
    const uint64_t bytes = in.offloaded(u.state_elems);
    Tier home = Tier::kPinned;
    if (in.mem.home == Home::kNvme) home = Tier::kNvme;
    else if (in.mem.home == Home::kAuto && host_used + bytes > host_units) home = Tier::kNvme;
    if (bytes > 0 && home == Tier::kPinned) host_used += bytes;
    plan.unit_home.push_back(home);
    const uint64_t st = in.own(u.state_elems) * 4;
    TierUsage& t = home == Tier::kPinned ? plan.host : plan.nvme;
    if (!in.single) {
      if (in.separate_master) t.by_kind[kind(StateKind::kMaster)] += st;
      if (in.keep_moments) t.by_kind[kind(StateKind::kAdamM)] += st, t.by_kind[kind(StateKind::kAdamV)] += st;
    }
  }
  return host_units;
}

// Per block: the same placements, for the report (a block split into attn/mlp units or vocabulary
// slices shows the home of its last unit and the gradient of its largest; the tier totals are
// exact either way).
void plan_blocks(const PlanInputs& in, MemoryPlan& plan) {
  const std::vector<BlockShape>& shapes = in.shapes;
  std::vector<int> block_unit(shapes.size(), -1);  // a unit training (part of) each block
  std::vector<int64_t> trained(shapes.size(), 0);
  std::vector<uint64_t> grads(shapes.size(), 0);  // bytes
  for (size_t i = 0; i < plan.units.size(); ++i)
    for (const auto& p : plan.units[i].pieces) {
      block_unit[p.block] = static_cast<int>(i);
      for (const auto& s : shapes[p.block].segments)
        if (p.part == Part::kNone || s.part == p.part)
          trained[p.block] += std::max<int64_t>(0, std::min(s.end, p.end) - std::max(s.begin, p.begin));
      grads[p.block] =
          std::max(grads[p.block], in.grad_bytes(p.end - p.begin, autograd_elems(in.model, shapes[p.block], p)));
    }
  for (size_t b = 0; b < shapes.size(); ++b) {
    BlockPlan bp;
    bp.name = shapes[b].name;
    bp.params = shapes[b].params;
    bp.numel = shapes[b].numel;
    bp.state[kind(StateKind::kWorking)] = {static_cast<uint64_t>(shapes[b].numel) * in.w, true,
                                           plan.stream.streamed[b] ? plan.stream.home[b] : Tier::kCompute};
    const uint64_t st = in.own(trained[b]) * 4;
    if (trained[b] > 0) {
      const Tier home = in.single ? Tier::kCompute : plan.unit_home[block_unit[b]];
      bp.state[kind(StateKind::kGrad)] = {grads[b], in.single, Tier::kCompute};
      if (in.separate_master) bp.state[kind(StateKind::kMaster)] = {st, true, home};
      bp.state[kind(StateKind::kAdamM)] = {st, in.keep_moments, home};
      bp.state[kind(StateKind::kAdamV)] = {st, in.keep_moments, home};
    }
    plan.blocks.push_back(bp);
  }
}

// What the verdict weighs beyond the plan itself.
struct VerdictFacts {
  uint64_t host_all = 0;    // memory.host_bytes (or MemAvailable)
  uint64_t host_units = 0;  // host memory left for units' homes
  uint64_t unit_off = 0;    // one staging slab
};

// ---- Verdict: every reason the plan does not fit, after the ones found while planning ----
void plan_verdict(const PlanInputs& in, MemoryPlan& plan, const VerdictFacts& f, std::vector<std::string>& why) {
  const MemoryConfig& mem = in.mem;
  const TrainConfig& train = in.train;
  const StreamPlan& sp = plan.stream;
  const uint64_t host_weights = plan.host.by_kind[kind(StateKind::kWorking)];
  if (plan.compute.total() > plan.compute.budget) {
    const uint64_t working = plan.compute.by_kind[kind(StateKind::kWorking)];
    const uint64_t state = plan.compute.total() - plan.compute.activations - working - plan.compute.reserved;
    const std::string streamed =
        sp.on() ? fmt::format(": resident {} + stream window {} x {} + active buffer {}",
                              gib(working - sp.window_bytes() - sp.active_bytes), sp.depth, gib(sp.slot_bytes),
                              gib(sp.active_bytes))
                : "";
    why.insert(why.begin(), fmt::format(
        "compute tier needs {} (working weights {}{} + active unit '{}' master/m/v/grad {} + activations {} ({}){}) "
        "but memory.compute_bytes is {}",
        gib(plan.compute.total()), gib(working), streamed, plan.units[plan.largest_unit].name, gib(state),
        gib(plan.compute.activations),
        mem.activation_bytes.is_auto
            ? fmt::format("estimated for train.batch_size {} x train.seq_len {}", train.batch_size, train.seq_len)
            : "memory.activation_bytes",
        plan.compute.reserved ? fmt::format(" + the CUDA runtime's own {}", gib(plan.compute.reserved)) : "",
        gib(plan.compute.budget)));
  }
  if (host_weights > plan.host.budget)
    why.push_back(fmt::format("the streamed weights' host copy needs {} per rank ({} on the machine, shared by {} local "
                              "rank(s)) but memory.host_bytes minus the pinned pool leaves {}",
                              gib(host_weights), gib(sp.host_bytes()), sp.sharers, gib(plan.host.budget)));
  if (plan.pinned.staging > plan.pinned.budget)
    why.push_back(fmt::format("pinned staging pool needs {} ({} units of master+moments of {}{}) but memory.pinned_bytes is {}",
                              gib(plan.pinned.staging), mem.prefetch_depth + 1, gib(f.unit_off),
                              sp.staging_bytes > 0 ? fmt::format(", and {} to read NVMe-homed layers' weights through",
                                                                 gib(sp.staging_bytes))
                                                   : "",
                              gib(plan.pinned.budget)));
  if (sp.nvme_bytes > 0 && mem.nvme_paths.empty())
    why.push_back(fmt::format("{} of streamed layers' weights are homed on NVMe (memory.stream_home = \"{}\"{}) and "
                              "memory.nvme_paths is empty",
                              gib(sp.nvme_bytes), name_of(mem.stream_home),
                              mem.stream_home == Home::kAuto ? ": they do not fit host memory" : ""));
  if (plan.pinned.budget > f.host_all)
    why.push_back(fmt::format("memory.pinned_bytes {}{} exceeds memory.host_bytes {}", gib(plan.pinned.budget),
                              mem.pinned_bytes.is_auto
                                  ? fmt::format(" (auto: memory.prefetch_depth + 1 = {} units)", mem.prefetch_depth + 1)
                                  : "",
                              gib(f.host_all)));
  const std::string after_weights =
      host_weights > 0 ? fmt::format(", less {} for the streamed weights", gib(host_weights)) : "";
  if (mem.home == Home::kHost && plan.host.total() > plan.host.budget && host_weights <= plan.host.budget)
    why.push_back(fmt::format("memory.home = \"host\": master/moments need {} of host memory but {} is left for "
                              "resident copies (memory.host_bytes minus the pinned pool{})",
                              gib(plan.host.total() - host_weights), gib(f.host_units), after_weights));
  if (plan.nvme.total() - sp.nvme_bytes > 0 && mem.nvme_paths.empty())
    why.push_back(fmt::format("{} of master/moments do not fit host memory ({} for resident copies: memory.host_bytes "
                              "minus the pinned pool{}) and memory.nvme_paths is empty",
                              gib(plan.nvme.total() - sp.nvme_bytes), gib(f.host_units), after_weights));
  if (sp.on() && !sp.keeps_up && !mem.accept_slow_stream) {
    const UnitShape& slow = plan.units[sp.slowest_unit];
    why.push_back(fmt::format(
        "the weight stream cannot keep up: with unit '{}' active a step copies {} of streamed weights ({:.2f} s at "
        "{} GB/s) against {:.2f} s of layer compute at {:g} TFLOP/s, leaving {:.2f} s exposed (over 10% of "
        "compute); give a micro-batch more tokens (train.batch_size x train.seq_len, now {}), a faster link "
        "(memory.stream_gbps){}, fewer streamed layers, or memory.accept_slow_stream = true",
        slow.name, gib(sp.per_unit[sp.slowest_unit].bytes), sp.per_unit[sp.slowest_unit].copy_s,
        sp.nvme_bytes > 0 ? fmt::format("{:g} GB/s, NVMe-homed layers at {:g}", sp.gbps, sp.nvme_gbps)
                          : fmt::format("{:g}", sp.gbps),
        sp.compute_s_per_step, sp.tflops, sp.exposed_s_per_step, train.batch_size * train.seq_len,
        sp.nvme_bytes > 0 ? " or host memory for the NVMe-homed layers (memory.host_bytes)" : ""));
  }
  plan.fits = why.empty();
  for (size_t i = 0; i < why.size(); ++i) plan.why_not += (i ? "; " : "") + why[i];
}

}  // namespace

MemoryPlan plan_memory(const ModelConfig& model, const BcdConfig& bcd, const TrainConfig& train,
                       const MemoryConfig& mem, int shards, bool fused_attention, int local_ranks,
                       StreamRates rates, CudaReserve reserve) {
  // The machine's sizes come resolved by the caller (a run: its share of the machine): none is read here.
  BCD_CHECK(!mem.compute_bytes.is_auto && !mem.host_bytes.is_auto,
            "plan_memory: memory.compute_bytes and host_bytes must be resolved (auto: the machine's share) first");
  MemoryPlan plan;
  plan.reserve = reserve;
  plan.compute.reserved = reserve.total();
  plan.shards = std::max(shards, 1);
  PlanInputs in{model, bcd, train, mem, fused_attention, local_ranks, rates, plan.shards, block_shapes(model)};
  plan.units = unit_shapes(model, bcd);
  plan.params = count_params(model);
  in.single = plan.units.size() == 1;
  in.w = train.dtype == Dtype::kBf16 ? 2 : 4;
  in.separate_master = train.dtype != Dtype::kFp32;  // else the working buffer is the master
  in.keep_moments = in.single || bcd.state_on_switch == StateOnSwitch::kKeep;

  std::vector<std::string> why;
  plan_compute(in, plan);
  plan_stream(in, plan, why);
  VerdictFacts facts;
  facts.unit_off = plan_staging(in, plan);
  facts.host_all = mem.host_bytes.value;
  plan_stream_homes(in, plan, facts.host_all);
  plan.pinned.budget = mem.pinned_bytes.is_auto ? plan.pinned.staging : mem.pinned_bytes.value;
  plan.host.budget = facts.host_all > plan.pinned.budget ? facts.host_all - plan.pinned.budget : 0;
  plan.nvme.unlimited = true;
  facts.host_units = plan_unit_homes(in, plan);
  plan_blocks(in, plan);
  plan_verdict(in, plan, facts, why);
  return plan;
}

// ---- What the planner adds to the model's shape: rotary tables and shard ranges ----

uint64_t rope_table_bytes(const ModelConfig& m, Dtype dtype, int64_t seq_len) {
  const uint64_t w = dtype == Dtype::kBf16 ? 2 : 4;
  return 2 * static_cast<uint64_t>(rope_table_positions(m, seq_len)) * static_cast<uint64_t>(m.head_dim()) * w;
}

ShardRange shard_range(int64_t elems, int rank, int ranks) {
  BCD_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "shard_range: rank {} of {}", rank, ranks);
  ShardRange r;
  r.chunk = (elems + ranks - 1) / ranks;
  r.begin = std::min<int64_t>(static_cast<int64_t>(rank) * r.chunk, elems);
  r.len = std::min<int64_t>(r.chunk, elems - r.begin);
  return r;
}

}  // namespace bcd
