// causal_conv.h: the short causal depthwise convolution of Gated DeltaNet's layer (Qwen3-Next, Qwen3.5: a
// kernel of K = 4 taps over the q, k and v channels, then SiLU), over a piece of rows with the K - 1 rows
// before it given as a halo. Row t's output reads rows t - K + 1 .. t, so a piece [s, e) needs rows
// [s - K + 1, s) of the previous piece, zeros before row 0: what StreamBP through the recurrence keeps beside
// each boundary state, and where the halo's gradient goes back to the previous piece's rows (the layer:
// linear_attention.h).
#pragma once

#include <torch/torch.h>

namespace bpbench {

// x (N, c, C) the piece's rows, halo (N, K - 1, C) the rows before it (zeros at the sequence's start), weight
// (C, K) each channel's taps, oldest first (transformers' conv1d.weight (C, 1, K) squeezed). Returns
// silu(conv(x)) (N, c, C).
torch::Tensor causal_depthwise_conv_silu(const torch::Tensor& x, const torch::Tensor& halo,
                                         const torch::Tensor& weight);

// The K - 1 rows before row `s` of x (N, T, C), zero-filled before row 0: the halo of a piece starting at s.
torch::Tensor conv_halo(const torch::Tensor& x, int64_t s, int64_t kernel);

}  // namespace bpbench
