// ops.cpp: RMSNorm and grouped causal attention (math path, runs on CPU and GPU alike).
#include "harness/model/ops.h"

#include <cmath>
#include <limits>

namespace bpbench {

at::ScalarType compute_dtype(at::ScalarType model_dtype) {
  return model_dtype == at::kDouble ? at::kDouble : at::kFloat;
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const auto input_dtype = x.scalar_type();
  auto xc = x.to(compute_dtype(input_dtype));
  auto normed = xc * torch::rsqrt(xc.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(input_dtype);
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t n = q.size(0), hq = q.size(1), c = q.size(2), hd = q.size(3);
  const int64_t hkv = k.size(1), e = k.size(2), g = hq / hkv;
  TORCH_CHECK(e >= c, "causal_attention: ", c, " queries need at least as many keys, got ", e);
  // (N, Hq, c, hd) -> (N, Hkv, g*c, hd): the g query heads sharing a kv head become rows of one product.
  auto qg = q.reshape({n, hkv, g * c, hd});
  auto scores = torch::matmul(qg, k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  // scores: (N, Hkv, g*c, e) viewed as (N, Hkv, g, c, e); mask the upper triangle of the last c columns.
  auto diagonal_block = scores.view({n, hkv, g, c, e}).narrow(-1, e - c, c);
  auto above_diagonal = torch::ones({c, c}, q.options().dtype(torch::kBool).requires_grad(false)).triu(1);
  diagonal_block.masked_fill_(above_diagonal, -std::numeric_limits<double>::infinity());
  auto probs = torch::softmax(scores, -1, compute_dtype(q.scalar_type())).to(q.scalar_type());
  auto out = torch::matmul(probs, v);  // (N, Hkv, g*c, hd)
  return out.view({n, hq, c, hd}).transpose(1, 2).reshape({n, c, hq * hd});
}

}  // namespace bpbench
