// latent_attention.h: StreamBP's attention for multi-head latent attention, over the keys' latent rows
// instead of their expanded K and V.
//
// Note [StreamBP through the latent]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// In the expanded form (Note [MLA in the expanded form], model.cpp) a StreamBP layer holds K, V and their
// gradient accumulators for all T rows: 2 x Hq x hd values a token each, 49,152 for DeepSeek-V3 (hd 192,
// the values padded). What K and V are made from is smaller: the normed latent and the RoPE key, r + dr
// values a token (576). So a layer's backward holds those for all rows (MlaLatent) and their gradients
// (MlaLatentGrads, float32 for a bfloat16 model), and each chunk's attention expands K and V from them one
// key block at a time:
//   forward   for each key block b of the visible keys (the prefix [0, s) in blocks, then the chunk's own
//             rows [s, e), causal): K_b, V_b = expand(latent_b, k_rot_b) under no grad, the block's
//             partial attention (attention_partial.h) merged into the chunk's output and logsumexp; K_b,
//             V_b released.
//   backward  for each block again: K_b, V_b expanded with a graph from kv_b and the block's latent rows,
//             the block's (dQ, dK, dV) from the merged output and logsumexp, then that expansion
//             backpropagated with (dK_b, dV_b): kv_b's weight gradient accumulates in its .grad, the
//             block's latent and RoPE-key gradients are added into the accumulators.
// The chunk's K/V path backward (kv_a, its norm, RoPE) then runs from the finished accumulators, rows [s, e)
// at a time, as in the expanded form. What a token costs the layer's backward is (r + dr) x (s + acc)
// bytes, against 2 x Hq x hd x (s + acc); the price is kv_b's expansion once per (chunk, key block) pair
// in the forward and again, with its backward, in the backward: about (1 + D) / 2 expansions of each key
// row over D chunks, where the expanded form makes K and V of each row once.
//
// Legend (model_config.h): N batch, Hq query heads (= kv heads under MLA), c query rows, e keys, hd head
// size (qk_nope + qk_rope), r kv_lora_rank, dr qk_rope_head_dim.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "harness/model/model.h"

namespace bpbench {

// The latent rows' gradient accumulators, the shapes of MlaLatent's.
struct MlaLatentGrads {
  torch::Tensor latent, k_rot;
};

// Causal attention of layer `layer`'s queries q (N, Hq, c, hd), the last c rows of the e keys whose latent
// rows are `keys` (N, e, r) and (N, e, dr), with K and V expanded `block` key rows at a time -> (N, c, Hq*hd)
// as Model::attention_heads returns it. Differentiable in q; its backward adds the keys' latent gradients
// into `grads` and kv_b's into its parameters' .grad (the Note). StreamBP passes block = its chunk's rows:
// what one block's expansion holds, (N, Hq, block, hd) K and V with their graph, is then a chunk's size at
// any T.
torch::Tensor latent_chunk_attention(const Model& model, int64_t layer, const torch::Tensor& q,
                                     const MlaLatent& keys, const MlaLatentGrads& grads, int64_t block);

// The same attention's values under no grad (StreamBP's checkpointed forward, Model::layer_in_chunks): no
// T-row K or V either.
torch::Tensor latent_attention_values(const Model& model, int64_t layer, const torch::Tensor& q,
                                      const MlaLatent& keys, int64_t block);

}  // namespace bpbench
