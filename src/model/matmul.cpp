// The model's matrix products (model/matmul.h): fp32 CPU GEMMs through oneDNN where faster.
#include "model/matmul.h"

#include <ATen/Config.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <string>
#include <vector>

#include "base/error.h"

// LibTorch's oneDNN GEMM: result = beta * result + alpha * mat1 @ mat2 (2-D, or 3-D batches),
// contiguous or transposed operands read in place. Exported by libtorch_cpu (TORCH_API) but its
// header is not installed, so declared here as ATen/native/mkldnn/Matmul.h declares it.
#if AT_MKLDNN_ENABLED() && TORCH_VERSION_MAJOR >= 2
#define BCD_HAVE_ONEDNN_MATMUL 1
namespace at::native {
TORCH_API void mkldnn_matmul(const at::Tensor& mat1, const at::Tensor& mat2, const at::Tensor& result, float beta,
                             float alpha);
}  // namespace at::native
#else
#define BCD_HAVE_ONEDNN_MATMUL 0
#endif

namespace bcd {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Whether the CPU runs AVX-512 (F, BW, VL, DQ: what oneDNN's avx512_core kernels need).
bool cpu_has_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool resolve(CpuMatmul choice) {
  switch (choice) {
    case CpuMatmul::kBlas: return false;
    case CpuMatmul::kOneDnn:
      if (!BCD_HAVE_ONEDNN_MATMUL)
        user_error("config: [train] cpu_matmul = \"onednn\": this LibTorch has no oneDNN GEMM (built without "
                   "MKLDNN); use \"auto\" or \"blas\"");
      return true;
    case CpuMatmul::kAuto: break;
  }
  return BCD_HAVE_ONEDNN_MATMUL && cpu_has_avx512();
}

std::atomic<bool>& onednn_flag() {
  static std::atomic<bool> flag{resolve(CpuMatmul::kAuto)};
  return flag;
}

bool use_onednn(const torch::Tensor& a, const torch::Tensor& b) {
  return a.device().is_cpu() && a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32 &&
         onednn_flag().load(std::memory_order_relaxed);
}

// out = beta * out + a @ b through oneDNN (out (n, m) contiguous; a, b 2-D).
void onednn_gemm(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& out, float beta) {
#if BCD_HAVE_ONEDNN_MATMUL
  if (out.numel() == 0) return;
  if (a.size(1) == 0) {  // an empty inner dimension: the product is zero
    if (beta == 0.0f) out.zero_();
    return;
  }
  at::native::mkldnn_matmul(a, b, out, beta, 1.0f);
#else
  (void)a, (void)b, (void)out, (void)beta;
  BCD_CHECK(false, "oneDNN GEMM chosen in a build without it");
#endif
}

torch::Tensor onednn_product(const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor out = torch::empty({a.size(0), b.size(1)}, a.options());
  onednn_gemm(a, b, out, 0.0f);
  return out;
}

std::string shape_of(const torch::Tensor& t) { return fmt::format("{}", fmt::join(t.sizes(), ", ")); }

// y = x w^T through oneDNN, with a backward through it too that computes only what is wanted.
struct OneDnnLinear : public torch::autograd::Function<OneDnnLinear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w) {
    ctx->save_for_backward({x, w});
    const torch::Tensor x2 = x.reshape({-1, x.size(-1)});
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape.back() = w.size(0);
    return onednn_product(x2, w.t()).view(shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    const torch::Tensor g = grad_out[0].reshape({-1, w.size(0)});
    torch::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) dx = onednn_product(g, w).view(x.sizes());
    if (ctx->needs_input_grad(1)) dw = onednn_product(g.t(), x.reshape({-1, x.size(-1)}));
    return {dx, dw};
  }
};

// y = x w^T (+ b) whose w gradient goes into its fp32 sum (linear_into_grad_sum). The bias comes
// as a list of none or one, the sum by pointer: an undefined tensor cannot be an input of an
// autograd function. Backward's products are the ones autograd's linear computes (mm's backward
// with these layouts), so on the CPU, where the weight's is rounded as autograd's, the sum is
// bitwise what autograd's gradient summed in fp32 gives.
struct LinearIntoGradSum : public torch::autograd::Function<LinearIntoGradSum> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               at::TensorList bias, const torch::Tensor* sum) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["sum"] = *sum;
    ctx->saved_data["bias"] = !bias.empty();
    torch::NoGradGuard ng;
    return gemm_linear(x, w, bias.empty() ? torch::Tensor() : bias[0]);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    const torch::Tensor sum = ctx->saved_data["sum"].toTensor();
    const bool bias = ctx->saved_data["bias"].toBool();
    ctx->saved_data.clear();
    const torch::Tensor g = grad_out[0].reshape({-1, w.size(0)});
    variable_list out{torch::Tensor(), torch::Tensor()};  // x, w (none: it goes into the sum)
    if (ctx->needs_input_grad(0)) out[0] = gemm_mm(g, w).view(x.sizes());
    if (bias) out.push_back(ctx->needs_input_grad(2) ? g.sum(0) : torch::Tensor());
    out.emplace_back();  // the sum's pointer
    add_product_in_fp32(sum, g.t(), x.reshape({-1, x.size(-1)}));
    return out;
  }
};

}  // namespace

void set_cpu_matmul(CpuMatmul choice) { onednn_flag().store(resolve(choice), std::memory_order_relaxed); }

bool cpu_matmul_is_onednn() { return onednn_flag().load(std::memory_order_relaxed); }

const char* cpu_matmul_name() { return cpu_matmul_is_onednn() ? "onednn" : "blas"; }

torch::Tensor gemm_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  if (!use_onednn(x, w) || x.dim() < 1) return b.defined() ? torch::nn::functional::linear(x, w, b)
                                                          : torch::nn::functional::linear(x, w);
  torch::Tensor y = OneDnnLinear::apply(x, w);
  return b.defined() ? y + b : y;
}

torch::Tensor gemm_mm(const torch::Tensor& a, const torch::Tensor& b) {
  if (!use_onednn(a, b)) return torch::mm(a, b);
  BCD_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "gemm_mm: ({}) x ({})", shape_of(a), shape_of(b));
  return onednn_product(a, b);
}

void gemm_addmm(const torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b) {
  if (!use_onednn(a, b) || out.scalar_type() != torch::kFloat32 || !out.is_contiguous()) {
    out.addmm_(a, b);
    return;
  }
  BCD_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0) && out.size(0) == a.size(0) &&
                out.size(1) == b.size(1),
            "gemm_addmm: ({}) += ({}) x ({})", shape_of(out), shape_of(a), shape_of(b));
  onednn_gemm(a, b, out, 1.0f);
}

void add_product_in_fp32(torch::Tensor sum, const torch::Tensor& a, const torch::Tensor& b) {
  BCD_CHECK(sum.scalar_type() == torch::kFloat32 && a.scalar_type() == b.scalar_type() && a.dim() == 2 &&
                b.dim() == 2 && a.size(1) == b.size(0) && sum.size(0) == a.size(0) && sum.size(1) == b.size(1),
            "add_product_in_fp32: ({}) {} += ({}) x ({}) {}", shape_of(sum), c10::toString(sum.scalar_type()),
            shape_of(a), shape_of(b), c10::toString(a.scalar_type()));
  if (a.is_cuda()) at::addmm_out(sum, sum, a, b, torch::kFloat32);  // an fp32 addend, as 2.11 takes
  else sum.add_(gemm_mm(a, b));
}

torch::Tensor linear_into_grad_sum(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                                   const torch::Tensor& w_grad_sum) {
  BCD_CHECK(w_grad_sum.defined() && w_grad_sum.scalar_type() == torch::kFloat32 && w_grad_sum.sizes() == w.sizes() &&
                (w.scalar_type() == torch::kBFloat16 || w.scalar_type() == torch::kHalf),
            "linear_into_grad_sum: a {} weight ({}) with a gradient sum of ({})", c10::toString(w.scalar_type()),
            shape_of(w), w_grad_sum.defined() ? shape_of(w_grad_sum) : std::string("none"));
  std::vector<torch::Tensor> bias;
  if (b.defined()) bias.push_back(b);
  return LinearIntoGradSum::apply(x, w, at::TensorList(bias), &w_grad_sum);
}

}  // namespace bcd
