// streambp_dist.cpp: distributed StreamBP: data parallel over R ranks (one batch per rank), ZeRO-2 gradient
// sharding, optional ZeRO-3-style parameter sharding, on a c10d process group (comm.h, dist_common.h).
//
// Per rank, the local step is streambp's (streambp.cpp; a-c are layerwise.cpp's streambp_layer_backward),
// with collectives placed where a layer is complete:
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

#include "impls/machinery/dist_common.h"
#include "impls/machinery/layerwise.h"
#include "impls/machinery/layerwise_estimate.h"
#include "profiles/memory.h"

namespace bpbench {
namespace {

using dist::DistStep;
using profiles::PhaseScope;

class StreamBPDist final : public dist::DistStrategy {
 public:
  explicit StreamBPDist(const dist::DistOptions& options)
      : DistStrategy("streambp-dist",
                     "StreamBP, data parallel over c10d ranks: ZeRO-2 reduce_scatter once per layer",
                     options) {}
  bool uses_partition() const override { return true; }
  bool uses_logits_partition() const override { return true; }
  // streambp's phases on the rank's rows, with x_0 kept (checkpointed_forward), and the buckets and shards.
  std::vector<PhaseEstimate> memory_phases(const MemoryTerms& D,
                                           const Partitioning& partition) const override {
    return data_parallel_phases(D, streambp_phases(D, partition, FirstInput::kept));
  }
  FlopSchedule flop_schedule() const override { return streambp_flop_schedule(); }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    DistStep step(*this, in);  // global normalisers: one all_reduce
    const Model& m = in.model;
    auto xs = step.checkpointed_forward(in.partition.rows);  // L + 1 tensors (N, T, d)

    // Head: lm_head and final norm grads, reduced once (tied: the lm_head's join the embedding's bucket).
    step.open_head();
    auto head = streamed_head_backward(m, xs.back(), step.batch(), in.objective, in.partition.logits_rows, {},
                                       HeadDx::into_x);  // x_L becomes dL/dx_L
    step.reduce_and_close(step.head());
    xs.pop_back();

    auto dy = std::move(head.dx);  // (N, T, d); held once, so each layer frees the one above's
    for (int64_t i = m.config.layers - 1; i >= 0; --i) {
      PhaseScope phase(fmt::format("layer {} backward", i));
      step.gather_layer(i);  // shard_params: once for all chunks
      step.open(step.layer(i));
      auto x_in = xs[i].detach().requires_grad_(m.input_gradient_needed(i));
      xs[i] = torch::Tensor();
      // naive_comm: what the design avoids, a reduction per chunk (the last one after the layer is done).
      std::function<void(int64_t)> between_chunks;
      if (options_.naive_comm) between_chunks = [&](int64_t) { step.reduce(step.layer(i)); };
      dy = streambp_layer_backward(m, i, x_in, std::move(dy), in.partition.rows, between_chunks);
      step.reduce_and_close(step.layer(i));  // after the last chunk AND the K/V backward
      step.release_layer(i);
    }

    step.embedding_backward(dy);
    return step.finish(head.loss);
  }
};

}  // namespace

std::unique_ptr<dist::DistStrategy> make_streambp_dist(const dist::DistOptions& options) {
  return std::make_unique<StreamBPDist>(options);
}

}  // namespace bpbench
