// objective_grpo.cpp: Group Relative Policy Optimisation (DeepSeekMath form, as TRL computes it).
//   per response token of completion j:  r = exp(logp - old)
//     term = -( min(r * A_j, clip(r, 1 - eps, 1 + eps) * A_j) - beta * k3 ) / n_j,
//     k3 = exp(ref - logp) - (ref - logp) - 1   (beta = 0 drops the KL term)
//   loss = sum(S) / (B * G): each completion's token mean, averaged over the group and the batch. f is
//   linear.
// Synthetic but realistic extras, seeded: the no-grad log-probs of the same weights plus small Gaussian noise
// for old (std 0.1, so some ratios leave the clip range) and ref (std 0.05); advantages N(0, 1) normalised
// per group.
#include "harness/model/model.h"
#include "harness/objectives/objective.h"

namespace bpbench {
namespace {

class GrpoObjective final : public Objective {
 public:
  std::string name() const override { return "grpo"; }

  Batch make_batch(const BatchSpec& spec, Model& model, int64_t rows_per_chunk) const override {
    const int64_t prompt = prompt_tokens(spec, name());
    if (spec.group < 1) throw std::invalid_argument("grpo: group must be >= 1");
    const int64_t G = spec.group, N = spec.examples * G;
    Batch b = make_token_batch(spec, N, G, prompt, model.device());
    b.examples = spec.examples;
    b.group = G;
    const bool lora_was = model.lora_enabled;
    model.lora_enabled = false;
    auto base = reference_target_logps(model, b, rows_per_chunk);  // (N, T) float64
    model.lora_enabled = lora_was;
    torch::manual_seed(spec.seed + 0x6770);
    auto mask = b.targets.ne(kIgnoreIndex).to(torch::kDouble);
    auto noise_opts = base.options();
    b.old_logps = (base + 0.1 * torch::randn(base.sizes(), noise_opts)) * mask;
    b.ref_logps = (base + 0.05 * torch::randn(base.sizes(), noise_opts)) * mask;
    auto adv = torch::randn({spec.examples, G}, noise_opts);
    if (G > 1) adv = (adv - adv.mean(1, true)) / (adv.std(1, /*unbiased=*/true, true) + 1e-4);
    b.advantages = adv.reshape({N});
    auto counts = mask.sum(1);  // (N) response tokens per completion
    if (counts.eq(0).any().item<bool>())
      throw std::invalid_argument("grpo: a completion has no response tokens");
    b.token_weight = 1.0 / counts;
    return b;
  }

  torch::Tensor token_sums(const torch::Tensor& logits, const Batch& batch, int64_t s) const override {
    const int64_t c = logits.size(1);
    auto t = target_logps(logits, batch.targets.narrow(1, s, c));  // (N, c)
    const auto dt = t.logps.scalar_type();
    auto old = batch.old_logps.narrow(1, s, c).to(dt), ref = batch.ref_logps.narrow(1, s, c).to(dt);
    auto adv = batch.advantages.to(dt).unsqueeze(1);  // (N, 1)
    auto ratio = torch::exp(t.logps - old);
    auto surrogate = torch::min(ratio * adv, torch::clamp(ratio, 1 - batch.epsilon, 1 + batch.epsilon) * adv);
    auto term = -surrogate;
    if (batch.beta != 0.0) {
      auto log_ref_ratio = ref - t.logps;
      term = term + batch.beta * (torch::exp(log_ref_ratio) - log_ref_ratio - 1);
    }
    term = term.masked_fill(~t.mask, 0.0) * batch.token_weight.to(dt).unsqueeze(1);
    return term.sum(1);  // (N)
  }

  torch::Tensor outer(const torch::Tensor& sums, const Batch& batch) const override {
    return sums.sum() / static_cast<double>(batch.examples * batch.group);
  }

  bool outer_is_linear() const override { return true; }
  std::string outer_description() const override { return "GRPO's group mean of per-completion token means"; }
  int64_t sequences_per_example(int64_t group) const override { return group; }
  // ref_logps and old_logps (N, T); advantages and token weights (N).
  int64_t extra_batch_bytes(int64_t sequences, int64_t rows) const override {
    return 2 * sequences * rows * 8 + 2 * sequences * 8;
  }
  bool mean_over_target_tokens() const override { return false; }
  bool reads_data_files() const override { return false; }
};

}  // namespace

std::unique_ptr<Objective> make_grpo_objective() {
  return std::make_unique<GrpoObjective>();
}

}  // namespace bpbench
