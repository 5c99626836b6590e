// train_loop.cpp: the training run of train_loop.h.
#include "harness/run/train_loop.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "harness/run/cell_steps.h"
#include "harness/run/train_optimizer.h"
#include "impls/machinery/dist_common.h"
#include "impls/machinery/layerwise.h"
#include "profiles/host_memory.h"
#include "profiles/memory.h"

namespace bpbench {

using nlohmann::json;

json TrainRun::to_json() const {
  json s = json::array(), e = json::array();
  for (const auto& r : steps) {
    s.push_back(
        {{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm}, {"time_s", r.time_s}});
    if (r.host_copy_bytes > 0) s.back()["host_copy_bytes"] = r.host_copy_bytes;  // offload's
  }
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
  return objective.outer(streamed_sequence_sums(model, x, batch, objective, logits_rows), batch)
      .item<double>();
}

namespace {
// FNV-1a: a seed from a name that every platform computes alike (std::hash is the library's choice).
uint64_t name_seed(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
}
}  // namespace

json weights_fingerprint(const Model& model) {
  torch::NoGradGuard no_grad;
  json out = json::array();
  for (const auto& p : model.trainable_parameters()) {
    const auto w = p.tensor.detach().to(torch::kCPU, torch::kDouble);
    auto generator = at::make_generator<at::CPUGeneratorImpl>(name_seed(p.name));
    const auto probe = at::randn(w.sizes(), generator, torch::TensorOptions().dtype(torch::kDouble));
    out.push_back(
        {{"name", p.name}, {"l2", w.norm().item<double>()}, {"probe", (w * probe).sum().item<double>()}});
  }
  return out;
}

namespace {

double mean_eval_loss(const Strategy& strategy, Model& model, const TrainData& data,
                      const Objective& objective, Partitioning partition) {
  const auto* dist_strategy = dynamic_cast<const dist::DistStrategy*>(&strategy);
  double sum = 0;
  for (const auto& b : data.eval)
    sum += dist_strategy
               ? dist_strategy->held_out_loss(StepInputs{model, b, objective, partition}).item<double>()
               : eval_loss(model, b, objective, partition);
  return sum / static_cast<double>(data.eval.size());
}

}  // namespace

TrainRun train_model(const TrainSpec& spec, const Strategy& strategy, Model& model,
                     const Objective& objective, const TrainData& data, Partitioning partition,
                     CheckpointStore* checkpoints, bool offload_optimizer,
                     const std::function<void()>& start_timer, const std::function<double()>& stop_timer) {
  TORCH_CHECK(!data.train.empty(), "train_model: no training batches");
  const auto* dist_strategy = dynamic_cast<const dist::DistStrategy*>(&strategy);
  // The sharded optimizer takes its layout from the first step's gradient shards: made after it.
  std::unique_ptr<TrainOptimizer> optimizer;
  if (!dist_strategy) optimizer = make_replicated_optimizer(spec, model, offload_optimizer);
  const bool evaluates = spec.eval_every > 0 && !data.eval.empty();
  const int64_t accum = spec.grad_accum;
  const auto trainable = model.trainable_parameters();

  TrainRun run;
  if (evaluates) run.evals.push_back({0, mean_eval_loss(strategy, model, data, objective, partition)});
  for (int64_t step = 1; step <= spec.steps; ++step) {
    TrainStepRecord r;
    r.step = step;
    r.lr = spec.lr_at(step);
    if (!dist_strategy)
      prepare_grads(trainable, /*distributed=*/false);  // as a single-step cell's steps start
    profiles::reset_host_transfers();
    start_timer();
    std::vector<torch::Tensor> losses;  // read after the clock stops (a read waits for the device)
    for (int64_t micro = 0; micro < accum; ++micro) {  // each adds its gradients to the step's
      const size_t k = static_cast<size_t>((step - 1) * accum + micro) % data.train.size();
      if (dist_strategy) dist_strategy->accumulate_gradients(micro > 0);
      losses.push_back(strategy.step(StepInputs{model, data.train[k], objective, partition, checkpoints}));
    }
    if (dist_strategy) dist_strategy->accumulate_gradients(false);
    if (!optimizer) optimizer = make_sharded_optimizer(spec, model, *dist_strategy, offload_optimizer);
    r.grad_norm = optimizer->gather_and_clip(spec.clip_grad_norm, 1.0 / static_cast<double>(accum));
    optimizer->step(r.lr);
    r.time_s = stop_timer();
    r.host_copy_bytes = profiles::host_transfer_bytes();
    for (const auto& loss : losses) r.loss += loss.item<double>() / static_cast<double>(accum);
    run.steps.push_back(r);
    if (evaluates && (step % spec.eval_every == 0 || step == spec.steps))
      run.evals.push_back({step, mean_eval_loss(strategy, model, data, objective, partition)});
  }
  return run;
}

}  // namespace bpbench
