// recurrent_layer.h: StreamBP's layer backward through a Gated DeltaNet layer (Qwen3.5, Qwen3-Next), whose
// token mixer carries a state along the sequence instead of attending over keys. Shapes use the legend of
// model_config.h and harness/model/linear_attention.h.
#pragma once

#include <torch/torch.h>

#include <functional>

#include "harness/model/model.h"

namespace bpbench {

// Note [StreamBP through the recurrence]. Layer i's backward with its input x_in (N, T, d) and the gradient
// of its output dY (N, T, d), in chunks [s, e) of c = `rows` rows (the last may be shorter), chunk j = s / c:
//   a. one forward of the token mixer, chunk by chunk with no graph (phase "boundary states"): the state
//      entering each chunk, S_j (N, Hv, dk, dv) in the compute dtype and the conv's halo_j (N, K - 1, C),
//      kept; nothing of the T rows is.
//   b. chunks from the last to the first (phase "chunk j"), each forward from its kept state and at once
//      backward:
//        x1, (S_j+1, halo_j+1) = linear_attention_block(x_in[s:e]; S_j, halo_j)
//        y                    = x1 + mlp(mlp_norm(x1))                       (N, c, d)
//      backpropagated from y with dY[s:e] and from the state leaving the chunk with the gradient the later
//      chunk gave its entering state (dS_j+1, dhalo_j+1; none after the last chunk). The weight gradients add
//      into .grad, dx[s:e] is written into dY[s:e] (as Note [StreamBP's layer backward], layerwise.h), and
//      dS_j, dhalo_j go on to chunk j - 1. A halo longer than the chunk (c < K - 1) reaches back through
//      halo_j to earlier chunks' rows, which its gradient carries.
// What it keeps: D = ceil(T / c) states and halos, D (N Hv dk dv s_c + N (K - 1) C s) bytes, plus one chunk's
// graph; where a state outweighs the c rows of x it stands for, a longer partition keeps fewer of them. What
// it computes again: the token mixer's forward once (a.), and each chunk's forward in b., as StreamBP does.
// Returns dx = dL/dx_in in dy's buffer, or an undefined tensor where x_in requires no grad (LoRA's layer 0).
torch::Tensor streambp_recurrent_layer_backward(const Model& model, int64_t i, const torch::Tensor& x_in,
                                                torch::Tensor dy, int64_t rows,
                                                const std::function<void(int64_t j)>& between_chunks = {});

}  // namespace bpbench
