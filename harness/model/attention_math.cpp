// attention_math.cpp: the math kernel (attention_kernels.h): what no fused kernel takes, on CUDA (float64,
// head sizes not a multiple of 8, float32 with a sliding window). It materialises the scores, N x Hq x c x e,
// and their probabilities: the one kernel that does, and one the analytic estimate
// (harness/estimate/estimate.h) does not model.
#include <limits>

#include "harness/model/attention_kernels.h"
#include "harness/model/ops.h"

namespace bpbench {

torch::Tensor math_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             double scale, int64_t window, const torch::Tensor& sink_logits) {
  const int64_t n = q.size(0), hq = q.size(1), c = q.size(2), hd = q.size(3);
  const int64_t hkv = k.size(1), e = k.size(2), g = hq / hkv;
  // (N, Hq, c, hd) -> (N, Hkv, g*c, hd): the g query heads sharing a kv head become rows of one product.
  auto qg = q.reshape({n, hkv, g * c, hd});
  auto scores = torch::matmul(qg, k.transpose(-1, -2)) * scale;  // (N, Hkv, g*c, e)
  // Viewed as (N, Hkv, g, c, e): only the last c columns (the diagonal block) have hidden keys.
  auto diagonal_block = scores.view({n, hkv, g, c, e}).narrow(-1, e - c, c);
  auto above_diagonal = torch::ones({c, c}, q.options().dtype(torch::kBool).requires_grad(false)).triu(1);
  diagonal_block.masked_fill_(above_diagonal, -std::numeric_limits<double>::infinity());
  if (window > 0 &&
      window < e) {  // row i, at key position e - c + i, sees keys after e - c + i - window only
    auto pos = torch::arange(e - c, e, q.options().dtype(torch::kLong)).unsqueeze(1);  // (c, 1)
    auto key = torch::arange(e, q.options().dtype(torch::kLong)).unsqueeze(0);         // (1, e)
    scores.view({n, hkv, g, c, e})
        .masked_fill_(key <= pos - window, -std::numeric_limits<double>::infinity());
  }
  if (sink_logits.defined()) {  // one more score a row, of a key whose value is zero (attention_sinks.h)
    auto sink_column = sink_logits.to(scores.scalar_type()).view({1, hkv, g, 1, 1}).expand({n, hkv, g, c, 1});
    auto with_sinks = torch::cat({scores.view({n, hkv, g, c, e}), sink_column}, -1);  // (N, Hkv, g, c, e + 1)
    auto probs = torch::softmax(with_sinks, -1, compute_dtype(q.scalar_type())).to(q.scalar_type());
    return torch::matmul(probs.narrow(-1, 0, e).reshape({n, hkv, g * c, e}), v).view({n, hq, c, hd});
  }
  auto probs = torch::softmax(scores, -1, compute_dtype(q.scalar_type())).to(q.scalar_type());
  return torch::matmul(probs, v).view({n, hq, c, hd});
}

}  // namespace bpbench
