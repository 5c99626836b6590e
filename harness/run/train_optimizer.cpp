// train_optimizer.cpp: AdamW's groups, and the replicated placement of train_optimizer.h.
#include "harness/run/train_optimizer.h"

#include "profiles/memory.h"

namespace bpbench {

using profiles::Category;
using profiles::MemoryScope;

bool takes_weight_decay(const NamedParameter& p) {
  const bool bias = p.name.size() >= 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
  return p.group != ParamGroup::norms && !bias;
}

std::unique_ptr<torch::optim::AdamW> make_adamw(const TrainSpec& spec,
                                                const std::vector<torch::Tensor>& tensors,
                                                const std::vector<bool>& decays) {
  std::vector<torch::Tensor> decayed, not_decayed;
  for (size_t i = 0; i < tensors.size(); ++i) (decays[i] ? decayed : not_decayed).push_back(tensors[i]);
  auto options = [&](double weight_decay) {
    return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(spec.lr)
                                                            .betas({spec.beta1, spec.beta2})
                                                            .eps(spec.eps)
                                                            .weight_decay(weight_decay));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decayed.empty()) groups.emplace_back(decayed, options(spec.weight_decay));
  if (!not_decayed.empty()) groups.emplace_back(not_decayed, options(0.0));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(spec.lr));
}

namespace {

// The tensors the optimizer updates: the trainable weights themselves (precision "model"), or float32
// master copies of them (precision "mixed"), whose gradients are the model's, upcast, each step.
class ReplicatedOptimizer final : public TrainOptimizer {
 public:
  ReplicatedOptimizer(const TrainSpec& spec, const Model& m)
      : model_(m.trainable_parameters()), mixed_(spec.precision == "mixed") {
    if (model_.empty()) throw std::invalid_argument("train_model: the model has no trainable parameters");
    std::vector<bool> decays;
    for (const auto& p : model_) decays.push_back(takes_weight_decay(p));
    if (!mixed_) {
      for (const auto& p : model_) master_.push_back(p.tensor);
    } else {
      MemoryScope scope(Category::optimizer);
      torch::NoGradGuard no_grad;
      for (const auto& p : model_) {
        auto w =
            p.tensor.detach().to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true).requires_grad_(true);
        w.mutable_grad() = torch::zeros_like(w);
        master_.push_back(w);
      }
    }
    adamw_ = make_adamw(spec, master_, decays);
  }

  double gather_and_clip(double max_norm, double scale) override {
    torch::NoGradGuard no_grad;
    if (mixed_) {
      MemoryScope scope(Category::optimizer);
      for (size_t i = 0; i < model_.size(); ++i) master_[i].mutable_grad().copy_(model_[i].tensor.grad());
    }
    if (scale != 1.0)
      for (auto& w : master_) w.mutable_grad().mul_(scale);
    const auto accumulate = master_.front().scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    std::vector<torch::Tensor> norms;
    for (const auto& w : master_)
      norms.push_back(at::linalg_vector_norm(w.grad(), 2, c10::nullopt, false, accumulate));
    const double total = at::linalg_vector_norm(torch::stack(norms), 2).item<double>();
    if (max_norm > 0) {
      const double coef = max_norm / (total + 1e-6);
      if (coef < 1)
        for (auto& w : master_) w.mutable_grad().mul_(coef);
    }
    return total;
  }

  void step(double lr) override {
    for (auto& group : adamw_->param_groups()) group.options().set_lr(lr);
    {
      MemoryScope scope(Category::optimizer);  // AdamW's moments are made by its first step
      adamw_->step();
    }
    if (!mixed_) return;
    torch::NoGradGuard no_grad;  // the masters' new values rounded into the model's weights
    for (size_t i = 0; i < model_.size(); ++i) model_[i].tensor.detach().copy_(master_[i]);
  }

 private:
  std::vector<NamedParameter> model_;  // the model's trainable weights
  std::vector<torch::Tensor> master_;  // same order; the tensors the optimizer sees
  bool mixed_;
  std::unique_ptr<torch::optim::AdamW> adamw_;
};

}  // namespace

std::unique_ptr<TrainOptimizer> make_replicated_optimizer(const TrainSpec& spec, const Model& model) {
  return std::make_unique<ReplicatedOptimizer>(spec, model);
}

}  // namespace bpbench
