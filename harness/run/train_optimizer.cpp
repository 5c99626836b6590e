// train_optimizer.cpp: AdamW's groups, and the replicated placement of train_optimizer.h.
#include "harness/run/train_optimizer.h"

#include <optional>

#include "profiles/host_memory.h"
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

torch::Tensor optimized_tensor(const torch::Tensor& value, bool mixed, bool offload) {
  if (!mixed && !offload) return value;
  MemoryScope scope(Category::optimizer);
  std::optional<profiles::HostMemoryScope> host;
  if (offload) host.emplace();
  torch::NoGradGuard no_grad;
  auto copy = value.detach().to(offload ? torch::Device(torch::kCPU) : value.device(),
                                mixed ? torch::kFloat : value.scalar_type(), /*non_blocking=*/false,
                                /*copy=*/true);
  copy.mutable_grad() = torch::zeros_like(copy);
  return copy;
}

void clip_gradients(const std::vector<torch::Tensor>& tensors, double max_norm, double total) {
  if (max_norm <= 0) return;
  const double coef = max_norm / (total + 1e-6);
  if (coef >= 1) return;
  torch::NoGradGuard no_grad;
  for (const auto& w : tensors) w.grad().mul_(coef);
}

void adamw_step(torch::optim::AdamW& adamw, double lr, bool offload) {
  for (auto& group : adamw.param_groups()) group.options().set_lr(lr);
  MemoryScope scope(Category::optimizer);  // AdamW's moments are made by its first step
  std::optional<profiles::HostMemoryScope> host;
  if (offload) host.emplace();
  adamw.step();
}

namespace {

// The tensors the optimizer updates: the trainable weights themselves (precision "model"), or copies of them
// (optimized_tensor: float32 masters with "mixed", host copies when offloaded), whose gradients are the
// model's, copied in each step.
class ReplicatedOptimizer final : public TrainOptimizer {
 public:
  ReplicatedOptimizer(const TrainSpec& spec, const Model& m, bool offload)
      : model_(m.trainable_parameters()), copies_(spec.precision == "mixed" || offload), offload_(offload) {
    if (model_.empty()) throw std::invalid_argument("train_model: the model has no trainable parameters");
    std::vector<bool> decays;
    for (const auto& p : model_) {
      decays.push_back(takes_weight_decay(p));
      master_.push_back(optimized_tensor(p.tensor, spec.precision == "mixed", offload));
    }
    adamw_ = make_adamw(spec, master_, decays);
  }

  double gather_and_clip(double max_norm, double scale) override {
    torch::NoGradGuard no_grad;
    if (copies_)
      for (size_t i = 0; i < model_.size(); ++i) {
        const auto& grad = model_[i].tensor.grad();
        master_[i].mutable_grad().copy_(grad);
        if (offload_) profiles::count_host_transfer(static_cast<int64_t>(grad.nbytes()));  // out to the host
      }
    if (scale != 1.0)
      for (auto& w : master_) w.mutable_grad().mul_(scale);
    const auto accumulate = master_.front().scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    std::vector<torch::Tensor> norms;
    for (const auto& w : master_)
      norms.push_back(at::linalg_vector_norm(w.grad(), 2, c10::nullopt, false, accumulate));
    const double total = at::linalg_vector_norm(torch::stack(norms), 2).item<double>();
    clip_gradients(master_, max_norm, total);
    return total;
  }

  void step(double lr) override {
    adamw_step(*adamw_, lr, offload_);
    if (!copies_) return;
    torch::NoGradGuard no_grad;  // the copies' new values (rounded) into the model's weights
    for (size_t i = 0; i < model_.size(); ++i) {
      model_[i].tensor.detach().copy_(master_[i]);
      if (offload_) profiles::count_host_transfer(static_cast<int64_t>(model_[i].tensor.nbytes()));  // back
    }
  }

 private:
  std::vector<NamedParameter> model_;  // the model's trainable weights
  std::vector<torch::Tensor> master_;  // same order; the tensors the optimizer sees
  bool copies_, offload_;
  std::unique_ptr<torch::optim::AdamW> adamw_;
};

}  // namespace

std::unique_ptr<TrainOptimizer> make_replicated_optimizer(const TrainSpec& spec, const Model& model,
                                                          bool offload) {
  return std::make_unique<ReplicatedOptimizer>(spec, model, offload);
}

}  // namespace bpbench
