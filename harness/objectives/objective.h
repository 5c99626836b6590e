// objective.h: training objectives in the one form every strategy streams:
//
//     loss = f(S),   S[n] = sum over rows t of sequence n of term(logits[n, t, :], batch, n, t)
//
// The per-token term depends only on its own logits row (and batch data), so any chunking of rows gives the
// same S by summation. When f is linear (SFT, GRPO) per-chunk gradients simply add; when it is not (DPO), a
// streaming head first computes S without grad, then backpropagates each chunk's sums scaled by f'(S).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "harness/objectives/batch.h"

namespace bpbench {

class Model;

class Objective {
 public:
  virtual ~Objective() = default;
  virtual std::string name() const = 0;

  // The step's batch: tokens, targets and extras (DPO/GRPO compute reference log-probs here, with `model`'s
  // weights under no-grad, streamed in chunks of `rows_per_chunk`, before anything is measured).
  virtual Batch make_batch(const BatchSpec& spec, Model& model, int64_t rows_per_chunk) const = 0;

  // Partial sums over rows [s, s + c) of every sequence:  logits (N, c, V) -> (N) in compute dtype.
  virtual torch::Tensor token_sums(const torch::Tensor& logits, const Batch& batch, int64_t s) const = 0;

  // f: (N) -> scalar loss.
  virtual torch::Tensor outer(const torch::Tensor& sums, const Batch& batch) const = 0;

  // True when f is linear, so f'(S) does not depend on S and a streaming head needs a single pass.
  virtual bool outer_is_linear() const = 0;
  // f in words, for a strategy that cannot run it: "DPO's log-sigmoid of summed log-probs".
  virtual std::string outer_description() const = 0;

  // What the estimate, the FLOPs, the distributed step and the scenario ask of an objective, so that none of
  // them compares its name.
  // Sequences the batch holds per example: 1, 2 (chosen and rejected), the group size.
  virtual int64_t sequences_per_example(int64_t group) const = 0;
  // The batch's bytes beyond input_ids and targets for `sequences` sequences of `rows` tokens (float64
  // extras: reference sums, per-token log-probs, per-sequence weights).
  virtual int64_t extra_batch_bytes(int64_t sequences, int64_t rows) const = 0;
  // True when the loss is the mean over the batch's target tokens, so that a distributed step divides by
  // the target tokens of every rank.
  virtual bool mean_over_target_tokens() const = 0;
  // True when a data file of token sequences can feed its batch (nothing beyond the tokens is needed).
  virtual bool reads_data_files() const = 0;

  // Whole-sequence loss from all logits (N, T, V): what plain and checkpoint use.
  torch::Tensor loss(const torch::Tensor& logits, const Batch& batch) const {
    return outer(token_sums(logits, batch, 0), batch);
  }
};

// Log-probability of each row's target, 0 where the target is ignored:
//   logits (N, c, V) any float dtype, targets (N, c) -> logps (N, c) in compute dtype, mask (N, c) bool.
// log_softmax runs in compute dtype (float32 for bf16 models, as Hugging Face upcasts).
struct TargetLogps {
  torch::Tensor logps, mask;
};
TargetLogps target_logps(const torch::Tensor& logits, const torch::Tensor& targets);

// Per-token log-probs of the targets under `model` with no grad: (N, T) float64, 0 where ignored. Streamed
// layer by layer with attention and head in chunks of `rows_per_chunk`, so it never holds a T x T or T x V
// tensor.
torch::Tensor reference_target_logps(Model& model, const Batch& batch, int64_t rows_per_chunk);

std::unique_ptr<Objective> make_objective(const std::string& name);  // throws listing valid names
const std::vector<std::string>& objective_names();
std::string objective_description(const std::string& name);

}  // namespace bpbench
