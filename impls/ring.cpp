// ring.cpp: ring context parallelism (torchtitan's context_parallel, Megatron's CP) with layerwise
// checkpointing, over c10d ranks: the ring's baseline, as ulysses is Ulysses'. The layout and the attention
// round the ring: impls/machinery/ring_attention.h; gradient buckets and shards: dist_common.h.
//
// Rank r holds blocks r and 2P-1-r of every sequence (b = ceil(T / 2P) rows each, x: (N, 2b, d)):
//
//   forward (no grad): x_0 = embed(ids); x_{i+1} = layer_i(x_i)           keep x_i (N, 2b, d)
//       layer_i: q, k, v of the rows (RoPE at each block's positions); attention round the ring (P - 1
//                send_recv of the K/V pair); o_proj, MLP on the rows
//   head: logits of the rank's rows whole (N, 2b, V), as the checkpoint baseline; DPO: S all-reduced first
//         reduce_scatter(head)
//   layer i = L-1..0: layer_i again from x_i with grad (P - 1 exchanges), backward with dY (P - 1 K/V and P
//         dK/dV exchanges); dx is the next dY; reduce_scatter(layer i)
//   embedding backward; reduce_scatter(embedding)
//
// Collectives per step: L (4P - 3) send_recvs, L + 2 reduce_scatters, 2 all_reduces (normalisers, loss),
// DPO one more (the sequence sums). No head count constrains P. Sliding-window layers skip the pieces
// outside every window, and the sends no rank needs (ring_attention.h). Not yet: shard_params (refused).
#include "impls/machinery/ring_estimate.h"
#include "impls/machinery/ring_strategy.h"
#include "impls/machinery/sequence_parallel.h"

namespace bpbench {
namespace {

class Ring final : public dist::RingStrategy {
 public:
  explicit Ring(const dist::DistOptions& options)
      : RingStrategy("ring",
                     "ring context parallelism: K/V passed round the ranks on a zigzag layout, layerwise "
                     "checkpointing, full-logits head",
                     options) {}
  FlopSchedule flop_schedule() const override {  // the no-grad forward: the layers once more
    FlopSchedule f;
    f.recomputes_layers = true;
    f.ring_attention = true;
    return f;
  }
  CommSchedule comm_schedule() const override { return {CommSchedule::Exchange::ring}; }
  // One rank's phases (ring_estimate.h).
  std::vector<PhaseEstimate> memory_phases(const MemoryTerms& D, const Partitioning&) const override {
    return ring_phases(D);
  }

  dist::RowsForward no_grad_layer(dist::DistStep& step, const StepInputs& in) const override {
    return [&m = in.model, place = place_of(step)](int64_t i, const torch::Tensor& x) {
      return dist::ring_layer(m, i, x, place);
    };
  }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    dist::DistStep step(*this, in);  // global normalisers: one all_reduce
    const dist::RingPlace place = place_of(step);
    return dist::checkpointed_rows_step(
        step, in, [&](int64_t i, const torch::Tensor& x) { return dist::ring_layer(in.model, i, x, place); });
  }
};

}  // namespace

std::unique_ptr<dist::DistStrategy> make_ring(const dist::DistOptions& options) {
  return std::make_unique<Ring>(options);
}

}  // namespace bpbench
