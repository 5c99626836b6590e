// linear_attention.h: Gated DeltaNet, the linear-attention token mixer of Qwen3.5 and Qwen3-Next (three
// layers of four), as transformers 5.17's Qwen3_5GatedDeltaNet computes it, written in LibTorch ops (no
// Triton, no flash-linear-attention). Model::linear_attention_block (model.h) is this layer over a piece of
// rows; its state in and out (LinearState) is what lets a sequence run, and backpropagate, piece by piece.
//
// Legend: model_config.h (Hk, Hv, dk, dv, K, C among it; g' = Hv / Hk). For rows x (N, c, d) after the
// state (S, halo):
//   h          = input_norm(x)                                   (N, c, d), (1 + w)
//   qkv        = h W_qkv                                         (N, c, C): q (Hk dk), k (Hk dk), v (Hv dv)
//   qkv        = silu(causal depthwise conv(halo ; qkv))        K taps a channel (causal_conv.h)
//   q, k       = l2norm(q), l2norm(k) per head, each head repeated g' times   (N, Hv, c, dk)
//   beta       = sigmoid(h W_b)                                  (N, c, Hv)
//   g          = -exp(A_log) softplus(h W_a + dt_bias)           (N, c, Hv): the log of each row's decay
//   o, S'      = gated delta rule(q dk^-1/2, k, v, g, beta; S)   gated_delta.h, chunks of 64 (WY form)
//   x1         = x + out_proj(rmsnorm(o) w_norm silu(h W_z))     per value head, the norm over dv
// The recurrence, the conv, l2norm, beta's cast and the decay run in the compute dtype (float32 under
// bfloat16, as transformers casts), the state is kept in it, and o comes back in the model dtype.
// Right padding needs no mask: pad rows come after every real row and the recurrence is causal.
#pragma once

#include <cstdint>

namespace bpbench {

// The gated delta rule's chunk inside a piece (transformers' torch_chunk_gated_delta_rule's 64): any chunk
// gives the same result to round-off; this one sets the kernel's transients (c x c per head).
inline constexpr int64_t kDeltaRuleChunk = 64;

// l2norm's eps (transformers' l2norm, use_qk_l2norm_in_kernel).
inline constexpr double kL2NormEps = 1e-6;

}  // namespace bpbench
