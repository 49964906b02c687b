// Chunked linear + cross entropy (model/fused_loss.h). Each chunk's logits are computed, reduced
// to the chunk's losses and, under autograd, turned in place into the softmax minus the one-hot
// target, scaled (the gradient of the logits), which is multiplied out into the hidden states'
// gradient and the weight's at once: no chunk outlives its iteration, and backward only scales.
#include "model/fused_loss.h"

#include <algorithm>

#include "base/error.h"
#include "model/matmul.h"

namespace bcd {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What losses and gradients are summed in: fp32, or fp64 for fp64 models (tests of gradients).
torch::ScalarType accumulation_type(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

// One chunk's logits in the accumulation type. A GPU's reduced-precision product writes them in
// fp32 straight from its fp32 accumulators (aten::mm.dtype): no working-dtype logits rounded and
// then cast. The CPU has no such product in LibTorch: the working-dtype matmul (as the unfused
// head computes it), then the cast the loss applies; those logits are released at once.
torch::Tensor chunk_logits(const torch::Tensor& h, const torch::Tensor& weight) {
  const torch::ScalarType acc = accumulation_type(weight);
  if (h.is_cuda() && weight.scalar_type() != acc && acc == torch::kFloat32) return at::mm(h, weight.t(), acc);
  torch::Tensor logits = gemm_mm(h, weight.t());
  return logits.scalar_type() == acc ? logits : logits.to(acc);
}

// Adds one chunk's share of the gradients of the loss sum_i scale[i] * CE_i: `p` holds the
// chunk's fp32 logits and is turned, in place, into d/d(logits) = (softmax - one_hot(target))
// * scale. Then grad_h_rows (undefined: not wanted) gets d/d(hidden) as the unfused
// head's backward computes it (that gradient in the working dtype through the working-dtype
// weight), and acc (undefined: not wanted) d/d(weight) summed in fp32 whatever the working dtype:
// of all V rows, or of acc.size(0) rows from acc_first_row. With bf16 working weights on a GPU
// the weight's product reads that working-dtype gradient and the bf16 hidden states on the
// tensor cores, accumulating in fp32 into the fp32 sum (as the unfused head's bf16 backward,
// but summed in fp32); an fp32 GEMM of fp32 copies ran ~15x slower on an H100-class GPU. The
// CPU has no such product in LibTorch (aten::addmm.dtype is CUDA's): it multiplies fp32 copies.
void chunk_gradients(torch::Tensor p, const torch::Tensor& lse, const torch::Tensor& targets, const torch::Tensor& scale,
                     const torch::Tensor& h, const torch::Tensor& weight, torch::Tensor grad_h_rows,
                     torch::Tensor acc, int64_t acc_first_row) {
  const int64_t len = p.size(0);
  p.sub_(lse.unsqueeze(1)).exp_();
  p.scatter_add_(1, targets.unsqueeze(1), torch::full({len, 1}, -1.0, p.options()));
  p.mul_(scale.unsqueeze(1));
  const bool full = weight.scalar_type() == p.scalar_type();
  const bool low_precision_product = !full && p.is_cuda() && acc.defined() && acc.scalar_type() == torch::kFloat32;
  const torch::Tensor pw = full ? p : p.to(weight.scalar_type());  // the gradient in the working dtype
  if (grad_h_rows.defined()) grad_h_rows.copy_(gemm_mm(pw, weight));
  if (acc.defined()) {
    const torch::Tensor& g = low_precision_product ? pw : p;
    const torch::Tensor rows = acc.size(0) == g.size(1) ? g : g.narrow(1, acc_first_row, acc.size(0));
    if (low_precision_product) add_product_in_fp32(acc, rows.t(), h);
    else gemm_addmm(acc, rows.t(), full ? h : h.to(p.scalar_type()));
  }
}

// Under autograd the gradients are computed in the forward pass, chunk by chunk, while each
// chunk's logits exist anyway: backward has nothing to recompute and costs no more than the
// unfused head's. Backward scales them by the output gradient (a device tensor: no sync). A
// weight gradient sent into the block's sum (weight_grad_sum) is already there: that caller
// backpropagates the returned loss as it is (output gradient 1), which is checked where the check
// costs no device sync (on the CPU).
struct ChunkedCrossEntropy : public torch::autograd::Function<ChunkedCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor hidden, torch::Tensor weight, torch::Tensor targets,
                               torch::Tensor scale, int64_t chunk, const torch::Tensor* sink, int64_t sink_first_row,
                               bool need_h, bool need_w, torch::Tensor /*anchor*/) {
    // (The sum comes by pointer: an undefined tensor cannot be an input of an autograd function.)
    const torch::Tensor weight_grad_sum = sink ? *sink : torch::Tensor();
    const int64_t n = hidden.size(0);
    const torch::ScalarType acc_type = accumulation_type(weight);
    torch::Tensor lse = torch::empty({n}, hidden.options().dtype(acc_type));
    torch::Tensor total = torch::zeros({}, hidden.options().dtype(acc_type));
    torch::Tensor grad_h = need_h ? torch::empty_like(hidden) : torch::Tensor();
    torch::Tensor acc;
    if (need_w)
      acc = weight_grad_sum.defined() ? weight_grad_sum : torch::zeros(weight.sizes(), weight.options().dtype(acc_type));
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t len = std::min(chunk, n - s);
      const torch::Tensor h = hidden.narrow(0, s, len), t = targets.narrow(0, s, len), sc = scale.narrow(0, s, len);
      torch::Tensor lf = chunk_logits(h, weight);
      const torch::Tensor l = torch::logsumexp(lf, 1);
      total.add_(((l - lf.gather(1, t.unsqueeze(1)).squeeze(1)) * sc).sum());
      if (need_h || need_w)
        chunk_gradients(std::move(lf), l, t, sc, h, weight, need_h ? grad_h.narrow(0, s, len) : torch::Tensor(), acc,
                        sink_first_row);
    }
    ctx->saved_data["grad_h"] = grad_h;
    ctx->saved_data["grad_w"] = weight_grad_sum.defined() ? torch::Tensor() : acc;
    ctx->saved_data["sunk"] = weight_grad_sum.defined() && need_w;
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return total;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    torch::Tensor grad_h = ctx->saved_data["grad_h"].toTensor(), grad_w = ctx->saved_data["grad_w"].toTensor();
    const bool sunk = ctx->saved_data["sunk"].toBool();
    const auto weight_dtype = static_cast<c10::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    ctx->saved_data.clear();
    const torch::Tensor& g = grad_out[0];
    if (sunk && g.device().is_cpu())
      BCD_CHECK(g.item<double>() == 1.0, "chunked cross entropy: the loss whose weight gradient went into the block's "
                                         "sum was backpropagated scaled by {} (expected as it is)", g.item<double>());
    if (grad_h.defined()) grad_h.mul_(g.to(grad_h.scalar_type()));
    if (grad_w.defined()) grad_w = grad_w.mul_(g.to(grad_w.scalar_type())).to(weight_dtype);
    return {grad_h, grad_w, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor chunked_linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                           const torch::Tensor& targets, const torch::Tensor& scale, int64_t chunk,
                                           const torch::Tensor& weight_grad_sum, int64_t sum_first_row) {
  BCD_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
            "chunked cross entropy: hidden ({} dims, {} columns) and weight ({} dims, {} columns) do not match",
            hidden.dim(), hidden.size(-1), weight.dim(), weight.size(-1));
  BCD_CHECK(targets.numel() == hidden.size(0) && scale.numel() == hidden.size(0) && chunk >= 1,
            "chunked cross entropy: {} targets, {} scales for {} tokens (chunk {})", targets.numel(), scale.numel(),
            hidden.size(0), chunk);
  const torch::ScalarType acc = accumulation_type(weight);
  BCD_CHECK(!weight_grad_sum.defined() ||
                (weight_grad_sum.dim() == 2 && weight_grad_sum.size(1) == weight.size(1) && sum_first_row >= 0 &&
                 sum_first_row + weight_grad_sum.size(0) <= weight.size(0) && weight_grad_sum.scalar_type() == acc),
            "chunked cross entropy: the weight's gradient sum must be {} rows [{}, +{}) of the weight's {} x {}",
            c10::toString(acc), sum_first_row, weight_grad_sum.defined() ? weight_grad_sum.size(0) : 0, weight.size(0),
            weight.size(1));
  const bool grad = torch::GradMode::is_enabled();
  const bool need_w = grad && (weight.requires_grad() || weight_grad_sum.defined());
  // A slice's rows when neither input requires grad (the head's matrix slice without its norm):
  // an empty anchor that does gives the loss a backward, so the caller's backward() runs.
  const torch::Tensor anchor =
      torch::empty({0}, hidden.options().requires_grad(need_w && !hidden.requires_grad() && !weight.requires_grad()));
  return ChunkedCrossEntropy::apply(hidden, weight, targets.reshape({-1}), scale.reshape({-1}).to(acc), chunk,
                                    weight_grad_sum.defined() ? &weight_grad_sum : nullptr, sum_first_row,
                                    grad && hidden.requires_grad(), need_w, anchor);
}

torch::Tensor chunked_cross_entropy_values(const torch::Tensor& hidden, const torch::Tensor& weight,
                                           const torch::Tensor& targets, int64_t chunk) {
  torch::NoGradGuard ng;
  const int64_t n = hidden.size(0);
  torch::Tensor out = torch::empty({n}, hidden.options().dtype(accumulation_type(weight)));
  const torch::Tensor t = targets.reshape({-1});
  for (int64_t s = 0; s < n; s += chunk) {
    const int64_t len = std::min(chunk, n - s);
    const torch::Tensor lf = chunk_logits(hidden.narrow(0, s, len), weight);
    out.narrow(0, s, len).copy_(torch::logsumexp(lf, 1) - lf.gather(1, t.narrow(0, s, len).unsqueeze(1)).squeeze(1));
  }
  return out;
}

}  // namespace bcd
