// checkpoint.cpp: layerwise gradient checkpointing, the paper's baseline, in two flavours.
//
//   forward (no grad):  x_0 = embed(ids); x_{i+1} = layer_i(x_i), keeping every x_i (N, T, d) on the device
//                       or, with `offload: checkpoints`, in host memory (offload.h)
//   head:               "checkpoint": Hugging Face style, full logits (N, T, V) in the model dtype, upcast to
//                       float32 for the loss; "checkpoint-chunked-head": the head streamed in
//                       logits_partition rows (a fairer, stronger baseline: no (N, T, V) tensor)
//   backward, i = L-1..0: re-run layer i with grad from x_i, backward with dY, dY <- dx_i, drop x_i
//                       (x_{i-1} prefetched meanwhile)
#include <fmt/format.h>

#include "harness/model/phase_builder.h"
#include "impls/machinery/layerwise.h"
#include "impls/machinery/layerwise_estimate.h"
#include "impls/machinery/recurrent_estimate.h"
#include "profiles/memory.h"

namespace bpbench {
namespace {

using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;

class Checkpoint final : public Strategy {
 public:
  explicit Checkpoint(bool chunked_head) : chunked_head_(chunked_head) {}

  std::string name() const override { return chunked_head_ ? "checkpoint-chunked-head" : "checkpoint"; }
  std::string description() const override {
    return chunked_head_
               ? "layerwise checkpointing with the LM head streamed in logits_partition rows"
               : "layerwise checkpointing, Hugging Face head with full float32 logits (paper baseline)";
  }
  bool uses_logits_partition() const override { return chunked_head_; }
  bool uses_offload() const override { return true; }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    const Model& m = in.model;
    std::unique_ptr<CheckpointStore> owned;
    CheckpointStore& store = checkpoint_store(in, owned);
    auto x_last = checkpointed_forward(m, in.batch.input_ids, in.batch.seq_len(), store);  // x_L (N, T, d)

    torch::Tensor loss, dx_last;  // dL/dx_L
    if (chunked_head_) {
      auto head = streamed_head_backward(m, x_last, in.batch, in.objective, in.partition.logits_rows);
      loss = head.loss;
      dx_last = head.dx;
    } else {
      PhaseScope phase("head");
      MemoryScope scope(Category::logits);
      auto x_rows = x_last.detach().requires_grad_(true);
      auto full_loss = in.objective.loss(m.head_logits(x_rows), in.batch);  // logits (N, T, V)
      full_loss.backward();
      loss = full_loss.detach();
      dx_last = x_rows.grad();
    }
    x_last = torch::Tensor();

    auto dx = layers_backward(m, store, std::move(dx_last),
                              [&](int64_t i, const torch::Tensor& x_in, torch::Tensor dy) {
                                MemoryScope scope(Category::activations);
                                m.layer(i, x_in).backward(dy);
                                return x_in.grad();
                              });
    embedding_backward(m, in.batch.input_ids, dx);
    return loss;
  }

  bool estimated() const override { return true; }
  std::vector<PhaseEstimate> memory_phases(const MemoryTerms& D,
                                           const Partitioning& partition) const override;
  FlopSchedule flop_schedule() const override {
    FlopSchedule f;
    f.recomputes_layers = true;
    f.streams_head = chunked_head_;
    return f;
  }

 private:
  bool chunked_head_;
};

// Its estimate: the checkpointed forward, the head (whole or chunked) over every layer input, then the top
// layer's re-forward graph through its MLP and attention backward (and the topmost Gated DeltaNet layer's).
std::vector<PhaseEstimate> Checkpoint::memory_phases(const MemoryTerms& D,
                                                     const Partitioning& partition) const {
  return checkpoint_phases(D, partition, chunked_head_);
}

}  // namespace

// Checkpointing's phases (layerwise_estimate.h), shared with checkpoint-dist.
std::vector<PhaseEstimate> checkpoint_phases(const MemoryTerms& D, const Partitioning& partition,
                                             bool chunked_head) {
  const int64_t cl = partition.logits_rows;
  std::vector<PhaseEstimate> out;
  out.push_back(checkpointed_forward_phase(D, D.T));
  if (D.hybrid()) out.push_back(linear_forward_phase(D, D.T, FirstInput::kept));
  {
    PhaseBuilder p(chunked_head ? "head chunk" : "head");
    add_checkpoints(p, D, fmt::format("layer inputs x_0..x_{}", D.L), D.L + 1, /*offloaded_on_device=*/1);
    if (chunked_head)
      add_chunk_head(p, D, cl);
    else
      add_whole_head(p, D);
    out.push_back(p.done());
  }
  for (const auto& mixer : whole_mixers(D)) out.push_back(whole_mlp_backward(D, mixer));
  out.push_back(whole_attention_backward(D, 3, "dy, x_in.grad, the residual's gradient"));
  // The layer's output lives to the end of the expression that runs its backward.
  if (D.hybrid()) {
    out.push_back(whole_linear_forward(D, 1, "dy"));
    out.push_back(whole_linear_backward(D, 3, "dy, the layer's output, dx1"));
  }
  return out;
}

std::unique_ptr<Strategy> make_checkpoint_strategy() {
  return std::make_unique<Checkpoint>(false);
}
std::unique_ptr<Strategy> make_checkpoint_chunked_head_strategy() {
  return std::make_unique<Checkpoint>(true);
}

}  // namespace bpbench
