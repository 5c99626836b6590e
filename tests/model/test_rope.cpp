// test_rope.cpp: RoPE's configuration (both transformers config forms, every modelled type, the refusals) and
// its tables (each type's frequencies by its defining property, float64 computed and cast once, chunk rows
// equal to the whole sequence's). Exactness against transformers itself is test_hf_oracle.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "harness/model/rope.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_rope {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr double kPi = 3.14159265358979323846;

const json kLlama31Scaling = {{"factor", 8.0},
                              {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0},
                              {"original_max_position_embeddings", 8192},
                              {"rope_type", "llama3"}};

RopeConfig from_hf(const json& config) {
  return rope_from_hf_config(config, 2048);
}

std::string refusal(const json& config) {
  try {
    from_hf(config);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(RopeConfigForms, TheHubFormTransformers5FormAndBothGiveOneRope) {
  const json hub = {
      {"rope_theta", 500000.0}, {"rope_scaling", kLlama31Scaling}, {"max_position_embeddings", 131072}};
  json v5 = {{"rope_parameters", kLlama31Scaling}, {"max_position_embeddings", 131072}};
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  json both = v5;
  both["rope_theta"] = 500000.0;

  const RopeConfig r = from_hf(hub);
  EXPECT_EQ(r.type, RopeType::kLlama3);
  EXPECT_EQ(r.theta, 500000.0);
  EXPECT_EQ(r.factor, 8.0);
  EXPECT_EQ(r.original_max_positions, 8192);
  EXPECT_EQ(r.max_positions, 131072);
  EXPECT_TRUE(from_hf(v5) == r);
  EXPECT_TRUE(from_hf(both) == r);
  EXPECT_TRUE(find_model_preset("llama3.1-8b").rope == r)
      << rope_summary(find_model_preset("llama3.1-8b").rope);
  EXPECT_EQ(rope_summary(r), "llama3 x8 (original 8192), theta 500000");

  // Older files write "type"; no RoPE object at all is the default type at theta 10000.
  const RopeConfig linear = from_hf({{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}});
  EXPECT_EQ(linear.type, RopeType::kLinear);
  EXPECT_EQ(linear.factor, 2.0);
  const RopeConfig plain = from_hf(json::object());
  EXPECT_EQ(plain.type, RopeType::kDefault);
  EXPECT_EQ(plain.theta, 10000.0);
  EXPECT_EQ(plain.max_positions, 2048);  // the architecture's default
}

TEST(RopeConfigForms, ATopLevelOriginalMaxPositionsWinsAsInTransformers) {
  json c = {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}},
            {"original_max_position_embeddings", 4096}};
  EXPECT_EQ(from_hf(c).original_max_positions, 4096);
  c.erase("original_max_position_embeddings");
  c["max_position_embeddings"] = 40960;
  EXPECT_EQ(from_hf(c).original_max_positions, 40960);  // transformers' fallback
}

TEST(RopeConfigForms, YarnResolvesWhatTransformersInfers) {
  json c = {{"rope_parameters",
             {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}}}};
  RopeConfig r = from_hf(c);
  EXPECT_DOUBLE_EQ(r.attention_factor, 0.1 * std::log(4.0) + 1.0);
  EXPECT_EQ(r.beta_fast, 32.0);
  EXPECT_EQ(r.beta_slow, 1.0);
  EXPECT_TRUE(r.truncate);

  c["rope_parameters"]["mscale"] = 0.9;
  c["rope_parameters"]["mscale_all_dim"] = 0.5;
  EXPECT_DOUBLE_EQ(from_hf(c).attention_factor, (0.09 * std::log(4.0) + 1.0) / (0.05 * std::log(4.0) + 1.0));
  c["rope_parameters"]["attention_factor"] = 1.25;  // given: wins over mscale
  EXPECT_EQ(from_hf(c).attention_factor, 1.25);

  c["rope_parameters"]["factor"] = nullptr;  // transformers: max_position_embeddings / original
  c["max_position_embeddings"] = 131072;
  EXPECT_EQ(from_hf(c).factor, 4.0);
  c["rope_parameters"]["beta_fast"] = 0;  // transformers reads `beta_fast or 32`
  EXPECT_EQ(from_hf(c).beta_fast, 32.0);
}

TEST(RopeConfigForms, RefusesWhatItDoesNotModelNamingTheField) {
  EXPECT_THAT(refusal({{"rope_scaling", {{"rope_type", "su"}, {"factor", 4.0}}}}),
              HasSubstr("\"rope_scaling\".rope_type 'su' is not supported (supported: default, linear, "
                        "dynamic, yarn, llama3, longrope)"));
  EXPECT_THAT(refusal({{"rope_scaling", {{"rope_type", "longrope"}, {"factor", 4.0}}}}),
              HasSubstr("\"rope_scaling\".short_factor must be a list of numbers"));
  EXPECT_THAT(
      refusal({{"rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}, {"short_factor", {1.0}}}}}),
      HasSubstr("\"rope_parameters\".short_factor is not a field of rope_type 'yarn'"));
  EXPECT_THAT(refusal({{"partial_rotary_factor", 0.5}}), HasSubstr("\"partial_rotary_factor\" 0.5"));
  EXPECT_THAT(refusal({{"rope_parameters", {{"rope_type", "linear"}}}}),
              HasSubstr("\"rope_parameters\".factor is required"));
  EXPECT_THAT(refusal({{"rope_parameters", {{"rope_type", "yarn"}}}}),
              HasSubstr("\"rope_parameters\".factor is required"));
  json llama3 = kLlama31Scaling;
  llama3.erase("low_freq_factor");
  EXPECT_THAT(refusal({{"rope_scaling", llama3}}), HasSubstr("\"rope_scaling\".low_freq_factor is required"));
  EXPECT_THAT(refusal({{"rope_scaling", {{"rope_type", "linear"}, {"type", "dynamic"}, {"factor", 2}}}}),
              HasSubstr("'linear' disagrees with \"rope_scaling\".type 'dynamic'"));
  EXPECT_THAT(
      refusal({{"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}},
               {"rope_parameters", {{"rope_type", "linear"}, {"factor", 4.0}}}}),
      HasSubstr("\"rope_scaling\" (linear x2, theta 10000) disagrees with \"rope_parameters\" (linear x4"));
  EXPECT_THAT(
      refusal({{"original_max_position_embeddings", 4096},
               {"rope_scaling",
                {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 8192}}}}),
      HasSubstr("\"original_max_position_embeddings\" 4096 disagrees with "
                "\"rope_scaling\".original_max_position_embeddings 8192"));
  EXPECT_THAT(refusal({{"rope_scaling", {{"rope_type", "linear"}, {"factor", -2}}}}),
              HasSubstr("\"rope_scaling\".factor must be > 0"));
}

TEST(RopeConfigForms, AScenarioOverrideKeepsTheModelsThetaUnlessGiven) {
  const RopeConfig qwen = find_model_preset("qwen3-8b").rope;
  const RopeConfig yarn = rope_with_parameters(
      qwen, {{"rope_type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 32768}});
  EXPECT_EQ(yarn.type, RopeType::kYarn);
  EXPECT_EQ(yarn.theta, 1e6);
  EXPECT_EQ(yarn.max_positions, 40960);
  EXPECT_EQ(rope_with_parameters(qwen, {{"rope_type", "default"}, {"rope_theta", 5e5}}).theta, 5e5);
  try {
    rope_with_parameters(qwen, {{"rope_type", "yarn"}, {"factr", 4}});
    FAIL() << "a misspelt field was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("rope.factr is not a field of rope_type 'yarn'"));
  }
}

// ---- tables ---------------------------------------------------------------------------------------------

std::vector<double> frequencies(const RopeConfig& r, int64_t hd, int64_t seq_len) {
  auto t = rope_inverse_frequencies(r, hd, seq_len, torch::kCPU).contiguous();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

TEST(RopeTables, DefaultLinearAndDynamicFrequencies) {
  RopeConfig r;
  r.theta = 1e6;
  r.max_positions = 64;
  const int64_t hd = 16;
  const auto base = frequencies(r, hd, 100);
  ASSERT_EQ(base.size(), 8u);
  for (int64_t k = 0; k < 8; ++k) EXPECT_DOUBLE_EQ(base[k], std::pow(1e6, -2.0 * k / hd)) << k;

  r.type = RopeType::kLinear;
  r.factor = 2.5;
  const auto linear = frequencies(r, hd, 100);
  for (int k = 0; k < 8; ++k) EXPECT_DOUBLE_EQ(linear[k], base[k] / 2.5) << k;

  r.type = RopeType::kDynamic;
  EXPECT_EQ(frequencies(r, hd, 64), base);  // within max_positions: no scaling
  EXPECT_EQ(frequencies(r, hd, 10), base);
  const auto dynamic = frequencies(r, hd, 100);
  const double scaled_base = 1e6 * std::pow(2.5 * 100 / 64 - 1.5, 16.0 / 14.0);
  for (int k = 0; k < 8; ++k) EXPECT_DOUBLE_EQ(dynamic[k], std::pow(scaled_base, -2.0 * k / hd)) << k;
}

TEST(RopeTables, Llama3KeepsHighFrequenciesAndDividesLowOnes) {
  const RopeConfig r = find_model_preset("llama3.1-8b").rope;
  RopeConfig unscaled;
  unscaled.theta = r.theta;
  const auto got = frequencies(r, 128, 1), base = frequencies(unscaled, 128, 1);
  int high = 0, medium = 0, low = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    const double wavelength = 2 * kPi / base[k];
    if (wavelength < 8192.0 / 4) {
      ++high;
      EXPECT_EQ(got[k], base[k]) << k;
    } else if (wavelength > 8192.0) {
      ++low;
      EXPECT_EQ(got[k], base[k] / 8) << k;
    } else {
      ++medium;
      EXPECT_GT(got[k], base[k] / 8) << k;
      EXPECT_LT(got[k], base[k]) << k;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(medium, 0);
  EXPECT_GT(low, 0);
}

TEST(RopeTables, YarnRampsFromKeptToInterpolatedAndScalesTheTables) {
  const RopeConfig r = rope_with_parameters(
      find_model_preset("qwen3-8b").rope,
      {{"rope_type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 32768}});
  RopeConfig unscaled;
  unscaled.theta = r.theta;
  const auto got = frequencies(r, 128, 1), base = frequencies(unscaled, 128, 1);
  EXPECT_EQ(got.front(), base.front());    // fast dimensions extrapolate
  EXPECT_EQ(got.back(), base.back() / 4);  // slow ones interpolate
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_LE(got[k], base[k]) << k;
    EXPECT_GE(got[k], base[k] / 4 * (1 - 1e-15)) << k;
  }
  // cos at position 0 is the attention factor itself.
  const RopeTables t = rope_tables(r, 128, 0, 1, 1, torch::TensorOptions().dtype(torch::kDouble));
  EXPECT_EQ(t.cos[0][0].item<double>(), r.attention_factor);
  EXPECT_EQ(t.sin[0][0].item<double>(), 0.0);
}

// Every type, at positions where float32 angles would already be off: bfloat16 and float32 tables are the
// float64 ones rounded once.
TEST(RopeTables, ComputedInFloat64AndCastOnce) {
  std::vector<RopeConfig> ropes = {find_model_preset("qwen3-8b").rope, find_model_preset("llama3.1-8b").rope};
  const RopeConfig qwen = ropes.front();
  ropes.push_back(rope_with_parameters(qwen, {{"rope_type", "linear"}, {"factor", 2}}));
  ropes.push_back(rope_with_parameters(qwen, {{"rope_type", "dynamic"}, {"factor", 2}}));
  ropes.push_back(rope_with_parameters(
      qwen, {{"rope_type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 32768}}));
  for (const auto& r : ropes) {
    const RopeTables exact =
        rope_tables(r, 128, 100000, 37, 131072, torch::TensorOptions().dtype(torch::kDouble));
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const RopeTables t = rope_tables(r, 128, 100000, 37, 131072, torch::TensorOptions().dtype(dtype));
      EXPECT_TRUE(torch::equal(t.cos, exact.cos.to(dtype))) << rope_summary(r);
      EXPECT_TRUE(torch::equal(t.sin, exact.sin.to(dtype))) << rope_summary(r);
    }
  }
}

// A chunk's rows [s, e) rotate exactly as those rows of the whole sequence do, dynamic scaling included.
TEST(RopeTables, ChunkRowsEqualTheWholeSequencesRows) {
  RopeConfig r = find_model_preset("tiny").rope;
  r.type = RopeType::kDynamic;
  r.factor = 3;
  r.max_positions = 8;
  const int64_t T = 23;
  torch::manual_seed(1);
  auto x = torch::randn({2, 3, T, 6}, torch::kDouble);
  auto whole = apply_rope(x, 0, T, r);
  for (int64_t s : {0, 5, 17}) {
    const int64_t c = std::min<int64_t>(7, T - s);
    EXPECT_TRUE(torch::equal(apply_rope(x.narrow(2, s, c), s, T, r), whole.narrow(2, s, c))) << s;
  }
  // The same rows at a shorter sequence length are another rotation: the length is not ignored.
  EXPECT_FALSE(torch::equal(apply_rope(x.narrow(2, 0, 7), 0, 7, r), whole.narrow(2, 0, 7)));
}

// ---- every strategy under every type ----------------------------------------------------------------

class EveryRopeType : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryRopeType, EveryStrategyMatchesPlainInFloat64) {
  const std::map<std::string, json> parameters = {
      {"linear", {{"rope_type", "linear"}, {"factor", 2.5}}},
      {"dynamic", {{"rope_type", "dynamic"}, {"factor", 3}}},
      {"yarn", {{"rope_type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 6}}},
      {"llama3",
       {{"rope_type", "llama3"},
        {"factor", 8},
        {"low_freq_factor", 1},
        {"high_freq_factor", 4},
        {"original_max_position_embeddings", 16}}},
  };
  Model model = tiny_model({2, false});
  model.config.rope.max_positions = 9;  // dynamic scales past it: T = 13 does
  model.config.rope = rope_with_parameters(model.config.rope, parameters.at(GetParam()));
  auto objective = make_objective("sft");
  Batch batch = padded_sft_batch(model, *objective);
  const auto ref = run_step("plain", model, batch, *objective, {13, 13});
  for (const std::string impl : {"checkpoint", "checkpoint-chunked-head", "mst", "streambp"})
    expect_same_gradients(ref, run_step(impl, model, batch, *objective, {4, 3}), 1e-10,
                          GetParam() + " " + impl);

  Model unscaled = tiny_model({2, false});
  unscaled.config.rope.max_positions = 9;
  EXPECT_NE(run_step("plain", unscaled, batch, *objective, {13, 13}).loss, ref.loss)
      << "the scaling did nothing";
}

INSTANTIATE_TEST_SUITE_P(Types, EveryRopeType, ::testing::Values("linear", "dynamic", "yarn", "llama3"));

}  // namespace
}  // namespace bpbench::testing::test_rope
