// router_balance.h: the load-balancing auxiliary loss of mixture-of-experts routers, as transformers adds it
// to the training loss (Qwen3-MoE's and Mixtral's load_balancing_loss_func, times router_aux_loss_coef).
// Legend: model_config.h; here
//   C_e  top-k choices of expert e      S_e  expert e's softmax probabilities, summed      R  rows
// each summed over every mixture-of-experts layer and every row of the step (transformers concatenates the
// layers' router logits before it counts):
//
//   aux = E * sum_e (C_e / R) (S_e / R),       loss = objective's loss + coef * aux
//
// C is a count, not differentiable, so d(coef aux) / d p[row, e] = coef E C_e / R^2: the same constant for
// every row of every layer. The backward adds it to each router's probabilities (a hook on them) once C is
// known, which is after the step's first forward.
//
// Note [Counting in the first forward]. Every strategy runs every layer over every row before its first
// head call (the head needs the last layer's output), and only recomputes afterwards (checkpoint, MsT,
// StreamBP). So C, S and R are counted from begin_step() until the head's first call and never again in the
// step: a recomputed chunk routes its rows the same way and must not count them twice. A data- or
// sequence-parallel step sums the counts over its ranks (`reduce`) before the first constant is used, so the
// loss is the global batch's, as one process over the whole batch computes it.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace bpbench {

class RouterBalance {
 public:
  explicit RouterBalance(double coefficient = 0.0) : coefficient_(coefficient) {}

  double coefficient() const { return coefficient_; }
  bool on() const { return coefficient_ > 0.0; }

  // A new step: counts zeroed, counting on, no reduction over ranks until one is set.
  void begin_step();
  // `reduce` sums the tally, (2E + 1) float64 [C, S, R], over the step's ranks, in place (a collective: every
  // rank calls it at the same point of the same step). `gradient_scale`: the ranks' gradients are averaged
  // (DPO, GRPO data-parallel: the ranks' count), so each rank's part of this global loss goes in that many
  // times.
  void set_reduce(std::function<void(torch::Tensor&)> reduce, int64_t gradient_scale = 1) {
    reduce_ = std::move(reduce);
    gradient_scale_ = gradient_scale;
  }
  // The head's first call: every layer has routed every row (Note [Counting in the first forward]).
  void stop_counting() { counting_ = false; }

  // A router's softmax probabilities p (R', E) in the routing dtype and how many of its rows chose each
  // expert (E, int64, on any device: the dispatch's own counts): counted while counting; where p takes a
  // gradient, the hook that adds coef E C / R^2 to it.
  void observe(const torch::Tensor& probabilities, const torch::Tensor& chosen_counts);

  // coef * aux of the step (0 when off); reduces over the ranks first where that has not happened yet.
  double loss();

 private:
  torch::Tensor probability_gradient();  // (E) in float64: coef E C_e / R^2
  void finish();                         // once a step: the reduction over ranks

  double coefficient_ = 0.0;
  torch::Tensor tally_;  // (2E + 1) float64 [C, S, R], defined from the first observe() of a step
  bool counting_ = false, finished_ = false;
  torch::Tensor gradient_;  // probability_gradient(), made once a step
  std::function<void(torch::Tensor&)> reduce_;
  int64_t gradient_scale_ = 1;
};

}  // namespace bpbench
