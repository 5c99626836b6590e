// batch.h: one training step's tokens, shifted targets and objective extras. Synthetic and seeded.
//
// Rows are sequences (legend in model_config.h): SFT has N = B; DPO N = 2B, row 2b the chosen and row 2b+1
// the rejected sequence of pair b (sharing the prompt); GRPO N = B*G with each prompt's G completions
// consecutive. Padding is on the right only, so the causal rule alone keeps real tokens from seeing pads.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace bpbench {

inline constexpr int64_t kIgnoreIndex = -100;

struct BatchSpec {
  int64_t examples = 1;     // B: SFT sequences, DPO pairs, GRPO prompts
  int64_t seq_len = 0;      // T: every sequence, prompt + response, padding included
  int64_t prompt_len = -1;  // DPO/GRPO prompt tokens (no loss); -1: T/8
  int64_t group = 8;        // GRPO completions per prompt (G)
  bool padding = false;     // right-pad sequence n to a real length that shrinks with n
  double beta = 0.1;        // DPO temperature; GRPO KL weight
  double epsilon = 0.2;     // GRPO clip range
  uint64_t seed = 0;
  int64_t vocab = 0;  // filled from the model
  torch::Tensor
      data_tokens;  // optional (M, T) int64 ids from a data file, -1 = padding; synthetic if undefined
};

struct Batch {
  torch::Tensor input_ids;  // (N, T) int64; pad id 0
  torch::Tensor
      targets;  // (N, T) int64: targets[n][t] = input_ids[n][t+1], or kIgnoreIndex (prompt, pad, t = T-1)
  int64_t examples = 0;     // B
  int64_t group = 1;        // G (GRPO), 2 (DPO: chosen, rejected), else 1
  int64_t loss_tokens = 0;  // targets that are not ignored, over the whole batch (SFT normaliser)

  // Objective extras, float64 on the batch's device; undefined when the objective does not use them.
  torch::Tensor ref_sums;      // (N) DPO: reference policy's summed log-probs of the response tokens
  torch::Tensor ref_logps;     // (N, T) GRPO: reference per-token log-probs
  torch::Tensor old_logps;     // (N, T) GRPO: sampling policy's per-token log-probs
  torch::Tensor advantages;    // (N) GRPO: one advantage per completion, normalised within its group
  torch::Tensor token_weight;  // (N) GRPO: 1 / (response tokens of the completion)
  double beta = 0.1, epsilon = 0.2;
  // Sequence parallelism (impls/machinery/sequence_parallel.h) gives each rank a slice of every sequence: its
  // rows are positions first_position .. first_position + seq_len() - 1 of sequences of whole_seq_len real
  // tokens (the last rank's slice may run past them into ignored padding). 0, 0: the batch holds whole
  // sequences.
  int64_t first_position = 0, whole_seq_len = 0;

  int64_t sequences() const { return input_ids.size(0); }
  int64_t seq_len() const { return input_ids.size(1); }
};

// A copy of `batch` with every tensor on `device` (a CPU reference of a CUDA cell's step).
Batch batch_on(const Batch& batch, const torch::Device& device);

// The prompt length of a DPO / GRPO batch: spec.prompt_len, or T/8 when it is -1. Throws
// std::invalid_argument, naming `objective`, when it leaves no response token (every target in the prompt).
int64_t prompt_tokens(const BatchSpec& spec, const std::string& objective);

// Token ids and targets for `sequences` rows that share their first `shared_prefix` tokens in groups of
// `group_size` consecutive rows (0: nothing shared). Real lengths shrink with the row index when
// spec.padding.
Batch make_token_batch(const BatchSpec& spec, int64_t sequences, int64_t group_size, int64_t shared_prefix,
                       const torch::Device& device);

}  // namespace bpbench
