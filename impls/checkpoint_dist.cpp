// checkpoint_dist.cpp: layerwise gradient checkpointing, data parallel with the same ZeRO-2 reduction as
// streambp-dist: the baseline it is compared with (dist_common.h for groups, normalisation and shards).
//
//   forward (no grad): x_0 = embed(ids); x_{i+1} = layer_i(x_i), keeping every x_i (N, T, d)
//                      [shard_params: all_gather layer i's parameters around layer_i]
//   head: Hugging Face style, full logits (N, T, V), as the paper's checkpoint baseline; reduce_scatter(head)
//   layer i = L-1..0: re-run layer i with grad from x_i, backward with dY -> dx_i; reduce_scatter(layer i);
//                     free its full gradient buffer [and its gathered parameters]
//   embedding backward; reduce_scatter(embedding)
//
// Gradient collectives per step: L + 2 reduce_scatters. naive_comm changes nothing here: a checkpointed layer
// backpropagates in one piece (D = 1).
#include <utility>

#include "impls/machinery/dist_common.h"
#include "impls/machinery/layerwise.h"
#include "impls/machinery/layerwise_estimate.h"
#include "profiles/memory.h"

namespace bpbench {
namespace {

using dist::DistStep;
using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;

class CheckpointDist final : public dist::DistStrategy {
 public:
  explicit CheckpointDist(const dist::DistOptions& options)
      : DistStrategy("checkpoint-dist", "layerwise checkpointing (full-logits head), data parallel, ZeRO-2",
                     options) {}
  // checkpoint's phases (whole head) on the rank's rows, and the buckets and shards.
  std::vector<PhaseEstimate> memory_phases(const MemoryTerms& D,
                                           const Partitioning& partition) const override {
    return data_parallel_phases(D, checkpoint_phases(D, partition, /*chunked_head=*/false));
  }
  FlopSchedule flop_schedule() const override {
    FlopSchedule f;
    f.recomputes_layers = true;
    return f;
  }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    DistStep step(*this, in);  // global normalisers: one all_reduce
    const Model& m = in.model;
    auto xs = step.checkpointed_forward(in.batch.seq_len());  // L + 1 tensors (N, T, d)

    torch::Tensor loss, dy;
    step.open_head();
    {
      PhaseScope phase("head");
      MemoryScope scope(Category::logits);
      auto x_last = xs.back().detach().requires_grad_(true);
      auto full_loss = in.objective.loss(m.head_logits(x_last), step.batch());  // logits (N, T, V)
      full_loss.backward();
      loss = full_loss.detach();
      dy = x_last.grad();  // (N, T, d)
    }
    step.reduce_and_close(step.head());
    xs.pop_back();

    dy = step.layers_backward(xs, std::move(dy),
                              [&](int64_t i, const torch::Tensor& x) { return m.layer(i, x); });
    step.embedding_backward(dy);
    return step.finish(loss);
  }
};

}  // namespace

std::unique_ptr<dist::DistStrategy> make_checkpoint_dist(const dist::DistOptions& options) {
  return std::make_unique<CheckpointDist>(options);
}

}  // namespace bpbench
