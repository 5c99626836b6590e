// test_lora.cpp: LoRA adapters train exactly under every strategy, and frozen base weights get no gradient
// buffer.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/support/test_support.h"

namespace bpbench::testing::test_lora {
namespace {

// LoRA's B starts at zero, which makes dL/dA zero too: randomise B so both adapter gradients are exercised.
Model lora_model(bool tied) {
  Model m = tiny_model({2, tied});
  m.add_lora(/*rank=*/3, /*alpha=*/6.0, /*seed=*/4);
  torch::NoGradGuard no_grad;
  torch::manual_seed(9);
  for (auto& p : m.trainable_parameters())
    if (p.name.find("lora_B") != std::string::npos) p.tensor.normal_(0.0, 0.05);
  return m;
}

TEST(Lora, OnlyAdaptersAreTrainable) {
  Model m = lora_model(false);
  for (auto& p : m.named_parameters())
    EXPECT_EQ(p.tensor.requires_grad(), p.group == ParamGroup::lora) << p.name;
  EXPECT_EQ(m.trainable_parameters().size(), 2u * 7u * m.config.layers);
}

TEST(Lora, EveryStrategyEqualsPlainWithLora) {
  for (bool tied : {false, true}) {
    for (const std::string objective_name : {"sft", "dpo", "grpo"}) {
      Model m = lora_model(tied);
      auto objective = make_objective(objective_name);
      BatchSpec spec;
      spec.examples = 2;
      spec.seq_len = 11;
      spec.padding = true;
      spec.prompt_len = objective_name == "sft" ? -1 : 4;
      spec.group = 3;
      spec.vocab = m.config.vocab;
      Batch batch = objective->make_batch(spec, m, 4);
      auto ref = run_step("plain", m, batch, *objective, {11, 11});
      for (const auto& impl : strategy_names()) {
        if (make_strategy(impl)->unsupported({objective_name, 1})) continue;
        auto got = run_step(impl, m, batch, *objective, {4, 3});
        expect_same_gradients(ref, got, 1e-10, fmt::format("{} {} tied={}", impl, objective_name, tied));
        for (auto& p : m.named_parameters())
          if (p.group != ParamGroup::lora) {
            EXPECT_FALSE(p.tensor.grad().defined()) << impl << " " << p.name;
          }
      }
    }
  }
}

// DPO/GRPO in LoRA mode take the reference from the same model with adapters off, as the paper does.
TEST(Lora, ReferenceLogProbsComeFromTheBaseModel) {
  Model m = lora_model(false);
  auto objective = make_objective("dpo");
  BatchSpec spec;
  spec.examples = 1;
  spec.seq_len = 9;
  spec.prompt_len = 3;
  spec.vocab = m.config.vocab;
  Batch with_adapters_on = objective->make_batch(spec, m, 4);
  EXPECT_TRUE(m.lora_enabled);  // restored after the reference pass
  m.lora_enabled = false;
  Batch base = objective->make_batch(spec, m, 4);
  m.lora_enabled = true;
  EXPECT_TRUE(torch::allclose(with_adapters_on.ref_sums, base.ref_sums, 0, 0));
  auto policy_sums = reference_target_logps(m, base, 4).sum(1);
  EXPECT_FALSE(torch::allclose(policy_sums, base.ref_sums));  // B != 0: the adapters change the policy
}

}  // namespace
}  // namespace bpbench::testing::test_lora
