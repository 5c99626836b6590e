// attention_cpu.cpp: the fused CPU kernel (attention_kernels.h), PyTorch's flash-style CPU attention.
//
// That kernel's causal mask is top-left aligned (query row i sees keys j <= i), right for a whole sequence
// (c = e) but not for a StreamBP chunk (c < e), where row i must see keys j <= i + (e - c). So a chunk is
// two calls over disjoint key blocks, neither with a mask:
//   prefix   keys [0, e-c):  every one visible            -> o_p, lse_p     (N, Hq, c, hd), (N, Hq, c)
//   diagonal keys [e-c, e):  c x c, causal from top-left  -> o_d, lse_d
// merged as one softmax over all e keys: lse = log(exp(lse_p) + exp(lse_d)),
//   o = exp(lse_p - lse) o_p + exp(lse_d - lse) o_d.
// The backward is the kernel's own, once per block, given the MERGED o and lse: it recomputes each block's
// probabilities as exp(s - lse) (true probabilities over all e keys) and D = rowsum(dO * o), so the two
// calls give exactly dQ's two terms and dK/dV for their own key rows.
#include "harness/model/attention_kernels.h"
#include "harness/model/ops.h"

namespace bpbench {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

class ChunkAttention : public torch::autograd::Function<ChunkAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale) {
    const int64_t c = q.size(2), prefix = k.size(2) - c;
    auto [o_p, lse_p] = at::_scaled_dot_product_flash_attention_for_cpu(q, k.narrow(2, 0, prefix),
                                                                        v.narrow(2, 0, prefix), 0.0,
                                                                        /*is_causal=*/false, {}, scale);
    auto [o_d, lse_d] = at::_scaled_dot_product_flash_attention_for_cpu(q, k.narrow(2, prefix, c),
                                                                        v.narrow(2, prefix, c), 0.0,
                                                                        /*is_causal=*/true, {}, scale);
    auto lse = torch::logaddexp(lse_p, lse_d);  // (N, Hq, c), in the kernel's accumulation dtype
    auto from_prefix = torch::exp(lse_p - lse).unsqueeze(-1),
         from_diagonal = torch::exp(lse_d - lse).unsqueeze(-1);
    auto out = (o_p.to(lse.scalar_type()) * from_prefix + o_d.to(lse.scalar_type()) * from_diagonal)
                   .to(q.scalar_type());  // (N, Hq, c, hd)
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t c = q.size(2), prefix = k.size(2) - c;
    const auto& grad_out = grads[0];
    auto [dq, dk_prefix, dv_prefix] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, q, k.narrow(2, 0, prefix), v.narrow(2, 0, prefix), out, lse, 0.0, /*is_causal=*/false, {},
        scale);
    auto [dq_diagonal, dk_diagonal, dv_diagonal] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, q, k.narrow(2, prefix, c), v.narrow(2, prefix, c), out, lse, 0.0, /*is_causal=*/true, {},
        scale);
    // Released as soon as merged, so that at most one (N, Hkv, e, hd) pair of pieces is alive at a time.
    dq.add_(dq_diagonal);
    dq_diagonal.reset();
    auto dk = torch::cat({dk_prefix, dk_diagonal}, 2);
    dk_prefix.reset();
    dk_diagonal.reset();
    auto dv = torch::cat({dv_prefix, dv_diagonal}, 2);
    dv_prefix.reset();
    dv_diagonal.reset();
    return {dq, dk, dv, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor cpu_fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double scale) {
  // A whole sequence needs no merge: the kernel's own causal mask is right, and its derivative is PyTorch's.
  if (q.size(2) == k.size(2))
    return std::get<0>(
        at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, /*is_causal=*/true, {}, scale));
  return ChunkAttention::apply(q, k, v, scale);
}

}  // namespace bpbench
