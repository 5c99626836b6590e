// attention_sinks.h: gpt-oss's attention sinks, for every attention path that has its rows' logsumexp (the
// CPU kernel's nodes, flash's, the ring's merged pieces). Not to be confused with a KvGradSink (ops.h),
// where StreamBP's dK, dV are added.
//
// Note [Attention sinks]. Each query head h has one learned logit a_h that joins every row's softmax
// denominator as a key of value zero: p_j = exp(s_j) / (sum_k exp(s_k) + exp(a_h)). So a row's attention is
// the kernel's, over its visible keys, scaled down:
//   lse' = log(exp(lse) + exp(a)),   w = exp(lse - lse') = sigmoid(lse - a),   o' = w o
// where (o, lse) are the kernel's output and logsumexp without the sink. Backward, given dO' for o':
//   - the kernels' own backward, handed (dO', o', lse'), is already exact: it recomputes the true
//   probabilities
//     exp(s - lse') = w p and D = rowsum(dO' o'), and dS = P' (dP - D) is the gradient with the sink. So
//     nothing about q, k, v changes; the sink is one more key merged into (o, lse) after the others.
//   - the sink's own score gets dS_sink = p_sink (0 - D) with p_sink = exp(a - lse') = 1 - w, so
//       dL/da_h = - sum over sequences n and rows i of (1 - w_ni) rowsum(dO'_ni o'_ni).
// The same as transformers' eager_attention_forward for gpt_oss (the sink column concatenated to the scores,
// softmaxed, dropped), without scores.
//
// Legend (model_config.h): N batch, Hq query heads, c query rows, hd head size.
#pragma once

#include <torch/torch.h>

#include <optional>

namespace bpbench {

// out (N, Hq, c, hd) any layout, lse (N, Hq, c) in the kernel's accumulation dtype: in place, the sink merged
// in (o' = w o rounded once to out's dtype, lse' = log(exp(lse) + exp(a))). sink_logits (Hq).
void merge_attention_sinks(const torch::Tensor& out, const torch::Tensor& lse,
                           const torch::Tensor& sink_logits);

// dL/da (Hq), in sink_logits' dtype, from the merged out and lse and the gradient of the merged out (the
// Note). Transient: one (N, Hq, c, hd) product in out's dtype and (N, Hq, c) rows in lse's.
torch::Tensor attention_sinks_grad(const torch::Tensor& grad_out, const torch::Tensor& out,
                                   const torch::Tensor& lse, const torch::Tensor& sink_logits);

// An autograd node takes the sink logits as an optional input: an undefined tensor is no input to autograd
// (a defined one gets its gradient back), where a plain undefined at::Tensor argument would be taken for one.
using SinkLogitsInput = std::optional<torch::Tensor>;
inline SinkLogitsInput node_input(const torch::Tensor& sink_logits) {
  return sink_logits.defined() ? SinkLogitsInput(sink_logits) : std::nullopt;
}
inline torch::Tensor logits_of(const SinkLogitsInput& input) {
  return input.value_or(torch::Tensor());
}

// A sink-merging autograd node's bookkeeping: the logits (or none) kept in its saved_data, and in its
// backward their gradient (undefined where there are none or none is wanted).
void save_sink_logits(torch::autograd::AutogradContext* ctx, const torch::Tensor& sink_logits);
torch::Tensor sinks_grad_if_needed(torch::autograd::AutogradContext* ctx, const torch::Tensor& grad_out,
                                   const torch::Tensor& out, const torch::Tensor& lse);

// The softmax sink logits of query heads [head0, head0 + heads) (a Ulysses rank's), or an undefined tensor
// where the model has none.
inline torch::Tensor sink_logits_of_heads(const torch::Tensor& sink_logits, int64_t head0, int64_t heads) {
  return sink_logits.defined() ? sink_logits.narrow(0, head0, heads) : torch::Tensor();
}

}  // namespace bpbench
