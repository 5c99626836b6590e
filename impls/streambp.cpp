// streambp.cpp: StreamBP (Luo et al.), exact backpropagation streamed along the sequence.
//
// Forward as checkpointing: keep each layer input x_i (N, T, d), no grad, on the device or, with `offload:
// checkpoints`, in host memory (offload.h), prefetched one layer ahead of the backward.
// Head: logits, loss terms and their gradients exist for one chunk of logits_partition rows at a time
// (layerwise.cpp: streamed_head_backward). Each layer i, from the top, with dY (N, T, d) (layerwise.cpp:
// streambp_layer_backward):
//
//   a. K/V path once, for all T rows, from x_i (a leaf requiring grad), at absolute positions 0..T-1:
//        h = attn_norm(x_i);  K = rope(k_norm(h Wk)), V = h Wv                  K, V: (N, Hkv, T, hd)
//      K and V become leaves; their gradients dK, dV accumulate across chunks.
//   b. per chunk [s, e) of `partition` rows, forward then at once backward:
//        q  = rope(q_norm(attn_norm(x_i[s:e]) Wq)) at positions s..e-1        (N, Hq, c, hd)
//        x1 = x_i[s:e] + o_proj(attention(q, K[:e], V[:e]))                  query p sees keys 0..p
//        y  = x1 + mlp(mlp_norm(x1))                                         (N, c, d)
//        backward y with dY[s:e]: weight grads accumulate in .grad, dx[s:e] through the q and residual
//        paths, dK[:e], dV[:e] per kv head (attention groups queries by kv head: no GQA repeat, ever)
//   c. backward the K/V path once with dK, dV: adds into dx (every row) and Wk, Wv, k_norm, input norm.
//      dx is the next layer's dY.
//
// Peak per layer: K, V, dK, dV, the K/V path's saved tensors (all O(T d)), dx, and ONE chunk's activations:
// never a T x I, T x V or T x T tensor. Chunk j's scores span e_j keys, so attention costs about
// (1 + D) / (2 D) of the full T x T product (D = ceil(T / c) chunks).
#include <fmt/format.h>

#include "impls/layerwise.h"
#include "profiles/memory.h"

namespace bpbench {
namespace {

using profiles::PhaseScope;

class StreamBP final : public Strategy {
 public:
  std::string name() const override { return "streambp"; }
  std::string description() const override {
    return "StreamBP: layers streamed in `partition` rows, LM head in `logits_partition` rows";
  }
  bool uses_partition() const override { return true; }
  bool uses_logits_partition() const override { return true; }
  bool uses_offload() const override { return true; }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    const Model& m = in.model;
    std::unique_ptr<CheckpointStore> owned;
    CheckpointStore& store = checkpoint_store(in, owned);
    auto x_last = checkpointed_forward(m, in.batch.input_ids, in.partition.rows, store);  // x_L (N, T, d)
    auto head = streamed_head_backward(m, x_last, in.batch, in.objective, in.partition.logits_rows);
    x_last = torch::Tensor();
    auto dx = layers_backward(m, store, std::move(head.dx),
                              [&](int64_t i, const torch::Tensor& x_in, torch::Tensor dy) {
                                return streambp_layer_backward(m, i, x_in, std::move(dy), in.partition.rows);
                              });
    embedding_backward(m, in.batch.input_ids, dx);
    return head.loss;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_streambp_strategy() {
  return std::make_unique<StreamBP>();
}

}  // namespace bpbench
