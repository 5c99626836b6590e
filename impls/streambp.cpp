// streambp.cpp: StreamBP (Luo et al.), exact backpropagation streamed along the sequence.
//
// Forward as checkpointing: keep each layer input x_i (N, T, d), no grad.
// Head: logits, loss terms and their gradients exist for one chunk of logits_partition rows at a time
// (layerwise.cpp: streamed_head_backward). Each layer i, from the top, with dY (N, T, d):
//
//   a. K/V path once, for all T rows, from x_i (a leaf requiring grad), at absolute positions 0..T-1:
//        h = attn_norm(x_i);  K = rope(k_norm(h Wk)), V = h Wv                  K, V: (N, Hkv, T, hd)
//      K and V become leaves; their gradients dK, dV accumulate across chunks.
//   b. per chunk [s, e) of `partition` rows, forward then at once backward:
//        q  = rope(q_norm(attn_norm(x_i[s:e]) Wq)) at positions s..e-1        (N, Hq, c, hd)
//        x1 = x_i[s:e] + o_proj(attention(q, K[:e], V[:e]))                  query p sees keys 0..p
//        y  = x1 + mlp(post_norm(x1))                                         (N, c, d)
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

using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;

class StreamBP final : public Strategy {
 public:
  std::string name() const override { return "streambp"; }
  std::string description() const override {
    return "StreamBP: layers streamed in `partition` rows, LM head in `logits_partition` rows";
  }
  bool uses_partition() const override { return true; }
  bool uses_logits_partition() const override { return true; }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    const Model& m = in.model;
    auto xs = checkpointed_forward(m, in.batch.input_ids, in.partition.rows);
    auto head = streamed_head_backward(m, xs.back(), in.batch, in.objective, in.partition.logits_rows);
    xs.pop_back();
    auto dy = head.dx;
    for (int64_t i = m.config.layers - 1; i >= 0; --i) {
      PhaseScope phase(fmt::format("layer {} backward", i));
      auto x_in = xs[i].detach().requires_grad_(true);
      xs[i] = torch::Tensor();
      dy = layer_backward(m, i, x_in, std::move(dy), in.partition.rows);
    }
    embedding_backward(m, in.batch.input_ids, dy);
    return head.loss;
  }

 private:
  // Returns dL/dx_in (N, T, d) given dL/dy (N, T, d); accumulates every weight gradient of layer i.
  static torch::Tensor layer_backward(const Model& m, int64_t i, const torch::Tensor& x_in, torch::Tensor dy,
                                      int64_t rows) {
    const int64_t T = x_in.size(1);
    // a. K/V path, all rows, kept with its graph until step c.
    KV kv;
    torch::Tensor k_leaf, v_leaf, dk, dv;
    {
      MemoryScope scope(Category::kv);
      kv = m.project_kv(i, m.attn_norm(i, x_in), 0);  // (N, Hkv, T, hd) each
      k_leaf = kv.k.detach().requires_grad_(true);
      v_leaf = kv.v.detach().requires_grad_(true);
      // bf16: accumulate dK/dV over chunks in float32, as one big matmul would, then round once.
      const auto acc = kv.k.scalar_type() == torch::kBFloat16 ? torch::kFloat : kv.k.scalar_type();
      dk = torch::zeros_like(k_leaf, k_leaf.options().dtype(acc));
      dv = torch::zeros_like(v_leaf, v_leaf.options().dtype(acc));
    }
    torch::Tensor dx;
    {
      MemoryScope scope(Category::activations);
      dx = torch::empty_like(x_in);
    }
    // b. chunks: forward then backward, one chunk's activations alive at a time.
    for (int64_t s = 0, j = 0; s < T; s += rows, ++j) {
      PhaseScope phase(fmt::format("chunk {}", j));
      MemoryScope scope(Category::activations);
      const int64_t c = std::min(rows, T - s), e = s + c;
      auto x_rows = x_in.detach().narrow(1, s, c).requires_grad_(true);   // (N, c, d)
      auto k_vis = k_leaf.detach().narrow(2, 0, e).requires_grad_(true);  // (N, Hkv, e, hd)
      auto v_vis = v_leaf.detach().narrow(2, 0, e).requires_grad_(true);
      auto q = m.project_q(i, m.attn_norm(i, x_rows), s);  // (N, Hq, c, hd)
      auto y = m.mlp_block(i, m.attention_block(i, x_rows, q, KV{k_vis, v_vis}));
      y.backward(dy.narrow(1, s, c));
      dx.narrow(1, s, c).copy_(x_rows.grad());
      dk.narrow(2, 0, e).add_(k_vis.grad());
      dv.narrow(2, 0, e).add_(v_vis.grad());
    }
    dy = torch::Tensor();  // the layer above's gradient is no longer needed
    // c. K/V path backward once; its dx contribution lands in x_in.grad.
    {
      MemoryScope scope(Category::kv);
      torch::autograd::backward({kv.k, kv.v}, {dk.to(kv.k.scalar_type()), dv.to(kv.v.scalar_type())});
    }
    dx.add_(x_in.grad());
    return dx;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_streambp_strategy() {
  return std::make_unique<StreamBP>();
}

}  // namespace bpbench
