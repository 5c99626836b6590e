// objective_dpo.cpp: Direct Preference Optimisation, sigmoid loss.
//   S[n] = sum of log p(target) over the response tokens of sequence n
//   loss = mean over pairs b of -log sigmoid(beta * ((S[2b] - ref[2b]) - (S[2b+1] - ref[2b+1])))
// f is not linear in S: a streaming head needs S first (no grad), then backpropagates chunks scaled by f'(S).
// The reference sums come from the same weights under no grad (LoRA: adapters disabled), computed before the
// measured step and kept as N numbers.
#include "harness/model/model.h"
#include "harness/objectives/objective.h"

namespace bpbench {
namespace {

class DpoObjective final : public Objective {
 public:
  std::string name() const override { return "dpo"; }

  Batch make_batch(const BatchSpec& spec, Model& model, int64_t rows_per_chunk) const override {
    const int64_t prompt = prompt_tokens(spec, name());
    Batch b = make_token_batch(spec, 2 * spec.examples, 2, prompt, model.device());
    b.examples = spec.examples;
    b.group = 2;
    const bool lora_was = model.lora_enabled;
    model.lora_enabled = false;  // the reference policy: base weights (identical to the policy without LoRA)
    b.ref_sums = reference_target_logps(model, b, rows_per_chunk).sum(1);
    model.lora_enabled = lora_was;
    return b;
  }

  torch::Tensor token_sums(const torch::Tensor& logits, const Batch& batch, int64_t s) const override {
    return target_logps(logits, batch.targets.narrow(1, s, logits.size(1))).logps.sum(1);  // (N)
  }

  torch::Tensor outer(const torch::Tensor& sums, const Batch& batch) const override {
    auto margin = (sums - batch.ref_sums.to(sums.scalar_type())).view({-1, 2});  // (B, 2): chosen, rejected
    auto logits = batch.beta * (margin.select(1, 0) - margin.select(1, 1));      // (B)
    return -torch::log_sigmoid(logits).mean();
  }

  bool outer_is_linear() const override { return false; }
  std::string outer_description() const override { return "DPO's log-sigmoid of summed log-probs"; }
  int64_t sequences_per_example(int64_t) const override { return 2; }
  int64_t extra_batch_bytes(int64_t sequences, int64_t) const override { return sequences * 8; }  // ref_sums
  bool mean_over_target_tokens() const override { return false; }
  bool reads_data_files() const override { return false; }
};

}  // namespace

std::unique_ptr<Objective> make_dpo_objective() {
  return std::make_unique<DpoObjective>();
}

}  // namespace bpbench
