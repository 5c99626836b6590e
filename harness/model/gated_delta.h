// gated_delta.h: the gated delta rule, the recurrence of Gated DeltaNet (the linear-attention layers of
// Qwen3-Next and Qwen3.5), in LibTorch ops: the per-token recurrence, the reference, and the chunked WY form
// that a layer runs. Both take the state S entering the rows and return the state leaving them, so a sequence
// runs, and backpropagates, piece by piece: StreamBP through the recurrence keeps S at each partition
// boundary and carries dS backward from the last piece (Note [StreamBP through the recurrence],
// impls/machinery/recurrent_layer.h; the layer: linear_attention.h).
//
// Shapes (N sequences, H value heads, T rows, dk and dv the key and value head dims): q, k (N, H, T, dk),
// already l2-normed (and q's heads repeated to H where the model has fewer key heads); v (N, H, T, dv);
// g (N, H, T), the log of each row's decay (<= 0); beta (N, H, T) in (0, 1); state (N, H, dk, dv).
// The recurrence, row t, with q scaled by `scale` (the model's dk^-1/2):
//   S = exp(g_t) S;   S += k_t (beta_t (v_t - S^T k_t))^T;   o_t = S^T q_t
// Every tensor in one floating dtype (float32 or float64); the caller casts.
#pragma once

#include <torch/torch.h>

namespace bpbench {

struct DeltaRuleOutput {
  torch::Tensor out;    // (N, H, T, dv)
  torch::Tensor state;  // (N, H, dk, dv): S after the last row
};

// Row by row, as the recurrence reads: the reference for the chunked form (T steps of small ops).
DeltaRuleOutput gated_delta_rule_recurrent(const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v, const torch::Tensor& g,
                                           const torch::Tensor& beta, const torch::Tensor& state,
                                           double scale);

// Chunks of `chunk` rows (the last may be shorter), each in the WY form: within a chunk the rows' corrections
// are one unit lower-triangular solve, so the work is matmuls of chunk x chunk and chunk x dk; between chunks
// only S travels. Equal to the recurrence to round-off, and differentiable by autograd in every input.
DeltaRuleOutput gated_delta_rule_chunked(const torch::Tensor& q, const torch::Tensor& k,
                                         const torch::Tensor& v, const torch::Tensor& g,
                                         const torch::Tensor& beta, const torch::Tensor& state, double scale,
                                         int64_t chunk);

}  // namespace bpbench
