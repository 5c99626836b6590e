// train_spec.h: a scenario's `measure.train` block: many optimizer steps per cell instead of one measured
// forward + backward (harness/run/train_loop.h runs it).
//
//   "train": {"steps": 50, "lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.01,
//             "warmup_steps": 5, "schedule": "cosine", "min_lr_ratio": 0.1, "clip_grad_norm": 1.0,
//             "eval_every": 10, "eval_batches": 2, "grad_accum": 4, "precision": "mixed"}
//
// The optimizer is AdamW (LibTorch's torch::optim::AdamW). The learning rate rises linearly over warmup_steps
// to lr, then follows the schedule: "cosine" down to min_lr_ratio * lr at the last step, or "constant".
// clip_grad_norm > 0 scales the gradients to that global L2 norm when above it (torch's clip_grad_norm_).
// Every eval_every steps (and before the first and after the last) the loss of eval_batches held-out batches
// is computed without grad; 0: no evaluation. grad_accum micro-batches make one step: their gradients are
// summed and scaled by 1 / grad_accum (the step's loss is the mean of theirs), then clipped and applied.
// precision "model": weights, gradients and optimizer state in
// the cell's dtype (float32 or float64 runs; bfloat16 here is "pure bf16"); "mixed": the cell's dtype must be
// bfloat16, and the trainable weights get float32 master copies, which the optimizer (float32 state) updates
// and rounds back into the bfloat16 weights after each step, as mixed-precision training does.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bpbench {

struct TrainSpec {
  int64_t steps = 0;  // >= 1
  double lr = 1e-4;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  int64_t warmup_steps = 0;
  std::string schedule = "cosine";  // "cosine" | "constant"
  double min_lr_ratio = 0.0;
  double clip_grad_norm = 0.0;  // 0: no clipping
  int64_t eval_every = 0;       // 0: no evaluation
  int64_t eval_batches = 1;
  int64_t grad_accum = 1;           // micro-batches per optimizer step
  std::string precision = "model";  // "model" | "mixed"

  // The learning rate of step `step` (1-based): warm-up, then the schedule.
  double lr_at(int64_t step) const;

  nlohmann::json to_json() const;
  // Every key checked; throws InputError naming the key and the valid values.
  static TrainSpec from_json(const nlohmann::json& j);
  static std::vector<std::string> keys();  // what from_json takes (scenarios/scenario.schema.json lists them)
};

}  // namespace bpbench
