// plain.cpp: plain backpropagation, the paper's "w/o ckpt" column.
//
// Full autograd over the whole model: every layer's activations, the (N, T, V) logits, their float32 upcast
// and log-softmax stay alive until backward. The reference every other strategy must match exactly.
#include "impls/strategy.h"
#include "profiles/memory.h"

namespace bpbench {
namespace {

using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;

class Plain final : public Strategy {
 public:
  std::string name() const override { return "plain"; }
  std::string description() const override { return "full autograd, all activations kept (w/o ckpt)"; }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    const Model& m = in.model;
    torch::Tensor loss;
    {
      PhaseScope phase("forward");
      MemoryScope scope(Category::activations);
      auto x = m.embed(in.batch.input_ids);  // (N, T, d)
      for (int64_t i = 0; i < m.config.layers; ++i) x = m.layer(i, x);
      PhaseScope head("head");
      MemoryScope logits_scope(Category::logits);
      loss = in.objective.loss(m.head_logits(x), in.batch);  // logits (N, T, V)
    }
    PhaseScope phase("backward");
    MemoryScope scope(Category::activations);
    loss.backward();
    return loss.detach();
  }
};

}  // namespace

std::unique_ptr<Strategy> make_plain_strategy() {
  return std::make_unique<Plain>();
}

}  // namespace bpbench
