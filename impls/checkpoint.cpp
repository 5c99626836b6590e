// checkpoint.cpp: layerwise gradient checkpointing, the paper's baseline, in two flavours.
//
//   forward (no grad):  x_0 = embed(ids); x_{i+1} = layer_i(x_i), keeping every x_i (N, T, d)
//   head:               "checkpoint": Hugging Face style, full logits (N, T, V) in the model dtype, upcast to
//                       float32 for the loss; "checkpoint-chunked-head": the head streamed in
//                       logits_partition rows (a fairer, stronger baseline: no (N, T, V) tensor)
//   backward, i = L-1..0: re-run layer i with grad from x_i, backward with dY, dY <- dx_i, drop x_i
#include <fmt/format.h>

#include "impls/layerwise.h"
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

  torch::Tensor forward_backward(const StepInputs& in) const override {
    const Model& m = in.model;
    auto xs = checkpointed_forward(m, in.batch.input_ids, in.batch.seq_len());  // L + 1 tensors (N, T, d)

    torch::Tensor loss, dy;
    if (chunked_head_) {
      auto head = streamed_head_backward(m, xs.back(), in.batch, in.objective, in.partition.logits_rows);
      loss = head.loss;
      dy = head.dx;
    } else {
      PhaseScope phase("head");
      MemoryScope scope(Category::logits);
      auto x_last = xs.back().detach().requires_grad_(true);
      auto full_loss = in.objective.loss(m.head_logits(x_last), in.batch);  // logits (N, T, V)
      full_loss.backward();
      loss = full_loss.detach();
      dy = x_last.grad();
    }
    xs.pop_back();

    for (int64_t i = m.config.layers - 1; i >= 0; --i) {
      PhaseScope phase(fmt::format("layer {} backward", i));
      MemoryScope scope(Category::activations);
      auto x_in = xs[i].detach().requires_grad_(true);
      xs[i] = torch::Tensor();  // the checkpoint lives on only as x_in, freed with it
      m.layer(i, x_in).backward(dy);
      dy = x_in.grad();
    }
    embedding_backward(m, in.batch.input_ids, dy);
    return loss;
  }

 private:
  bool chunked_head_;
};

}  // namespace

std::unique_ptr<Strategy> make_checkpoint_strategy() {
  return std::make_unique<Checkpoint>(false);
}
std::unique_ptr<Strategy> make_checkpoint_chunked_head_strategy() {
  return std::make_unique<Checkpoint>(true);
}

}  // namespace bpbench
