// ulysses.cpp: DeepSpeed-Ulysses sequence parallelism with layerwise checkpointing, over c10d ranks: the
// baseline streambp-ulysses is measured against (the layout, the exchanges and the loss across ranks:
// sequence_parallel.h; gradient buckets and shards: dist_common.h).
//
// Rank r holds rows [r Ts, (r+1) Ts) of every sequence (Ts = ceil(T / P), x: (N, Ts, d)):
//
//   forward (no grad): x_0 = embed(ids); x_{i+1} = layer_i(x_i)           keep x_i (N, Ts, d)
//       layer_i: q, k, v of the rows -all_to_all-> the rank's heads over all T' rows; attention;
//                -all_to_all-> the rows; o_proj, MLP                       [shard_params: all_gather around]
//   head: logits of the rank's rows whole (N, Ts, V), as the checkpoint baseline; DPO: S all-reduced first
//         reduce_scatter(head)
//   layer i = L-1..0: layer_i again from x_i with grad (its two all-to-alls), backward with dY: autograd runs
//         the exchanges backwards (two more); dx is the next dY; reduce_scatter(layer i)
//   embedding backward; reduce_scatter(embedding)
//
// Collectives per step: 6 L all_to_alls (2 L forward, 2 L again, 2 L backward), L + 2 reduce_scatters, 2
// all_reduces (normalisers, loss), DPO one more (the sequence sums).
#include <fmt/format.h>

#include "impls/machinery/dist_common.h"
#include "impls/machinery/layerwise.h"
#include "impls/machinery/sequence_parallel.h"
#include "impls/machinery/sequence_parallel_estimate.h"

namespace bpbench {
namespace {

using dist::DistStep;
using dist::SequenceLayout;

class Ulysses final : public dist::DistStrategy {
 public:
  explicit Ulysses(const dist::DistOptions& options)
      : DistStrategy("ulysses",
                     "DeepSpeed-Ulysses sequence parallelism: all-to-all between sequence and head shards, "
                     "layerwise checkpointing, full-logits head",
                     options) {}
  FlopSchedule flop_schedule() const override {  // the no-grad forward: the layers once more
    FlopSchedule f;
    f.recomputes_layers = true;
    return f;
  }
  CommSchedule comm_schedule() const override { return {CommSchedule::Exchange::ulysses}; }
  bool data_parallel() const override { return false; }
  bool sequence_parallel() const override { return true; }
  // One rank's phases (sequence_parallel_estimate.h); shard_params is not estimated.
  bool estimated() const override { return !options_.shard_params; }
  std::vector<PhaseEstimate> memory_phases(const MemoryTerms& D, const Partitioning&) const override {
    return ulysses_phases(D);
  }

  dist::RowsForward no_grad_layer(DistStep& step, const StepInputs& in) const override {
    return [&m = in.model, &comm = step.comm(),
            layout = dist::layout_of(in.model.config, step.batch(), step.comm())](int64_t i,
                                                                                  const torch::Tensor& x) {
      return dist::sequence_parallel_layer(m, i, x, layout, comm);
    };
  }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    DistStep step(*this, in);  // global normalisers: one all_reduce
    auto& comm = step.comm();
    const SequenceLayout layout = dist::layout_of(in.model.config, step.batch(), comm);
    return dist::checkpointed_rows_step(step, in, [&](int64_t i, const torch::Tensor& x) {
      return dist::sequence_parallel_layer(in.model, i, x, layout, comm);
    });
  }
};

}  // namespace

std::unique_ptr<dist::DistStrategy> make_ulysses(const dist::DistOptions& options) {
  return std::make_unique<Ulysses>(options);
}

}  // namespace bpbench
