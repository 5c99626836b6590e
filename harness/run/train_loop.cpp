// train_loop.cpp: the training run of train_loop.h.
#include "harness/run/train_loop.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "harness/run/cell_steps.h"
#include "profiles/memory.h"

namespace bpbench {

using nlohmann::json;
using profiles::Category;
using profiles::MemoryScope;

json TrainRun::to_json() const {
  json s = json::array(), e = json::array();
  for (const auto& r : steps)
    s.push_back(
        {{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm}, {"time_s", r.time_s}});
  for (const auto& r : evals) e.push_back({{"step", r.step}, {"loss", r.loss}});
  return {{"steps", s}, {"eval", e}};
}

double eval_loss(const Model& model, const Batch& batch, const Objective& objective, Partitioning partition) {
  torch::NoGradGuard no_grad;
  const int64_t T = batch.input_ids.size(1);
  const int64_t rows = partition.rows > 0 ? std::min(partition.rows, T) : T;
  const int64_t logits_rows = partition.logits_rows > 0 ? std::min(partition.logits_rows, T) : T;
  auto x = model.embed(batch.input_ids);  // (N, T, d)
  for (int64_t i = 0; i < model.config.layers; ++i) x = model.layer_in_chunks(i, x, rows);
  torch::Tensor sums;  // (N) in the compute dtype
  for (int64_t s = 0; s < T; s += logits_rows) {
    const int64_t c = std::min(logits_rows, T - s);
    auto part = objective.token_sums(model.head_logits(x.narrow(1, s, c)), batch, s);
    sums = sums.defined() ? sums + part : part;
  }
  return objective.outer(sums, batch).item<double>();
}

namespace {

// The tensors the optimizer updates: the trainable weights themselves (precision "model"), or float32
// master copies of them (precision "mixed"), whose gradients are the model's, upcast, each step.
struct OptimizedParameters {
  std::vector<NamedParameter> model;  // the model's trainable weights
  std::vector<torch::Tensor> master;  // same order; the tensors the optimizer sees
  bool mixed = false;

  OptimizedParameters(const Model& m, bool mixed_precision)
      : model(m.trainable_parameters()), mixed(mixed_precision) {
    if (!mixed) {
      for (const auto& p : model) master.push_back(p.tensor);
      return;
    }
    MemoryScope scope(Category::optimizer);
    torch::NoGradGuard no_grad;
    for (const auto& p : model) {
      auto w =
          p.tensor.detach().to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true).requires_grad_(true);
      w.mutable_grad() = torch::zeros_like(w);
      master.push_back(w);
    }
  }

  // The model's gradients into the masters' (mixed); then the global L2 norm of the optimizer's gradients,
  // and clipping to `max_norm` (> 0) as torch.nn.utils.clip_grad_norm_ does.
  double gather_and_clip(double max_norm) {
    torch::NoGradGuard no_grad;
    if (mixed) {
      MemoryScope scope(Category::optimizer);
      for (size_t i = 0; i < model.size(); ++i) master[i].mutable_grad().copy_(model[i].tensor.grad());
    }
    const auto accumulate = master.front().scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    std::vector<torch::Tensor> norms;
    for (const auto& w : master)
      norms.push_back(at::linalg_vector_norm(w.grad(), 2, c10::nullopt, false, accumulate));
    const double total = at::linalg_vector_norm(torch::stack(norms), 2).item<double>();
    if (max_norm > 0) {
      const double coef = max_norm / (total + 1e-6);
      if (coef < 1)
        for (auto& w : master) w.mutable_grad().mul_(coef);
    }
    return total;
  }

  // The masters' new values rounded into the model's weights (mixed).
  void write_back() {
    if (!mixed) return;
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < model.size(); ++i) model[i].tensor.detach().copy_(master[i]);
  }
};

// AdamW over the optimized tensors in two groups, as Hugging Face's Trainer makes them: norm weights and
// biases without weight decay, every other weight with it.
std::unique_ptr<torch::optim::AdamW> make_optimizer(const TrainSpec& spec,
                                                    const OptimizedParameters& params) {
  std::vector<torch::Tensor> decayed, not_decayed;
  for (size_t i = 0; i < params.model.size(); ++i) {
    const auto& p = params.model[i];
    const bool bias = p.name.size() >= 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
    (p.group == ParamGroup::norms || bias ? not_decayed : decayed).push_back(params.master[i]);
  }
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

double mean_eval_loss(const Model& model, const TrainData& data, const Objective& objective,
                      Partitioning partition) {
  double sum = 0;
  for (const auto& b : data.eval) sum += eval_loss(model, b, objective, partition);
  return sum / static_cast<double>(data.eval.size());
}

}  // namespace

TrainRun train_model(const TrainSpec& spec, const Strategy& strategy, Model& model,
                     const Objective& objective, const TrainData& data, Partitioning partition,
                     CheckpointStore* checkpoints, const std::function<void()>& start_timer,
                     const std::function<double()>& stop_timer) {
  TORCH_CHECK(!data.train.empty(), "train_model: no training batches");
  OptimizedParameters params(model, spec.precision == "mixed");
  TORCH_CHECK(!params.model.empty(), "train_model: the model has no trainable parameters");
  auto optimizer = make_optimizer(spec, params);
  const bool evaluates = spec.eval_every > 0 && !data.eval.empty();

  TrainRun run;
  if (evaluates) run.evals.push_back({0, mean_eval_loss(model, data, objective, partition)});
  for (int64_t step = 1; step <= spec.steps; ++step) {
    const Batch& batch = data.train[static_cast<size_t>(step - 1) % data.train.size()];
    prepare_grads(params.model, /*distributed=*/false);  // as a single-step cell's steps start
    TrainStepRecord r;
    r.step = step;
    r.lr = spec.lr_at(step);
    start_timer();
    const torch::Tensor loss = strategy.step(StepInputs{model, batch, objective, partition, checkpoints});
    r.grad_norm = params.gather_and_clip(spec.clip_grad_norm);
    for (auto& group : optimizer->param_groups()) group.options().set_lr(r.lr);
    {
      MemoryScope scope(Category::optimizer);  // AdamW's moments are made by its first step
      optimizer->step();
    }
    params.write_back();
    r.time_s = stop_timer();
    r.loss = loss.item<double>();
    run.steps.push_back(r);
    if (evaluates && (step % spec.eval_every == 0 || step == spec.steps))
      run.evals.push_back({step, mean_eval_loss(model, data, objective, partition)});
  }
  return run;
}

}  // namespace bpbench
