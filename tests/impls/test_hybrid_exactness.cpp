// test_hybrid_exactness.cpp: the hybrid linear-attention models (tiny-qwen3.5, tiny-qwen3-next: three Gated
// DeltaNet layers, then a gated full-attention one) in float64. Their token mixer run piece by piece with its
// state carried equals it run over the whole sequence, for pieces shorter than the conv's halo too; and every
// single-process strategy equals plain BP (loss and every gradient) on T prime with two right-padded
// sequences, for partitions of 1 row (every halo split), 2, 7, T and longer than T, for SFT, DPO and GRPO and
// with LoRA (whose layer 0, a linear one, takes no input gradient). That plain BP equals
// transformers is tests/model/test_hf_oracle.cpp's.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/support/test_support.h"

namespace bpbench::testing::test_hybrid_exactness {
namespace {

constexpr int64_t kT = 13;
constexpr double kTol = 1e-10;

Model hybrid(const std::string& preset) {
  return Model::random(find_model_preset(preset), torch::TensorOptions().dtype(torch::kDouble), 7);
}

TEST(HybridModel, TheTokenMixerInPiecesEqualsItOverTheWholeSequence) {
  const Model m = hybrid("tiny-qwen3.5");
  ASSERT_TRUE(m.config.is_linear_layer(0));
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  const auto x = torch::randn({2, kT, m.config.hidden}, torch::kDouble);
  const LinearBlock whole = m.linear_attention_block(0, x, m.initial_linear_state(2));
  for (const int64_t piece : {1, 2, 5, 12}) {
    LinearState state = m.initial_linear_state(2);
    auto pieces = torch::empty_like(x);
    for (int64_t s = 0; s < kT; s += piece) {
      const int64_t c = std::min(piece, kT - s);
      LinearBlock block = m.linear_attention_block(0, x.narrow(1, s, c), state);
      pieces.narrow(1, s, c).copy_(block.x1);
      state = std::move(block.next);
    }
    EXPECT_LE((pieces - whole.x1).abs().max().item<double>(), 1e-13) << "pieces of " << piece;
    EXPECT_LE((state.state - whole.next.state).abs().max().item<double>(), 1e-13) << "pieces of " << piece;
    // The halo is in_qkv's rows: a matmul over other rows may round its last bit otherwise.
    EXPECT_LE((state.halo - whole.next.halo).abs().max().item<double>(), 1e-13) << "pieces of " << piece;
  }
}

struct Case {
  std::string preset, impl, objective;
  int64_t partition;
  int64_t lora = 0;  // LoRA's rank (0: full fine-tuning): layer 0, a linear one, then takes no input gradient
};

class HybridExactness : public ::testing::TestWithParam<Case> {};

TEST_P(HybridExactness, MatchesPlainInFloat64) {
  const Case& c = GetParam();
  Model model = hybrid(c.preset);
  if (c.lora > 0) model.add_lora(c.lora, 8.0, 3);
  auto objective = make_objective(c.objective);
  const Batch batch = objective->make_batch(
      padded_batch_spec(c.objective, model.config.vocab, kT, /*prompt_len=*/8), model, 5);
  const auto ref = run_step("plain", model, batch, *objective, {kT, kT});
  const auto got = run_step(c.impl, model, batch, *objective, {c.partition, 3});
  expect_same_gradients(ref, got, kTol,
                        fmt::format("{} {} {} p{}", c.preset, c.impl, c.objective, c.partition));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::string preset : {"tiny-qwen3.5", "tiny-qwen3-next"}) {
    for (const int64_t p : {int64_t{1}, int64_t{2}, int64_t{7}, kT, kT + 5})
      for (const std::string objective : {"sft", "dpo"}) out.push_back({preset, "streambp", objective, p});
    for (const std::string impl : {"checkpoint", "checkpoint-chunked-head", "mst"})
      out.push_back({preset, impl, "sft", 5});
    out.push_back({preset, "streambp", "grpo", 5});
    for (const std::string impl : {"streambp", "mst"}) out.push_back({preset, impl, "sft", 2, /*lora=*/4});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Hybrid, HybridExactness, ::testing::ValuesIn(cases()), [](const auto& info) {
  const Case& c = info.param;
  return test_name(fmt::format("{}_{}_{}_p{}{}", c.preset, c.impl, c.objective, c.partition,
                               c.lora > 0 ? fmt::format("_lora{}", c.lora) : ""));
});

}  // namespace
}  // namespace bpbench::testing::test_hybrid_exactness
