// router_balance.cpp: the load-balancing loss's counts, its gradient constant and its value
// (router_balance.h).
#include "harness/model/router_balance.h"

namespace bpbench {

void RouterBalance::begin_step() {
  tally_ = torch::Tensor();
  gradient_ = torch::Tensor();
  counting_ = on();
  finished_ = false;
  reduce_ = nullptr;
  gradient_scale_ = 1;
}

void RouterBalance::observe(const torch::Tensor& probabilities, const torch::Tensor& chosen_counts) {
  if (!on()) return;
  const int64_t E = probabilities.size(-1);
  if (counting_) {
    torch::NoGradGuard no_grad;
    if (!tally_.defined()) tally_ = torch::zeros({2 * E + 1}, probabilities.options().dtype(torch::kDouble));
    tally_.narrow(0, 0, E).add_(chosen_counts.to(tally_.device(), torch::kDouble));
    // In the routing dtype, then float64: transformers sums its probabilities in float32.
    tally_.narrow(0, E, E).add_(probabilities.sum(0).to(torch::kDouble));
    tally_[2 * E].add_(static_cast<double>(probabilities.size(0)));
  }
  if (probabilities.requires_grad()) {
    // The model (which owns this object) outlives every graph of its steps.
    probabilities.register_hook([this](const torch::Tensor& grad) {
      return grad + probability_gradient().to(grad.scalar_type());  // (R', E) + (E)
    });
  }
}

void RouterBalance::finish() {
  if (finished_) return;
  finished_ = true;
  counting_ = false;
  if (reduce_ && tally_.defined()) reduce_(tally_);
}

torch::Tensor RouterBalance::probability_gradient() {
  if (!gradient_.defined()) {
    finish();
    const int64_t E = (tally_.size(0) - 1) / 2;
    const auto rows = tally_[2 * E];
    gradient_ = tally_.narrow(0, 0, E) *
                (coefficient_ * static_cast<double>(E) * static_cast<double>(gradient_scale_)) /
                (rows * rows);  // (E)
  }
  return gradient_;
}

double RouterBalance::loss() {
  if (!on() || !tally_.defined()) return 0.0;
  finish();
  const int64_t E = (tally_.size(0) - 1) / 2;
  const double rows = tally_[2 * E].item<double>();
  const double sum = (tally_.narrow(0, 0, E) * tally_.narrow(0, E, E)).sum().item<double>();
  return coefficient_ * static_cast<double>(E) * sum / (rows * rows);
}

}  // namespace bpbench
