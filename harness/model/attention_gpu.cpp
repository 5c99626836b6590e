// attention_gpu.cpp: the CUDA kernels (attention_kernels.h), through ATen's own entry points, so this file
// compiles against any LibTorch; only a CUDA tensor reaches it (attention.cpp). Both kernels take
// (N, rows, heads, hd) with a contiguous last dimension: the model's (N, H, rows, hd) tensors are views of
// exactly that layout, so the transposes below copy nothing.
//
// Both are bottom-right aligned for c < e (query row i sees keys j <= i + e - c), the contract's rule:
// FlashAttention-2's is_causal is, and the memory-efficient kernel's custom_mask_type 2
// (CausalFromBottomRight) is. Their derivatives are registered by PyTorch; autograd calls the backward
// kernels with the logsumexp they saved, except FlashSinkAttention's and FlashWithSinks', which call flash's
// backward themselves.
//
// Attention sinks (gpt-oss: attention_sinks.h, Note [Attention sinks]) go through flash's logsumexp: its
// forward's (out, lse) get the sink merged in, and its backward, handed the merged ones, is exact as it is.
// FlashAttention-3 has no backward for sinks (Unsloth's note); FA2's needs none of its own.
#include "harness/model/attention_kernels.h"

#include <algorithm>

#include "harness/model/attention_sinks.h"

namespace bpbench {
namespace {
constexpr int64_t kCausalFromBottomRight = 2;  // the memory-efficient kernel's CustomMaskType
}

namespace {
// FA2's sliding window as its (left, right) arguments: row i sees keys i + e - c - left .. i + e - c.
std::optional<int64_t> window_left(int64_t window) {
  return window > 0 ? std::optional<int64_t>(window - 1) : std::nullopt;
}
std::optional<int64_t> window_right(int64_t window) {
  return window > 0 ? std::optional<int64_t>(0) : std::nullopt;
}
torch::Tensor flash_with_sinks(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               double scale, int64_t window, const torch::Tensor& sink_logits);
}  // namespace

torch::Tensor flash_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              double scale, int64_t window, const torch::Tensor& sink_logits) {
  if (sink_logits.defined()) return flash_with_sinks(q, k, v, scale, window, sink_logits);
  const int64_t c = q.size(2), e = k.size(2);
  // GQA native in the forward: K/V stay per kv head (Hq a multiple of Hkv). Not in the backward: mha_bwd
  // (flash_api.cpp) computes dK/dV per query head into (N, e, Hq, hd) buffers and sums each group before it
  // returns them per kv head, beside a float32 dq accumulator (N, round128(c), Hq, hd_r).
  auto out = std::get<0>(at::_flash_attention_forward(
      q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
      /*cum_seq_q=*/{}, /*cum_seq_k=*/{}, c, e, 0.0,
      /*is_causal=*/true, /*return_debug_mask=*/false, std::optional<double>(scale),
      // FA2's local rule is bottom-right aligned like its causal one; its autograd node keeps the window
      // for the backward.
      window_left(window), window_right(window)));
  return out.transpose(1, 2);  // (N, c, Hq, hd) -> (N, Hq, c, hd)
}

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// flash_attention with dK, dV into a sink (ops.h: KvGradSink), no window: the forward is flash's one call
// over all e keys; the backward is flash's backward kernel once per key block given that call's output and
// logsumexp (P = exp(S - lse) is then the true probability over all e keys, and D = rowsum(dO * O) the whole
// row's), so the blocks' dQ terms sum to dQ and each block's dK, dV are exact. The prefix keys [0, e - c) are
// visible to every query (no mask); the diagonal block [e - c, e) is causal, square, so either alignment.
// Each block's dK, dV (and flash's expansion of them to Hq heads, for GQA) exist for that block only: a
// block of kCudaSinkKeyBlock keys, not all e.
class FlashSinkAttention : public torch::autograd::Function<FlashSinkAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale, const torch::Tensor& dk_sink,
                               const torch::Tensor& dv_sink, const SinkLogitsInput& sink_input) {
    const torch::Tensor sink_logits = logits_of(sink_input);
    const int64_t c = q.size(2), e = k.size(2);
    auto [out, lse, rng_state, unused, debug_mask] = at::_flash_attention_forward(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), /*cum_seq_q=*/{}, /*cum_seq_k=*/{}, c, e,
        0.0, /*is_causal=*/true, /*return_debug_mask=*/false, std::optional<double>(scale));
    if (sink_logits.defined()) merge_attention_sinks(out.transpose(1, 2), lse, sink_logits);
    ctx->save_for_backward({q, out, lse, rng_state, unused});
    SinkNodeData{k, v, KvGradSink{dk_sink, dv_sink}, scale}.save(ctx);
    save_sink_logits(ctx, sink_logits);
    return out.transpose(1, 2);  // (N, c, Hq, hd) -> (N, Hq, c, hd)
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &out = saved[1], &lse = saved[2], &rng_state = saved[3], &unused = saved[4];
    const SinkNodeData node = SinkNodeData::load(ctx);
    const torch::Tensor &k = node.k, &v = node.v;
    const double scale = node.scale;
    const int64_t c = q.size(2), e = k.size(2);
    auto grad_out = grads[0].transpose(1, 2);  // (N, c, Hq, hd)
    if (grad_out.stride(-1) != 1) grad_out = grad_out.contiguous();
    auto d_sinks = sinks_grad_if_needed(ctx, grad_out.transpose(1, 2), out.transpose(1, 2), lse);
    // Flash's layout is (N, rows, H, hd): its results come back transposed to the sink's (N, H, rows, hd).
    auto dq = sink_backward_by_key_blocks(
        c, e, std::max(c, kCudaSinkKeyBlock), node.sink, [&](int64_t key0, int64_t keys, bool causal) {
          auto [dq_part, dk_part, dv_part] = at::_flash_attention_backward(
              grad_out, q.transpose(1, 2), k.narrow(2, key0, keys).transpose(1, 2),
              v.narrow(2, key0, keys).transpose(1, 2), out, lse, /*cum_seq_q=*/{}, /*cum_seq_k=*/{}, c, keys,
              0.0, causal, rng_state, unused, std::optional<double>(scale));
          return std::make_tuple(dq_part.transpose(1, 2), dk_part.transpose(1, 2), dv_part.transpose(1, 2));
        });
    return {dq, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), d_sinks};
  }
};

// flash_attention with attention sinks, under a window or not: flash's forward with the sink merged into its
// output and logsumexp, its backward once over all e keys given the merged ones, and the sinks' gradient.
class FlashWithSinks : public torch::autograd::Function<FlashWithSinks> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale, int64_t window,
                               const SinkLogitsInput& sink_input) {
    const torch::Tensor sink_logits = logits_of(sink_input);
    const int64_t c = q.size(2), e = k.size(2);
    auto [out, lse, rng_state, unused, debug_mask] = at::_flash_attention_forward(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), /*cum_seq_q=*/{}, /*cum_seq_k=*/{}, c, e,
        0.0, /*is_causal=*/true, /*return_debug_mask=*/false, std::optional<double>(scale),
        window_left(window), window_right(window));
    merge_attention_sinks(out.transpose(1, 2), lse, sink_logits);
    ctx->save_for_backward({q, k, v, out, lse, rng_state, unused});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["window"] = window;
    save_sink_logits(ctx, sink_logits);
    return out.transpose(1, 2);  // (N, c, Hq, hd) -> (N, Hq, c, hd)
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const auto &rng_state = saved[5], &unused = saved[6];
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t window = ctx->saved_data["window"].toInt();
    const int64_t c = q.size(2), e = k.size(2);
    auto grad_out = grads[0].transpose(1, 2);  // (N, c, Hq, hd)
    if (grad_out.stride(-1) != 1) grad_out = grad_out.contiguous();
    auto d_sinks = sinks_grad_if_needed(ctx, grad_out.transpose(1, 2), out.transpose(1, 2), lse);
    auto [dq, dk, dv] = at::_flash_attention_backward(
        grad_out, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), out, lse, /*cum_seq_q=*/{},
        /*cum_seq_k=*/{}, c, e, 0.0, /*is_causal=*/true, rng_state, unused, std::optional<double>(scale),
        window_left(window), window_right(window));
    return {dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2),
            torch::Tensor(),    torch::Tensor(),    d_sinks};
  }
};

torch::Tensor flash_with_sinks(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               double scale, int64_t window, const torch::Tensor& sink_logits) {
  return FlashWithSinks::apply(q, k, v, scale, window, node_input(sink_logits));
}
}  // namespace

torch::Tensor flash_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              double scale, int64_t window, const torch::Tensor& sink_logits,
                              const KvGradSink& sink) {
  // A window bounds the keys a chunk sees (at most c + window - 1): flash's own node, dK, dV then added.
  if (window > 0 && window < k.size(2))
    return attention_into_sink(flash_attention, q, k, v, scale, window, sink_logits, sink);
  return FlashSinkAttention::apply(q, k, v, scale, sink.dk, sink.dv, node_input(sink_logits));
}

torch::Tensor efficient_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double scale, int64_t window, const torch::Tensor& sink_logits) {
  // attention_kernel_for sends windows and sinks elsewhere: this kernel's autograd node drops the window for
  // the backward and has no place for sinks.
  TORCH_CHECK(window <= 0, "efficient_attention: no sliding window (the math kernel takes it)");
  TORCH_CHECK(!sink_logits.defined(), "efficient_attention: no attention sinks (the math kernel takes them)");
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
