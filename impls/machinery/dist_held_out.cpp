// dist_held_out.cpp: a distributed training run's held-out loss (dist_common.h: DistStrategy::held_out_loss).
//
// Every rank evaluates its own part of the held-out batch, the part a training step gives it: its examples
// (data parallel) or its rows of every sequence (sequence parallel), through the same no-grad layer forward
// its step runs. So the evaluation holds a subset of what a step's forward holds and never sets a rank's
// peak, as on one process (docs/estimate.md, "Training runs"). The global loss is combined as a step's:
// DistStep's normalisers, DPO's sequence sums all-reduced before its f.
#include "impls/machinery/dist_common.h"
#include "impls/machinery/layerwise.h"
#include "impls/machinery/sequence_parallel.h"
#include "profiles/memory.h"

namespace bpbench::dist {

using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;

RowsForward DistStrategy::no_grad_layer(DistStep&, const StepInputs& in) const {
  return [&m = in.model, rows = in.partition.rows](int64_t i, const torch::Tensor& x) {
    return m.layer_in_chunks(i, x, rows);
  };
}

torch::Tensor DistStrategy::held_out_loss(const StepInputs& in) const {
  PhaseScope phase("held-out loss");
  torch::NoGradGuard no_grad;
  DistStep step(*this, in);  // the global normalisers (one all_reduce); under shard_params the layer shards
  const Model& m = in.model;
  const Batch& batch = step.batch();
  const RowsForward layer = no_grad_layer(step, in);
  torch::Tensor x;
  {
    MemoryScope scope(Category::activations);
    x = m.embed(batch.input_ids);  // (N, rows, d)
    for (int64_t i = 0; i < m.config.layers; ++i) {
      step.gather_layer(i);
      x = layer(i, x);
      step.release_layer(i);
    }
  }
  const int64_t rows = x.size(1);
  auto sums =
      streamed_sequence_sums(m, x, batch, in.objective,
                             in.partition.logits_rows > 0 ? std::min(in.partition.logits_rows, rows) : rows);
  if (sequence_parallel() && !in.objective.outer_is_linear()) sums = all_sequence_sums(sums, step.comm());
  return step.global_loss(in.objective.outer(sums, batch));
}

}  // namespace bpbench::dist
