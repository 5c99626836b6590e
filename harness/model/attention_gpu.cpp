// attention_gpu.cpp: the CUDA kernels (attention_kernels.h), through ATen's own entry points, so this file
// compiles against any LibTorch; only a CUDA tensor reaches it (attention.cpp). Both kernels take
// (N, rows, heads, hd) with a contiguous last dimension: the model's (N, H, rows, hd) tensors are views of
// exactly that layout, so the transposes below copy nothing.
//
// Both are bottom-right aligned for c < e (query row i sees keys j <= i + e - c), the contract's rule:
// FlashAttention-2's is_causal is, and the memory-efficient kernel's custom_mask_type 2
// (CausalFromBottomRight) is. Their derivatives are registered by PyTorch; autograd calls the backward
// kernels with the logsumexp they saved.
#include "harness/model/attention_kernels.h"

namespace bpbench {
namespace {
constexpr int64_t kCausalFromBottomRight = 2;  // the memory-efficient kernel's CustomMaskType
}

torch::Tensor flash_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              double scale, int64_t window) {
  const int64_t c = q.size(2), e = k.size(2);
  // GQA native in the forward: K/V stay per kv head (Hq a multiple of Hkv). Not in the backward: mha_bwd
  // (flash_api.cpp) computes dK/dV per query head into (N, e, Hq, hd) buffers and sums each group before it
  // returns them per kv head, beside a float32 dq accumulator (N, round128(c), Hq, hd_r).
  auto out = std::get<0>(at::_flash_attention_forward(
      q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
      /*cum_seq_q=*/{}, /*cum_seq_k=*/{}, c, e, 0.0,
      /*is_causal=*/true, /*return_debug_mask=*/false, std::optional<double>(scale),
      // FA2's local rule, bottom-right aligned like its causal one:
      // row i sees keys i + e - c - left .. i + e - c. Its
      // autograd node keeps the window for the backward.
      window > 0 ? std::optional<int64_t>(window - 1) : std::nullopt,
      window > 0 ? std::optional<int64_t>(0) : std::nullopt));
  return out.transpose(1, 2);  // (N, c, Hq, hd) -> (N, Hq, c, hd)
}

torch::Tensor efficient_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double scale, int64_t window) {
  // attention_kernel_for sends windows elsewhere: this kernel's autograd node drops the window for the
  // backward.
  TORCH_CHECK(window <= 0, "efficient_attention: no sliding window (the math kernel takes it)");
  const int64_t n = q.size(0), hq = q.size(1), c = q.size(2), hd = q.size(3);
  const int64_t hkv = k.size(1), e = k.size(2), group = hq / hkv;
  // This kernel wants as many kv heads as query heads: repeat each kv head `group` times (e x Aq elements,
  // never scores); autograd sums dK/dV back over each group through the expand. With g > 1 the repeats are
  // copies, N x e x Aq each for K and V, and they are what the kernel saves for its backward, whose dK/dV
  // come back per query head: float32 GQA on CUDA holds K/V at Hq heads (memory_terms.h, Note [Efficient
  // attention buffers]).
  auto per_query_head = [&](const torch::Tensor& t) {
    auto rows = t.transpose(1, 2);  // (N, e, Hkv, hd)
    if (group == 1) return rows;
    return rows.unsqueeze(3).expand({n, e, hkv, group, hd}).reshape({n, e, hq, hd});
  };
  const bool needs_grad =
      torch::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  auto out = std::get<0>(at::_efficient_attention_forward(
      q.transpose(1, 2), per_query_head(k), per_query_head(v),
      /*bias=*/{}, /*cu_seqlens_q=*/{}, /*cu_seqlens_k=*/{}, c, e, 0.0, kCausalFromBottomRight,
      /*compute_log_sumexp=*/needs_grad, scale));
  return out.transpose(1, 2);  // (N, c, Hq, hd) -> (N, Hq, c, hd)
}

}  // namespace bpbench
