// test_model.cpp: presets carry the public parameter counts, and a built model has exactly that many weights.
#include <gtest/gtest.h>

#include "harness/model/model.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_model {
namespace {

TEST(ModelPresets, ParameterCountsMatchThePublicModels) {
  const std::map<std::string, int64_t> expected = {
      {"qwen3-0.6b", 596049920},     {"qwen3-1.7b", 1720574976},     {"qwen3-4b", 4022468096},
      {"qwen3-8b", 8190735360},      {"qwen3-14b", 14768307200},     {"qwen3-32b", 32762123264},
      {"llama3.1-8b", 8030261248},   {"llama3.2-1b", 1235814400},    {"mistral-7b", 7248023552},
      {"phi3-mini", 3821079552},     {"qwen3-30b-a3b", 30532122624}, {"qwen3-235b-a22b", 235093634560},
      {"mixtral-8x7b", 46702792704},
  };
  for (const auto& [name, count] : expected)
    EXPECT_EQ(find_model_preset(name).parameter_count(), count) << name;
}

// Active parameters (a token's: the router and k of E experts) as the model cards count them, and a built
// mixture of experts holds exactly the counted parameters, a dense layer among sparse ones included.
TEST(ModelPresets, MixturesOfExpertsCountTheirActiveParameters) {
  EXPECT_NEAR(static_cast<double>(find_model_preset("qwen3-30b-a3b").active_parameter_count()), 3.3e9,
              0.06e9);
  EXPECT_NEAR(static_cast<double>(find_model_preset("qwen3-235b-a22b").active_parameter_count()), 22.2e9,
              0.1e9);
  EXPECT_NEAR(static_cast<double>(find_model_preset("mixtral-8x7b").active_parameter_count()), 12.9e9,
              0.05e9);
  EXPECT_EQ(find_model_preset("qwen3-8b").active_parameter_count(),
            find_model_preset("qwen3-8b").parameter_count());
  ModelConfig c = find_model_preset("tiny-moe");
  c.dense_layers = {0};
  EXPECT_EQ(c.moe_layer_count(), 1);
  Model m = Model::random(c, torch::TensorOptions().dtype(torch::kFloat), 1);
  int64_t n = 0;
  for (auto& p : m.named_parameters()) n += p.tensor.numel();
  EXPECT_EQ(n, c.parameter_count());
  c.experts_per_token = 9;  // more than the 8 experts
  EXPECT_THROW(c.validate(), std::invalid_argument);
}

TEST(ModelPresets, SmallHasAVocabularyWhoseLogitsShow) {
  EXPECT_GE(find_model_preset("small").vocab, 32000);
}

TEST(ModelPresets, BuiltModelsHoldExactlyTheCountedParameters) {
  for (const std::string name : {"tiny", "small"}) {
    for (bool tied : {false, true}) {
      ModelConfig c = find_model_preset(name);
      c.tie_embeddings = tied;
      Model m = Model::random(c, torch::TensorOptions().dtype(torch::kFloat), 1);
      int64_t n = 0;
      for (auto& p : m.named_parameters()) n += p.tensor.numel();
      EXPECT_EQ(n, c.parameter_count()) << name << (tied ? " tied" : " untied");
    }
  }
}

TEST(ModelPresets, UnknownNameListsTheValidOnes) {
  try {
    find_model_preset("qwen9-1t");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("qwen9-1t"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("qwen3-8b"), std::string::npos);
  }
}

TEST(Model, SameSeedSameWeightsAcrossDtypes) {
  auto c = find_model_preset("tiny");
  Model f32 = Model::random(c, torch::TensorOptions().dtype(torch::kFloat), 5);
  Model f64 = Model::random(c, torch::TensorOptions().dtype(torch::kDouble), 5);
  EXPECT_TRUE(torch::equal(f32.embed_weight.to(torch::kDouble), f64.embed_weight));
  Model other = Model::random(c, torch::TensorOptions().dtype(torch::kFloat), 6);
  EXPECT_FALSE(torch::equal(f32.embed_weight, other.embed_weight));
}

TEST(Model, ConvertedKeepsTiesAndValues) {
  Model m = tiny_model({2, true}, torch::kFloat);
  Model d = m.converted(torch::TensorOptions().dtype(torch::kDouble));
  EXPECT_TRUE(d.lm_head_weight.is_same(d.embed_weight));
  EXPECT_TRUE(torch::equal(d.layers[1].down.weight, m.layers[1].down.weight.to(torch::kDouble)));
  EXPECT_EQ(d.trainable_parameters().size(), m.trainable_parameters().size());
}

}  // namespace
}  // namespace bpbench::testing::test_model
