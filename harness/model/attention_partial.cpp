// attention_partial.cpp: one query block over one key block with its logsumexp, and that pair's backward
// (attention_partial.h). The CPU's fused kernel takes both directions as they are; the math form is what it
// computes, written out, for every other device.
#include "harness/model/attention_partial.h"

#include <limits>

#include "harness/model/attention_kernels.h"
#include "harness/model/ops.h"

namespace bpbench {
namespace {

// (N, Hq, c, hd) -> (N, Hkv, g c, hd): the g query heads that share a kv head become rows of one product.
torch::Tensor grouped(const torch::Tensor& x, int64_t kv_heads) {
  return x.reshape({x.size(0), kv_heads, -1, x.size(3)});
}

// The scores of the pair in the accumulation dtype, (N, Hkv, g c, e), the hidden ones -inf: under the causal
// mask, or under `band` (an additive (c, e) mask) where given.
torch::Tensor masked_scores(const torch::Tensor& q, const torch::Tensor& k, double scale, KeyBlockMask mask,
                            const KeyBand* band = nullptr) {
  const auto acc = compute_dtype(q.scalar_type());
  const int64_t n = q.size(0), c = q.size(2), hkv = k.size(1), e = k.size(2);
  auto scores = torch::matmul(grouped(q, hkv).to(acc), k.to(acc).transpose(-1, -2)) * scale;
  if (band) {
    scores.view({n, hkv, -1, c, e}).add_(window_mask(band->query0, c, band->key0, e, band->window, acc));
  } else if (mask == KeyBlockMask::causal) {
    auto hidden = torch::ones({c, e}, q.options().dtype(torch::kBool)).triu(1);
    scores.view({n, hkv, -1, c, e}).masked_fill_(hidden, -std::numeric_limits<double>::infinity());
  }
  return scores;
}

// The math form's pair: its output and logsumexp from the masked scores.
PartialAttention math_partial(const torch::Tensor& q, const torch::Tensor& v, torch::Tensor scores) {
  auto lse = torch::logsumexp(scores, -1, /*keepdim=*/true);                       // (N, Hkv, g c, 1)
  auto out = torch::matmul(torch::exp(scores - lse), v.to(scores.scalar_type()));  // (N, Hkv, g c, hd)
  return {out.reshape(q.sizes()).to(q.scalar_type()), lse.reshape({q.size(0), q.size(1), q.size(2)})};
}

// The math form's backward of a pair from its masked scores: dS = P * (dO V^T - rowsum(dO * O)), P =
// exp(S - lse) the pair's true probabilities.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> math_partial_backward(
    const torch::Tensor& grad_out, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, double scale, torch::Tensor scores) {
  const int64_t hkv = k.size(1);
  const auto acc = scores.scalar_type();
  auto probs = torch::exp(scores - grouped(lse.unsqueeze(-1), hkv).to(acc));  // (N, Hkv, g c, e)
  scores.reset();
  auto d_out = grouped(grad_out, hkv).to(acc);                                   // (N, Hkv, g c, hd)
  auto dv = torch::matmul(probs.transpose(-1, -2), d_out);                       // (N, Hkv, e, hd)
  auto row_dot = (d_out * grouped(out, hkv).to(acc)).sum(-1, /*keepdim=*/true);  // (N, Hkv, g c, 1)
  auto d_scores = probs * (torch::matmul(d_out, v.to(acc).transpose(-1, -2)) - row_dot);
  probs.reset();
  auto dq = torch::matmul(d_scores, k.to(acc)) * scale;                                  // (N, Hkv, g c, hd)
  auto dk = torch::matmul(d_scores.transpose(-1, -2), grouped(q, hkv).to(acc)) * scale;  // (N, Hkv, e, hd)
  return {dq.reshape(q.sizes()).to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

void check_shapes(const torch::Tensor& q, const torch::Tensor& k, KeyBlockMask mask) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(1) % k.size(1) == 0,
              "partial attention: q (N, Hq, c, hd) and k (N, Hkv, e, hd) with Hq a multiple of Hkv, got ",
              q.sizes(), " and ", k.sizes());
  TORCH_CHECK(mask != KeyBlockMask::causal || q.size(2) == k.size(2),
              "partial attention: a causal pair needs as many queries as keys, got ", q.size(2), " and ",
              k.size(2));
}

}  // namespace

PartialKernel partial_kernel_for(const torch::Device& device, at::ScalarType dtype, int64_t head_dim) {
  if (device.is_cpu()) return PartialKernel::cpu_fused;
  if (device.is_cuda() && attention_kernel_for(device, dtype, head_dim) == AttentionKernel::flash)
    return PartialKernel::cuda_flash;
  return PartialKernel::math;
}

PartialAttention partial_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   double scale, KeyBlockMask mask) {
  return partial_attention(q, k, v, scale, mask, partial_kernel_for(q.device(), q.scalar_type(), q.size(3)));
}

PartialAttention partial_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   double scale, KeyBlockMask mask, PartialKernel kernel) {
  check_shapes(q, k, mask);
  torch::NoGradGuard no_grad;
  if (kernel == PartialKernel::cpu_fused) {
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, mask == KeyBlockMask::causal, {}, scale);
    return {out, lse};
  }
  if (kernel == PartialKernel::cuda_flash) {
    // Flash takes (N, rows, H, hd) with a contiguous last dimension: the transposes copy nothing. Its
    // logsumexp is (N, Hq, c) float32, of the scaled scores, as the CPU kernel's; the diagonal pair is
    // square, so its causal alignment is either corner's.
    const int64_t c = q.size(2), e = k.size(2);
    auto [out, lse, rng_state, unused, debug_mask] = at::_flash_attention_forward(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), /*cum_seq_q=*/{}, /*cum_seq_k=*/{}, c, e,
        0.0, mask == KeyBlockMask::causal, /*return_debug_mask=*/false, std::optional<double>(scale));
    return {out.transpose(1, 2), lse};
  }
  return math_partial(q, v, masked_scores(q, k, scale, mask));
}

PartialAttention partial_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   double scale, const KeyBand& band) {
  check_shapes(q, k, KeyBlockMask::all);
  torch::NoGradGuard no_grad;
  if (q.device().is_cpu()) {
    auto mask = window_mask(band.query0, q.size(2), band.key0, k.size(2), band.window, window_mask_dtype(q));
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, false, mask, scale);
    return {out, lse};
  }
  return math_partial(q, v, masked_scores(q, k, scale, KeyBlockMask::all, &band));
}

void merge_partial(const PartialAttention& acc, const PartialAttention& next) {
  const auto lse = torch::logaddexp(acc.lse, next.lse);  // (N, Hq, c)
  const auto dtype = lse.scalar_type();
  auto merged = acc.out.to(dtype) * (acc.lse - lse).exp_().unsqueeze(-1);  // (N, Hq, c, hd)
  merged.addcmul_(next.out.to(dtype), (next.lse - lse).exp_().unsqueeze(-1));
  acc.out.copy_(merged);
  acc.lse.copy_(lse);
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> partial_attention_backward(
    const torch::Tensor& grad_out, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, double scale, KeyBlockMask mask) {
  return partial_attention_backward(grad_out, q, k, v, out, lse, scale, mask,
                                    partial_kernel_for(q.device(), q.scalar_type(), q.size(3)));
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> partial_attention_backward(
    const torch::Tensor& grad_out, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, double scale, KeyBlockMask mask,
    PartialKernel kernel) {
  check_shapes(q, k, mask);
  torch::NoGradGuard no_grad;
  if (kernel == PartialKernel::cpu_fused)
    return at::_scaled_dot_product_flash_attention_for_cpu_backward(grad_out, q, k, v, out, lse, 0.0,
                                                                    mask == KeyBlockMask::causal, {}, scale);
  if (kernel == PartialKernel::cuda_flash) {
    // Flash's backward given the merged output and logsumexp (contiguous (N, Hq, c), as its forward returns
    // it); no dropout, so no random state: the empty tensors its forward returns without dropout.
    const int64_t c = q.size(2), e = k.size(2);
    const auto no_rng = at::empty({}, at::kLong);
    auto [dq, dk, dv] = at::_flash_attention_backward(
        grad_out.transpose(1, 2), q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
        out.transpose(1, 2), lse.contiguous(), /*cum_seq_q=*/{}, /*cum_seq_k=*/{}, c, e, 0.0,
        mask == KeyBlockMask::causal, no_rng, no_rng, std::optional<double>(scale));
    return {dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)};
  }
  return math_partial_backward(grad_out, q, k, v, out, lse, scale, masked_scores(q, k, scale, mask));
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> partial_attention_backward(
    const torch::Tensor& grad_out, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, double scale, const KeyBand& band) {
  check_shapes(q, k, KeyBlockMask::all);
  torch::NoGradGuard no_grad;
  if (q.device().is_cpu()) {
    auto mask = window_mask(band.query0, q.size(2), band.key0, k.size(2), band.window, window_mask_dtype(q));
    return at::_scaled_dot_product_flash_attention_for_cpu_backward(grad_out, q, k, v, out, lse, 0.0, false,
                                                                    mask, scale);
  }
  return math_partial_backward(grad_out, q, k, v, out, lse, scale,
                               masked_scores(q, k, scale, KeyBlockMask::all, &band));
}

}  // namespace bpbench
