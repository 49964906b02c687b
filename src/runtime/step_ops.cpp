// The step's optimizer glue (step_ops.h).
#include "runtime/step_ops.h"

#include <chrono>

#include "runtime/flops.h"

namespace bcd {

void StepOps::switch_unit() {
  p_.opt.activate(p_.sched.current());
}

void StepOps::prefetch() {
  if (p_.cfg.memory.prefetch) p_.opt.prefetch(p_.sched.lookahead(static_cast<int>(p_.cfg.memory.prefetch_depth)));
}

int StepOps::grad_from() const { return p_.cfg.bcd.enabled ? p_.units[p_.sched.current()].lowest_block() : 0; }

void StepOps::arm_reduction() {
  static const std::vector<GradRange> kNotSharded;  // every range summed on every rank
  if (p_.reducer) p_.reducer->arm(p_.model, p_.shards > 1 ? p_.opt.grad_ranges() : kNotSharded);
}

void StepOps::reduce_gradients() {
  if (p_.reducer) p_.reducer->finish();
}

torch::Tensor StepOps::clip_gradients() {
  if (p_.shards == 1) return clip_grad_norm(p_.model, p_.cfg.train.grad_clip);
  std::vector<GradRange> mine;
  for (const GradRange& g : p_.opt.grad_ranges())
    if (g.rank == p_.pg.rank()) mine.push_back(g);
  return clip_grad_norm(p_.model, p_.cfg.train.grad_clip, mine,
                        [&](const torch::Tensor& sq) { p_.pg.wait_for(p_.pg.start_all_reduce_sum(sq)); });
}

void StepOps::accumulate_gradients(bool final_micro_batch) {
  if (!(final_micro_batch && p_.reducer)) p_.model.accumulate_grads();
}

bool StepOps::can_run_ahead(int64_t step) const {
  const Config& c = p_.cfg;
  return p_.reducer && c.dist.overlap_forward && c.bcd.enabled && grad_from() > 0 && step < c.train.steps &&
         p_.sched.step_in_visit() + 1 < static_cast<uint64_t>(p_.sched.switch_every());
}

void StepOps::update(double lr) {
  p_.opt.step(lr);
  if (p_.opt.shard_count() == 1) return;
  const auto t0 = std::chrono::steady_clock::now();
  const torch::Tensor mine = p_.opt.owned_weights();
  const torch::Tensor all = torch::empty({mine.numel() * p_.pg.world_size()}, mine.options());
  // bf16 travels as fp16 bit patterns (a gather copies bytes; every backend carries fp16).
  const auto wire = [](const torch::Tensor& t) { return t.scalar_type() == torch::kBFloat16 ? t.view(torch::kHalf) : t; };
  p_.pg.all_gather(wire(mine), wire(all));
  p_.opt.set_gathered_weights(all);
  gather_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double StepOps::step_flops() const {
  return micro_batch_flops(p_.model, grad_from(), p_.cfg.train.batch_size, p_.cfg.train.seq_len).total() *
         static_cast<double>(p_.cfg.train.grad_accum);
}

}  // namespace bcd
