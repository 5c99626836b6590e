// train_loop.h: a training run (measure.train, train_spec.h): many AdamW steps of one strategy, each step
// the strategy's forward + backward, gradient clipping and the optimizer's update, with a held-out loss every
// eval_every steps. Every strategy trains the same way, so their trajectories can be compared step by step:
// in float64 they must agree to round-off (tests/run/test_train.cpp), in bfloat16 the report shows how far
// they drift. A distributed strategy's rank trains on its part of each global batch, its AdamW over its
// gradient shards (train_optimizer.h), so R ranks follow one process on the global batch
// (tests/run/test_train_distributed.cpp).
//
// Memory: the optimizer's state (AdamW's two moments per trainable parameter) and, for precision "mixed",
// the float32 master weights and their gradients are allocated under profiles::Category::optimizer, so a
// run's peak shows them apart from the model's weights, gradients and activations.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "harness/model/model.h"
#include "harness/objectives/objective.h"
#include "harness/run/train_spec.h"
#include "impls/interface/strategy.h"

namespace bpbench {

struct TrainStepRecord {
  int64_t step = 0;             // 1-based
  double loss = 0;              // the training batch's loss, as the strategy computed it
  double lr = 0;                // the learning rate the update used
  double grad_norm = 0;         // global L2 norm of the gradients before clipping
  double time_s = 0;            // forward + backward + clipping + update
  int64_t host_copy_bytes = 0;  // offload's copies between device and host in it (profiles/host_memory.h)
};

struct EvalRecord {
  int64_t step = 0;  // after this many updates (0: the initial weights)
  double loss = 0;   // mean over the held-out batches
};

struct TrainRun {
  std::vector<TrainStepRecord> steps;
  std::vector<EvalRecord> evals;
  nlohmann::json to_json() const;  // {"steps": [{"step", "loss", "lr", "grad_norm", "time_s"[,
                                   // "host_copy_bytes"]}], "eval": [...]}
};

// The batches a run sees, built before it starts (DPO's and GRPO's reference values from the initial
// weights, which are the reference policy): step k trains on train[(k - 1) % train.size()].
struct TrainData {
  std::vector<Batch> train, eval;
};

// Trains `model` in place. offload_optimizer: AdamW's tensors and step in host memory (train_optimizer.h).
// start_timer / stop_timer time each step (the cell's device timer: stop waits for the step's work and
// returns seconds). Throws what the strategy throws (an out-of-memory included).
TrainRun train_model(const TrainSpec& spec, const Strategy& strategy, Model& model,
                     const Objective& objective, const TrainData& data, Partitioning partition,
                     CheckpointStore* checkpoints, bool offload_optimizer,
                     const std::function<void()>& start_timer, const std::function<double()>& stop_timer);

// A fingerprint of the trainable weights, to compare two runs' final weights without writing them: for each
// trainable parameter {"name", "l2": its L2 norm, "probe": its dot product with a fixed pseudo-random tensor
// of its shape (seeded by the parameter's name)}, in float64. Two runs whose weights differ by a relative
// error e differ in "probe" by about e as well.
nlohmann::json weights_fingerprint(const Model& model);

// The objective's loss of `batch` under no grad, streamed: layers with queries in chunks of `rows`, the head
// in chunks of `logits_rows` (no T x T scores, no T x V logits).
double eval_loss(const Model& model, const Batch& batch, const Objective& objective, Partitioning partition);

}  // namespace bpbench
