// test_support.h: helpers shared by the exactness tests: a configurable tiny model, one step of a strategy,
// and a comparison of every parameter's gradient that reports the worst offender by name.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "harness/model/model.h"
#include "harness/objectives/objective.h"
#include "impls/offload.h"
#include "impls/strategy.h"

namespace bpbench::testing {

struct TinyShape {
  int64_t kv_heads = 2;  // tiny has 4 query heads: GQA ratio 4 / kv_heads
  bool tied = false;
  bool attention_bias = false;
  bool qk_norm = true;
};

inline Model tiny_model(const TinyShape& shape, torch::ScalarType dtype = torch::kDouble, uint64_t seed = 7) {
  ModelConfig c = find_model_preset("tiny");
  c.kv_heads = shape.kv_heads;
  c.tie_embeddings = shape.tied;
  c.attention_bias = shape.attention_bias;
  c.qk_norm = shape.qk_norm;
  Model m = Model::random(c, torch::TensorOptions().dtype(dtype), seed);
  // Norm weights at 1 would hide a wrong norm gradient path; make them distinct.
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed + 1);
  for (auto& p : m.named_parameters())
    if (p.group == ParamGroup::norms) p.tensor.add_(0.1 * torch::randn(p.tensor.sizes(), p.tensor.options()));
  return m;
}

// Two right-padded SFT sequences of `seq_len` tokens from a fixed seed: the batch the model tests share.
inline Batch padded_sft_batch(Model& model, const Objective& objective, int64_t seq_len = 13) {
  BatchSpec s;
  s.examples = 2;
  s.seq_len = seq_len;
  s.padding = true;
  s.seed = 5;
  s.vocab = model.config.vocab;
  return objective.make_batch(s, model, seq_len);
}

// The batch the exactness tests share: two right-padded examples of `seq_len` tokens, seed 3; DPO and GRPO
// prompts of `prompt_len` tokens (chosen longer than the partitions a test runs), GRPO groups of 3.
inline BatchSpec padded_batch_spec(const std::string& objective, int64_t vocab, int64_t seq_len,
                                   int64_t prompt_len) {
  BatchSpec s;
  s.examples = 2;
  s.seq_len = seq_len;
  s.padding = true;
  s.prompt_len = objective == "sft" ? -1 : prompt_len;
  s.group = 3;
  s.beta = 0.1;
  s.seed = 3;
  s.vocab = vocab;
  return s;
}

struct StepResult {
  double loss = 0;
  std::vector<std::string> names;
  std::vector<torch::Tensor> grads;  // float64 copies, one per trainable parameter (zeros if none arrived)
};

// `checkpoints`: the runner's checkpoint store (impls/offload.h), e.g. an offloading one; null: on the
// device.
inline StepResult run_step(const std::string& impl, Model& model, const Batch& batch,
                           const Objective& objective, Partitioning partition,
                           CheckpointStore* checkpoints = nullptr) {
  for (auto& p : model.trainable_parameters()) p.tensor.mutable_grad().reset();
  auto strategy = make_strategy(impl);
  StepInputs in{model, batch, objective, partition, checkpoints};
  StepResult r;
  r.loss = strategy->forward_backward(in).item<double>();
  for (auto& p : model.trainable_parameters()) {
    r.names.push_back(p.name);
    auto g = p.tensor.grad();
    r.grads.push_back(g.defined() ? g.detach().to(torch::kDouble).clone()
                                  : torch::zeros_like(p.tensor, torch::kDouble));
  }
  return r;
}

// Relative L2 error of every gradient (and of the loss) must be below `tol`; a zero reference gradient must
// be matched to `tol` in absolute terms. Every parameter is checked, not a sample.
inline void expect_same_gradients(const StepResult& ref, const StepResult& got, double tol,
                                  const std::string& what) {
  ASSERT_EQ(ref.names, got.names) << what;
  EXPECT_LE(std::abs(got.loss - ref.loss), tol * std::max(1.0, std::abs(ref.loss)))
      << what << ": loss " << got.loss << " vs " << ref.loss;
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    const double ref_norm = ref.grads[i].norm().item<double>();
    const double diff = (got.grads[i] - ref.grads[i]).norm().item<double>();
    EXPECT_LE(diff, tol * std::max(ref_norm, 1e-12))
        << what << ": gradient of " << ref.names[i] << " differs, relative error " << diff / ref_norm;
  }
  for (const auto& g : ref.grads) EXPECT_TRUE(torch::isfinite(g).all().item<bool>()) << what;
}

}  // namespace bpbench::testing
