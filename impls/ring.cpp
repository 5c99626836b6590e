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
// DPO one more (the sequence sums). No head count constrains P. Not yet: sliding-window layers (refused),
// shard_params (refused).
#include <fmt/format.h>

#include "harness/model/attention_partial.h"
#include "impls/machinery/dist_common.h"
#include "impls/machinery/ring_attention.h"
#include "impls/machinery/ring_estimate.h"
#include "impls/machinery/sequence_parallel.h"

namespace bpbench {
namespace {

using dist::DistStep;
using dist::ZigzagLayout;

class Ring final : public dist::DistStrategy {
 public:
  explicit Ring(const dist::DistOptions& options)
      : DistStrategy("ring",
                     "ring context parallelism: K/V passed round the ranks on a zigzag layout, layerwise "
                     "checkpointing, full-logits head",
                     options) {}
  FlopSchedule flop_schedule() const override {  // the no-grad forward: the layers once more
    FlopSchedule f;
    f.recomputes_layers = true;
    f.ring_attention = true;
    return f;
  }
  bool data_parallel() const override { return false; }
  bool sequence_parallel() const override { return true; }
  bool splits_heads() const override { return false; }
  int64_t unpadded_multiple(int64_t ranks) const override { return 2 * ranks; }
  // On CUDA the pairs the estimate knows are flash's (ring_estimate.h); the math form's (float32, or a head
  // flash does not take) are not written.
  std::optional<std::string> estimate_gap(const std::string& device, at::ScalarType dtype,
                                          const ModelConfig& model) const override {
    if (device != "cuda" ||
        partial_kernel_for(torch::Device(torch::kCUDA), dtype, model.head_dim) == PartialKernel::cuda_flash)
      return std::nullopt;
    return "ring on CUDA is estimated with flash's block pairs only (bfloat16, a head flash takes): its math "
           "form's pairs are not written (valid: --dtype bfloat16, or --device cpu)";
  }
  // One rank's phases (ring_estimate.h).
  std::vector<PhaseEstimate> memory_phases(const MemoryTerms& D, const Partitioning&) const override {
    return ring_phases(D);
  }
  Batch local_slice(const Batch& global, int rank, int world) const override {
    return dist::zigzag_batch(global, rank, world);
  }
  std::optional<std::string> unsupported(const CellTraits& traits) const override {
    if (traits.model)
      for (int64_t i = 0; i < traits.model->layers; ++i)
        if (traits.model->window_of(i) > 0)
          return fmt::format(
              "ring: {}'s sliding-window layers are not implemented on the ring yet (valid: models "
              "whose every layer attends causally to all keys)",
              traits.model->name);
    if (options_.shard_params) return "ring: shard_params is not implemented on the ring yet";
    return DistStrategy::unsupported(traits);
  }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    DistStep step(*this, in);  // global normalisers: one all_reduce
    auto& comm = step.comm();
    const ZigzagLayout layout =
        dist::zigzag_layout(step.batch().whole_seq_len, comm.world_size(), comm.rank());
    if (step.batch().seq_len() != layout.rows())
      throw std::logic_error(fmt::format("ring: rank {} holds {} rows, its layout {}", comm.rank(),
                                         step.batch().seq_len(), layout.rows()));
    return dist::checkpointed_rows_step(step, in, [&](int64_t i, const torch::Tensor& x) {
      return dist::ring_layer(in.model, i, x, layout, comm);
    });
  }
};

}  // namespace

std::unique_ptr<dist::DistStrategy> make_ring(const dist::DistOptions& options) {
  return std::make_unique<Ring>(options);
}

}  // namespace bpbench
