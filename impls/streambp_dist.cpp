// streambp_dist.cpp: distributed StreamBP: data parallel over R ranks (one batch per rank), ZeRO-2 gradient
// sharding, optional ZeRO-3-style parameter sharding, on a c10d process group (comm.h, dist_common.h).
//
// Per rank, the local step is streambp's (streambp.cpp), with collectives placed where a layer is complete:
//
//   forward (no grad): x_0 = embed(ids); x_{i+1} = layer_i(x_i)        keep x_i (N, T, d)
//                      [shard_params: all_gather layer i's parameters before layer_i, free them after]
//   head: logits in logits_partition rows (layerwise.cpp); grads into W_lm, final norm (W_lm = embed if tied)
//         reduce_scatter(head)                                       1 call  [tied: lm_head waits for embed]
//   layer i = L-1..0, with dY (N, T, d):
//         [shard_params: all_gather layer i's parameters, kept for every chunk]
//     a.  K, V = project_kv(attn_norm(x_i)) for all T rows, leaves           (N, Hkv, T, hd)
//     b.  per chunk [s, e): forward q, attention vs K[:e], V[:e], MLP -> y[s:e]; backward with dY[s:e]
//         [naive_comm: reduce_scatter(layer i) after each chunk but the last]
//     c.  K/V path backward with the accumulated dK, dV; dx is the next dY
//         reduce_scatter(layer i)                                    1 call (naive_comm: D in all)
//         free layer i's full gradient buffer (and its gathered parameters)
//   embedding backward; reduce_scatter(embedding)                    1 call
//
// Gradient collectives per step: L + 2 reduce_scatters (one per layer, head, embedding; a group without a
// trainable parameter is skipped), naive_comm: D L + 2, D = ceil(T / partition). Plus two small all_reduces
// (loss normalisers before, the loss after) and, under shard_params, 2 L all_gathers (forward, backward).
// A layer's full-size gradient buffer exists only while that layer runs backward; what survives the step is
// this rank's 1/R shard of every group (DistStrategy::last_gradient_shards).
#include <fmt/format.h>

#include "impls/dist_common.h"
#include "impls/layerwise.h"
#include "profiles/memory.h"

namespace bpbench {
namespace {

using dist::DistStep;
using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;

class StreamBPDist final : public dist::DistStrategy {
 public:
  using DistStrategy::DistStrategy;

  std::string name() const override { return "streambp-dist"; }
  std::string description() const override {
    return fmt::format("StreamBP, data parallel over c10d ranks: ZeRO-2 reduce_scatter once per layer ({})",
                       options_.label());
  }
  bool uses_partition() const override { return true; }
  bool uses_logits_partition() const override { return true; }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    DistStep step(*this, in);  // global normalisers: one all_reduce
    const Model& m = in.model;
    auto xs = step.checkpointed_forward(in.partition.rows);  // L + 1 tensors (N, T, d)

    // Head: lm_head and final norm grads, reduced once. Tied: the lm_head is the embedding's gradient bucket,
    // open until the embedding backward has added its part.
    step.open(step.head());
    if (step.tied()) step.open(step.embedding());
    auto head = streamed_head_backward(m, xs.back(), step.batch(), in.objective, in.partition.logits_rows);
    step.reduce_and_close(step.head());
    xs.pop_back();

    auto dy = head.dx;  // (N, T, d)
    for (int64_t i = m.config.layers - 1; i >= 0; --i) {
      PhaseScope phase(fmt::format("layer {} backward", i));
      step.gather_layer(i);  // shard_params: once for all chunks
      step.open(step.layer(i));
      auto x_in = xs[i].detach().requires_grad_(true);
      xs[i] = torch::Tensor();
      dy = layer_backward(step, m, i, x_in, std::move(dy), in.partition.rows);
      step.reduce_and_close(step.layer(i));  // after the last chunk AND the K/V backward
      step.release_layer(i);
    }

    step.open(step.embedding());
    embedding_backward(m, step.batch().input_ids, dy);
    step.reduce_and_close(step.embedding());
    return step.finish(head.loss);
  }

 private:
  // streambp's layer backward (streambp.cpp), with naive_comm's per-chunk reduction. Returns dL/dx_in
  // (N, T, d) given dL/dy (N, T, d); layer i's weight gradients accumulate in its open bucket.
  torch::Tensor layer_backward(DistStep& step, const Model& m, int64_t i, const torch::Tensor& x_in,
                               torch::Tensor dy, int64_t rows) const {
    const int64_t T = x_in.size(1);
    // a. K/V path, all rows, kept with its graph until step c.
    KV kv;
    torch::Tensor k_leaf, v_leaf, dk, dv;
    {
      MemoryScope scope(Category::kv);
      kv = m.project_kv(i, m.attn_norm(i, x_in), 0);  // (N, Hkv, T, hd) each
      k_leaf = kv.k.detach().requires_grad_(true);
      v_leaf = kv.v.detach().requires_grad_(true);
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
      const int64_t c = std::min(rows, T - s), e = s + c;
      {
        PhaseScope phase(fmt::format("chunk {}", j));
        MemoryScope scope(Category::activations);
        auto x_rows = x_in.detach().narrow(1, s, c).requires_grad_(true);   // (N, c, d)
        auto k_vis = k_leaf.detach().narrow(2, 0, e).requires_grad_(true);  // (N, Hkv, e, hd)
        auto v_vis = v_leaf.detach().narrow(2, 0, e).requires_grad_(true);
        auto q = m.project_q(i, m.attn_norm(i, x_rows), s);                          // (N, Hq, c, hd)
        auto y = m.mlp_block(i, m.attention_block(i, x_rows, q, KV{k_vis, v_vis}));  // (N, c, d)
        y.backward(dy.narrow(1, s, c));
        dx.narrow(1, s, c).copy_(x_rows.grad());
        dk.narrow(2, 0, e).add_(k_vis.grad());
        dv.narrow(2, 0, e).add_(v_vis.grad());
      }
      // naive_comm: what the design avoids, a reduction per chunk (the last one waits for step c).
      if (options_.naive_comm && e < T) step.reduce(step.layer(i));
    }
    dy = torch::Tensor();
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

std::unique_ptr<dist::DistStrategy> make_streambp_dist(const dist::DistOptions& options) {
  return std::make_unique<StreamBPDist>(options);
}

std::unique_ptr<Strategy> make_streambp_dist_strategy() {
  return make_streambp_dist(dist::default_dist_options());
}

}  // namespace bpbench
