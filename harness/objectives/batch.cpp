// batch.cpp: synthetic token batches with exact targets and counts.
#include "harness/objectives/batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace bpbench {

int64_t prompt_tokens(const BatchSpec& spec, const std::string& objective) {
  const int64_t prompt = spec.prompt_len >= 0 ? spec.prompt_len : spec.seq_len / 8;
  if (prompt >= spec.seq_len - 1)
    throw std::invalid_argument(fmt::format("{}: prompt_len {} leaves no response tokens in seq_len {}",
                                            objective, prompt, spec.seq_len));
  return prompt;
}

Batch make_token_batch(const BatchSpec& spec, int64_t sequences, int64_t group_size, int64_t shared_prefix,
                       const torch::Device& device) {
  const int64_t T = spec.seq_len;
  TORCH_CHECK(T >= 2, "seq_len must be at least 2 (one input and one target), got ", T);
  auto gen_opts = torch::TensorOptions().dtype(torch::kLong);
  torch::manual_seed(spec.seed + 0xBA7C);
  // Ids 1..V-1 (0 is the pad id).
  auto ids = torch::randint(1, spec.vocab, {sequences, T}, gen_opts);
  if (spec.data_tokens.defined()) {
    const int64_t rows = std::min<int64_t>(sequences, spec.data_tokens.size(0));
    ids.narrow(0, 0, rows).copy_(spec.data_tokens.narrow(0, 0, rows).clamp_min(0));
  }
  if (group_size > 1 && shared_prefix > 0) {
    for (int64_t first = 0; first < sequences; first += group_size)
      for (int64_t r = first + 1; r < std::min(first + group_size, sequences); ++r)
        ids[r].narrow(0, 0, shared_prefix).copy_(ids[first].narrow(0, 0, shared_prefix));
  }
  // Real length of each row; positions at or past it are padding.
  std::vector<int64_t> lengths(sequences, T);
  for (int64_t n = 0; n < sequences; ++n) {
    if (spec.data_tokens.defined() && n < spec.data_tokens.size(0))
      lengths[n] = std::max<int64_t>(1, spec.data_tokens[n].ge(0).sum().item<int64_t>());
    else if (spec.padding)
      lengths[n] = std::max<int64_t>(shared_prefix + 2, T - (n * T) / (2 * std::max<int64_t>(1, sequences)));
    lengths[n] = std::min(lengths[n], T);
  }
  auto targets = torch::full({sequences, T}, kIgnoreIndex, gen_opts);
  for (int64_t n = 0; n < sequences; ++n) {
    if (lengths[n] < T) ids[n].narrow(0, lengths[n], T - lengths[n]).fill_(0);
    // Row t predicts token t+1; tokens of the prompt never carry loss.
    const int64_t first = std::max<int64_t>(0, shared_prefix - 1),
                  last = lengths[n] - 1;  // rows [first, last)
    if (last > first)
      targets[n].narrow(0, first, last - first).copy_(ids[n].narrow(0, first + 1, last - first));
  }
  Batch b;
  b.input_ids = ids.to(device);
  b.targets = targets.to(device);
  b.loss_tokens = targets.ne(kIgnoreIndex).sum().item<int64_t>();
  b.beta = spec.beta;
  b.epsilon = spec.epsilon;
  return b;
}

Batch batch_on(const Batch& batch, const torch::Device& device) {
  Batch moved = batch;
  for (torch::Tensor* t : {&moved.input_ids, &moved.targets, &moved.ref_sums, &moved.ref_logps,
                           &moved.old_logps, &moved.advantages, &moved.token_weight})
    if (t->defined()) *t = t->to(device);
  return moved;
}

}  // namespace bpbench
