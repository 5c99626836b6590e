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
//
// Under a sliding window (window < e) a row sees only its last `window` keys, which no causal flag expresses,
// and the prefix/diagonal split would leave rows that see no prefix key at all (the kernel returns lse = 0
// for a fully masked row, not -inf, which would spoil the merge). So the queries run in blocks of at most
// kWindowBlockRows rows, each one call over just the keys its rows can see, [first row's window start, last
// row's position], with an additive float mask of that block's size (0 visible, -inf hidden; every row sees
// itself). Blocks are disjoint rows: one node (WindowedAttention) writes their outputs into one tensor and,
// backward, their dQ rows into dQ and sums their dK/dV into dK/dV.
//
// Attention sinks (gpt-oss: attention_sinks.h, Note [Attention sinks]) are merged into each node's (o, lse)
// once its keys are done; the backward calls stay the same, given the merged o and lse, and the node returns
// the sink logits' gradient beside dQ (and dK, dV). A whole sequence with sinks runs ChunkAttention without
// a prefix, the kernel's own differentiable call having no place for them.
#include <algorithm>
#include <limits>
#include <vector>

#include "harness/model/attention_kernels.h"
#include "harness/model/attention_sinks.h"
#include "harness/model/ops.h"

namespace bpbench {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// A chunk's output and logsumexp (N, Hq, c), the prefix and diagonal calls merged (the file's comment); a
// whole sequence (no prefix) one causal call. Then the sinks, where given.
std::pair<torch::Tensor, torch::Tensor> merged_chunk_forward(const torch::Tensor& q, const torch::Tensor& k,
                                                             const torch::Tensor& v, double scale,
                                                             const torch::Tensor& sink_logits) {
  const int64_t c = q.size(2), prefix = k.size(2) - c;
  if (prefix == 0) {
    auto [out, lse] =
        at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, /*is_causal=*/true, {}, scale);
    if (sink_logits.defined()) merge_attention_sinks(out, lse, sink_logits);
    return {out, lse};
  }
  auto [o_p, lse_p] = at::_scaled_dot_product_flash_attention_for_cpu(
      q, k.narrow(2, 0, prefix), v.narrow(2, 0, prefix), 0.0, /*is_causal=*/false, {}, scale);
  auto [o_d, lse_d] = at::_scaled_dot_product_flash_attention_for_cpu(
      q, k.narrow(2, prefix, c), v.narrow(2, prefix, c), 0.0, /*is_causal=*/true, {}, scale);
  auto lse = torch::logaddexp(lse_p, lse_d);  // (N, Hq, c), in the kernel's accumulation dtype
  auto from_prefix = torch::exp(lse_p - lse).unsqueeze(-1),
       from_diagonal = torch::exp(lse_d - lse).unsqueeze(-1);
  auto out = (o_p.to(lse.scalar_type()) * from_prefix + o_d.to(lse.scalar_type()) * from_diagonal)
                 .to(q.scalar_type());  // (N, Hq, c, hd)
  if (sink_logits.defined()) merge_attention_sinks(out, lse, sink_logits);
  return {out, lse};
}

class ChunkAttention : public torch::autograd::Function<ChunkAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale, const SinkLogitsInput& sink_input) {
    const torch::Tensor sink_logits = logits_of(sink_input);
    auto [out, lse] = merged_chunk_forward(q, k, v, scale, sink_logits);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["scale"] = scale;
    save_sink_logits(ctx, sink_logits);
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t c = q.size(2), prefix = k.size(2) - c;
    const auto& grad_out = grads[0];
    auto d_sinks = sinks_grad_if_needed(ctx, grad_out, out, lse);
    if (prefix == 0) {
      auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
          grad_out, q, k, v, out, lse, 0.0, /*is_causal=*/true, {}, scale);
      return {dq, dk, dv, torch::Tensor(), d_sinks};
    }
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
    return {dq, dk, dv, torch::Tensor(), d_sinks};
  }
};

// A chunk whose dK, dV go to a sink (ops.h: KvGradSink; StreamBP's accumulators). Forward as ChunkAttention,
// or the kernel's own causal call when c = e. Backward: the prefix keys in blocks of at most
// max(c, kMinSinkKeyBlock) keys, then the diagonal, one kernel call each given the merged o and lse (as
// ChunkAttention's two calls are); each call's dK, dV are added into the sink and released before the next,
// so no gradient for all e keys is ever held. dQ sums the calls' terms. k and v are constants here.
class SinkAttention : public torch::autograd::Function<SinkAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale, const torch::Tensor& dk_sink,
                               const torch::Tensor& dv_sink, const SinkLogitsInput& sink_input) {
    const torch::Tensor sink_logits = logits_of(sink_input);
    auto [out, lse] = merged_chunk_forward(q, k, v, scale, sink_logits);
    ctx->save_for_backward({q, out, lse});
    SinkNodeData{k, v, KvGradSink{dk_sink, dv_sink}, scale}.save(ctx);
    save_sink_logits(ctx, sink_logits);
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &out = saved[1], &lse = saved[2];
    const SinkNodeData node = SinkNodeData::load(ctx);
    const torch::Tensor &k = node.k, &v = node.v;
    const double scale = node.scale;
    const int64_t c = q.size(2), e = k.size(2);
    const auto& grad_out = grads[0];
    auto d_sinks = sinks_grad_if_needed(ctx, grad_out, out, lse);
    auto dq = sink_backward_by_key_blocks(c, e, std::max(c, kMinSinkKeyBlock), node.sink,
                                          [&](int64_t key0, int64_t keys, bool causal) {
                                            return at::_scaled_dot_product_flash_attention_for_cpu_backward(
                                                grad_out, q, k.narrow(2, key0, keys), v.narrow(2, key0, keys),
                                                out, lse, 0.0, causal, {}, scale);
                                          });
    return {dq, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), d_sinks};
  }
};

// Rows per banded block: the mask is at most kWindowBlockRows x (kWindowBlockRows + window - 1) floats.
constexpr int64_t kWindowBlockRows = 256;

// Calls `block(row0, rows, key0, keys)` for every banded query block of a windowed call, in order.
template <class BlockFn>
void for_each_window_block(int64_t c, int64_t e, int64_t window, BlockFn block) {
  for (int64_t row0 = 0; row0 < c; row0 += kWindowBlockRows) {
    const int64_t rows = std::min(kWindowBlockRows, c - row0);
    const int64_t first_pos = e - c + row0, last_pos = first_pos + rows - 1;
    const int64_t key0 = std::max<int64_t>(0, first_pos - window + 1);
    block(row0, rows, key0, last_pos + 1 - key0);
  }
}

// One autograd node for all blocks: each block's output and logsumexp are written into one output and one
// logsumexp, which is all the backward keeps besides q, K and V (the masks are rebuilt there). Per-block
// nodes would each keep their mask and output, and the concatenation a second copy of the output.
class WindowedAttention : public torch::autograd::Function<WindowedAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale, int64_t window,
                               const SinkLogitsInput& sink_input) {
    const torch::Tensor sink_logits = logits_of(sink_input);
    const int64_t n = q.size(0), hq = q.size(1), c = q.size(2), hd = q.size(3), e = k.size(2);
    // The kernel's own output layout, (N, c, Hq, hd) seen as (N, Hq, c, hd): causal_attention's reshape to
    // (N, c, Hq*hd) stays a view.
    auto out = torch::empty({n, c, hq, hd}, q.options()).transpose(1, 2);
    torch::Tensor lse;  // (N, Hq, c), in the kernel's accumulation dtype
    for_each_window_block(c, e, window, [&](int64_t row0, int64_t rows, int64_t key0, int64_t keys) {
      auto mask = window_mask(e - c + row0, rows, key0, keys, window, window_mask_dtype(q));
      auto [o, l] = at::_scaled_dot_product_flash_attention_for_cpu(
          q.narrow(2, row0, rows), k.narrow(2, key0, keys), v.narrow(2, key0, keys), 0.0,
          /*is_causal=*/false, mask, scale);
      out.narrow(2, row0, rows).copy_(o);
      if (!lse.defined()) lse = torch::empty({n, hq, c}, l.options());
      lse.narrow(2, row0, rows).copy_(l);
    });
    if (sink_logits.defined()) merge_attention_sinks(out, lse, sink_logits);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["window"] = window;
    save_sink_logits(ctx, sink_logits);
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t window = ctx->saved_data["window"].toInt();
    const int64_t c = q.size(2), e = k.size(2);
    const auto& grad_out = grads[0];
    auto d_sinks = sinks_grad_if_needed(ctx, grad_out, out, lse);
    auto dq = torch::empty_like(q);
    auto dk = torch::zeros_like(k), dv = torch::zeros_like(v);
    for_each_window_block(c, e, window, [&](int64_t row0, int64_t rows, int64_t key0, int64_t keys) {
      auto mask = window_mask(e - c + row0, rows, key0, keys, window, window_mask_dtype(q));
      auto [dq_block, dk_block, dv_block] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
          grad_out.narrow(2, row0, rows), q.narrow(2, row0, rows), k.narrow(2, key0, keys),
          v.narrow(2, key0, keys), out.narrow(2, row0, rows), lse.narrow(2, row0, rows), 0.0,
          /*is_causal=*/false, mask, scale);
      dq.narrow(2, row0, rows).copy_(dq_block);
      dk.narrow(2, key0, keys).add_(dk_block);
      dv.narrow(2, key0, keys).add_(dv_block);
    });
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), d_sinks};
  }
};

}  // namespace

torch::Tensor window_mask(int64_t pos0, int64_t rows, int64_t key0, int64_t keys, int64_t window,
                          torch::ScalarType dtype) {
  auto options = torch::TensorOptions().dtype(torch::kLong);
  auto pos = torch::arange(pos0, pos0 + rows, options).unsqueeze(1);  // (rows, 1)
  auto key = torch::arange(key0, key0 + keys, options).unsqueeze(0);  // (1, keys)
  auto visible = (key <= pos).logical_and(key > pos - window);
  return torch::zeros({rows, keys}, torch::TensorOptions().dtype(dtype))
      .masked_fill_(visible.logical_not(), -std::numeric_limits<double>::infinity());
}

torch::ScalarType window_mask_dtype(const torch::Tensor& q) {
  return q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

int64_t cpu_window_executed_pairs(int64_t c, int64_t e, int64_t window) {
  int64_t pairs = 0;
  for_each_window_block(c, e, window,
                        [&](int64_t, int64_t rows, int64_t, int64_t keys) { pairs += rows * keys; });
  return pairs;
}

torch::Tensor cpu_fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double scale, int64_t window, const torch::Tensor& sink_logits) {
  // Every row sees all its keys when there are no more keys than the window: plain causal.
  if (window > 0 && window < k.size(2))
    return WindowedAttention::apply(q, k, v, scale, window, node_input(sink_logits));
  // A whole sequence needs no merge: the kernel's own causal mask is right, and its derivative is PyTorch's.
  if (q.size(2) == k.size(2) && !sink_logits.defined())
    return std::get<0>(
        at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, /*is_causal=*/true, {}, scale));
  return ChunkAttention::apply(q, k, v, scale, node_input(sink_logits));
}

torch::Tensor cpu_fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double scale, int64_t window, const torch::Tensor& sink_logits,
                                  const KvGradSink& sink) {
  // A window bounds the keys a chunk sees (at most c + window - 1): the banded node's own dK, dV are small.
  if (window > 0 && window < k.size(2))
    return attention_into_sink(cpu_fused_attention, q, k, v, scale, window, sink_logits, sink);
  return SinkAttention::apply(q, k, v, scale, sink.dk, sink.dv, node_input(sink_logits));
}

}  // namespace bpbench
