// objective_sft.cpp: supervised fine-tuning. term = -log p(target); f(S) = sum(S) / (non-ignored targets of
// the whole batch). The count is taken once over the batch, before any chunking, so chunk boundaries cannot
// move it.
#include <fmt/format.h>

#include "harness/model/model.h"
#include "harness/objectives/objective.h"

namespace bpbench {
namespace {

class SftObjective final : public Objective {
 public:
  std::string name() const override { return "sft"; }

  Batch make_batch(const BatchSpec& spec, Model& model, int64_t) const override {
    Batch b = make_token_batch(spec, spec.examples, 1, 0, model.device());
    b.examples = spec.examples;
    if (b.loss_tokens == 0) throw std::invalid_argument("sft: the batch has no target tokens");
    return b;
  }

  torch::Tensor token_sums(const torch::Tensor& logits, const Batch& batch, int64_t s) const override {
    auto t = target_logps(logits, batch.targets.narrow(1, s, logits.size(1)));
    return -t.logps.sum(1);  // (N)
  }

  torch::Tensor outer(const torch::Tensor& sums, const Batch& batch) const override {
    return sums.sum() / static_cast<double>(batch.loss_tokens);
  }

  bool outer_is_linear() const override { return true; }
  std::string outer_description() const override { return "SFT's mean over target tokens"; }
  int64_t sequences_per_example(int64_t) const override { return 1; }
  int64_t extra_batch_bytes(int64_t, int64_t) const override { return 0; }
  bool mean_over_target_tokens() const override { return true; }
  bool reads_data_files() const override { return true; }
};

}  // namespace

std::unique_ptr<Objective> make_sft_objective() {
  return std::make_unique<SftObjective>();
}

}  // namespace bpbench
