// test_gemma3.cpp: the Gemma 3 family. Every strategy equals plain BP in float64 on tiny-gemma3 (sliding and
// full layers, each with its RoPE, windows narrower than, equal to and wider than the partition, tied head,
// LoRA); the (1 + w) norm and the embedding factor as transformers computes them; the presets' layer
// pattern; a Gemma 3 directory loads back exactly; and every Gemma 3 field bpbench does not model is refused
// in one line. transformers itself is the oracle in test_hf_oracle.cpp (gemma3_* cases).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "harness/model/hf_model.h"
#include "harness/model/safetensors.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_gemma3 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

constexpr int64_t kT = 17;  // prime; longer than tiny-gemma3's window (5) several times over
constexpr double kTol = 1e-10;

// tiny-gemma3 in `dtype` with distinct norm weights (zero-centred ones at 0 would hide a wrong norm
// gradient).
Model tiny_gemma3(torch::ScalarType dtype = torch::kDouble, int64_t window = 5) {
  ModelConfig c = find_model_preset("tiny-gemma3");
  c.sliding_window = window;
  Model m = Model::random(c, torch::TensorOptions().dtype(dtype), 7);
  torch::NoGradGuard no_grad;
  torch::manual_seed(8);
  for (auto& p : m.named_parameters())
    if (p.group == ParamGroup::norms) p.tensor.add_(0.1 * torch::randn(p.tensor.sizes(), p.tensor.options()));
  return m;
}

BatchSpec spec_for(const std::string& objective, int64_t vocab) {
  return padded_batch_spec(objective, vocab, kT, /*prompt_len=*/9);  // longer than the partitions below
}

// ---- exactness
// ----------------------------------------------------------------------------------------------

struct ExactCase {
  std::string objective;
  int64_t window, partition, lora_rank;
};

class Gemma3Exactness : public ::testing::TestWithParam<ExactCase> {};

TEST_P(Gemma3Exactness, EveryStrategyMatchesPlainInFloat64) {
  const ExactCase& c = GetParam();
  Model model = tiny_gemma3(torch::kDouble, c.window);
  if (c.lora_rank > 0) model.add_lora(c.lora_rank, 2.0 * c.lora_rank, 3);
  auto objective = make_objective(c.objective);
  Batch batch = objective->make_batch(spec_for(c.objective, model.config.vocab), model, 4);
  const auto ref = run_step("plain", model, batch, *objective, {kT, kT});
  for (const std::string impl : {"checkpoint", "checkpoint-chunked-head", "mst", "streambp"}) {
    if (make_strategy(impl)->unsupported({c.objective, 1})) continue;
    expect_same_gradients(ref, run_step(impl, model, batch, *objective, {c.partition, 4}), kTol,
                          fmt::format("{} {} window {} partition {} lora {}", impl, c.objective, c.window,
                                      c.partition, c.lora_rank));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Windows, Gemma3Exactness,
    ::testing::Values(ExactCase{"sft", 5, 7, 0}, ExactCase{"sft", 7, 7, 0}, ExactCase{"sft", 11, 7, 0},
                      ExactCase{"sft", 3, 1, 0}, ExactCase{"sft", 5, kT + 2, 0}, ExactCase{"dpo", 4, 6, 0},
                      ExactCase{"grpo", 6, 5, 0}, ExactCase{"sft", 5, 7, 2}, ExactCase{"dpo", 5, 3, 2}),
    [](const auto& info) {
      const ExactCase& c = info.param;
      return fmt::format("{}_w{}_p{}_lora{}", c.objective, c.window, c.partition, c.lora_rank);
    });

// The pieces that make a Gemma 3 layer what it is each change the loss: the test above compares strategies
// on a network that really has them.
TEST(Gemma3Model, EachGemmaPieceChangesTheLoss) {
  auto objective = make_objective("sft");
  auto loss_of = [&](const std::function<void(ModelConfig&)>& edit) {
    Model model = tiny_gemma3();
    edit(model.config);
    Batch batch = objective->make_batch(spec_for("sft", model.config.vocab), model, 4);
    return run_step("plain", model, batch, *objective, {kT, kT}).loss;
  };
  const double gemma = loss_of([](ModelConfig&) {});
  EXPECT_NE(gemma, loss_of([](ModelConfig& c) { c.sliding_layers = {false, false, false}; }));
  EXPECT_NE(gemma, loss_of([](ModelConfig& c) { c.sliding_rope = c.rope; }));
  EXPECT_NE(gemma, loss_of([](ModelConfig& c) { c.query_pre_attn_scalar = 0; }));
  EXPECT_NE(gemma, loss_of([](ModelConfig& c) { c.activation = Activation::silu; }));
  EXPECT_NE(gemma, loss_of([](ModelConfig& c) { c.scale_embeddings = false; }));
}

// ---- pieces
// -------------------------------------------------------------------------------------------------

// transformers' Gemma3RMSNorm: float32 normalisation, times (1 + w) in float32, ONE cast back at the end.
TEST(Gemma3Model, UnitOffsetNormCastsOnceAtTheEnd) {
  torch::manual_seed(1);
  const auto x = torch::randn({3, 5, 64}).to(torch::kBFloat16);
  const auto w = (0.3 * torch::randn({64})).to(torch::kBFloat16);
  const auto xf = x.to(torch::kFloat);
  const auto want =
      (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + 1e-6) * (1 + w.to(torch::kFloat))).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(unit_offset_rms_norm(x, w, 1e-6), want));
  // Qwen's order (cast, then scale by w in bfloat16) rounds twice and differs somewhere.
  EXPECT_FALSE(torch::equal(rms_norm(x, 1 + w, 1e-6), want));
  // float64 stays float64.
  const auto xd = x.to(torch::kDouble), wd = w.to(torch::kDouble);
  const auto got = unit_offset_rms_norm(xd, wd, 1e-6);
  EXPECT_EQ(got.scalar_type(), torch::kDouble);
  EXPECT_TRUE(torch::allclose(got, xd * torch::rsqrt(xd.pow(2).mean(-1, true) + 1e-6) * (1 + wd), 0, 1e-15));
}

// sqrt(d) rounded to float32 (transformers' buffer), then to the model dtype; exact in float64.
TEST(Gemma3Model, EmbeddingScaleIsRoundedLikeTransformers) {
  ModelConfig c = find_model_preset("tiny-gemma3");
  c.hidden = 1152;  // gemma3-1b: sqrt(1152) = 33.94..., 34 in bfloat16
  c.heads = c.kv_heads = 1;
  c.layers = 1;
  c.sliding_layers = {true};
  auto scale = [&](torch::ScalarType dtype) {
    return Model::random(c, torch::TensorOptions().dtype(dtype), 1).embedding_scale();
  };
  EXPECT_EQ(scale(torch::kBFloat16), 34.0);
  EXPECT_EQ(scale(torch::kFloat), static_cast<double>(static_cast<float>(std::sqrt(1152.0))));
  EXPECT_EQ(scale(torch::kDouble), std::sqrt(1152.0));
  Model m = Model::random(c, torch::TensorOptions().dtype(torch::kBFloat16), 1);
  const auto ids = torch::tensor({{3, 5}}, torch::kLong);
  EXPECT_TRUE(torch::equal(m.embed(ids), torch::embedding(m.embed_weight, ids) * 34.0));
}

TEST(Gemma3Presets, EverySixthLayerIsGlobalWithItsOwnRope) {
  for (const std::string name : {"gemma3-1b", "gemma3-4b", "gemma3-12b", "gemma3-27b"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = find_model_preset(name);
    for (int64_t i = 0; i < c.layers; ++i) EXPECT_EQ(c.window_of(i) == 0, (i + 1) % 6 == 0) << i;
    ASSERT_TRUE(c.sliding_rope.has_value());
    EXPECT_EQ(c.sliding_rope->theta, 1e4);
    EXPECT_EQ(c.rope.theta, 1e6);
    EXPECT_EQ(c.rope_of(0).theta, 1e4);
    EXPECT_EQ(c.rope_of(5).theta, 1e6);
    EXPECT_TRUE(c.tie_embeddings && c.qk_norm && c.unit_offset_norms && c.sandwich_norms &&
                c.scale_embeddings);
    EXPECT_EQ(c.activation, Activation::gelu_tanh);
    // Four d-wide norms and q/k norms per layer, as named_parameters lists them. On the meta device: the
    // shapes without the values (one layer of gemma3-27b is 0.4 G random numbers on the CPU).
    const Model shape_only = [&] {
      ModelConfig small = c;
      small.layers = 1;
      small.sliding_layers = {true};
      small.vocab = 8;
      return Model::random(small, torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kMeta), 0);
    }();
    int64_t counted = 0;
    for (const auto& p : shape_only.named_parameters()) counted += p.tensor.numel();
    ModelConfig one_layer = c;
    one_layer.layers = 1;
    one_layer.sliding_layers = {true};
    one_layer.vocab = 8;
    EXPECT_EQ(counted, one_layer.parameter_count());
  }
  EXPECT_EQ(find_model_preset("gemma3-1b").sliding_window, 512);
  EXPECT_EQ(find_model_preset("gemma3-4b").rope.type, RopeType::kLinear);
  EXPECT_EQ(find_model_preset("gemma3-27b").attention_scale(), 1.0 / std::sqrt(168.0));
}

// ---- Hugging Face directories
// -------------------------------------------------------------------------------

void write_model_dir(const std::string& dir, const json& config, const Model& m) {
  std::ofstream((fs::path(dir) / "config.json").string()) << config.dump(2);
  NamedTensors tensors;
  for (const auto& p : m.named_parameters()) tensors.emplace_back(p.name, p.tensor);
  save_safetensors_dir(dir, tensors, 1);
}

TEST(Gemma3Directory, LoadsBackExactlyWithEveryField) {
  TempDir tmp;
  Model m = tiny_gemma3(torch::kFloat);
  m.config.rope.type = RopeType::kLinear;
  m.config.rope.factor = 2.0;
  write_model_dir(tmp.path(), hf_config_json(m.config), m);
  Model back = load_hf_model(tmp.path(), torch::TensorOptions().dtype(torch::kFloat));
  const ModelConfig& c = back.config;
  EXPECT_EQ(c.sliding_layers, m.config.sliding_layers);
  EXPECT_EQ(c.sliding_window, m.config.sliding_window);
  EXPECT_EQ(c.rope, m.config.rope);
  ASSERT_TRUE(c.sliding_rope.has_value());
  EXPECT_EQ(*c.sliding_rope, *m.config.sliding_rope);
  EXPECT_EQ(c.query_pre_attn_scalar, m.config.query_pre_attn_scalar);
  EXPECT_TRUE(c.unit_offset_norms && c.sandwich_norms && c.scale_embeddings && c.tie_embeddings);
  const auto want = m.named_parameters(), got = back.named_parameters();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].name, got[i].name);
    EXPECT_TRUE(torch::equal(want[i].tensor.detach(), got[i].tensor.detach())) << want[i].name;
  }
}

// The Hub's legacy form: no layer_types (sliding_window_pattern, default 6), thetas at the top level, the
// full layers' scaling in rope_scaling.
TEST(Gemma3Directory, ReadsTheLegacyForm) {
  TempDir tmp;
  Model m = tiny_gemma3(torch::kFloat);
  json config = hf_config_json(m.config);
  config.erase("layer_types");
  config.erase("rope_parameters");
  config["rope_theta"] = 5e5;
  config["rope_local_base_freq"] = 2e4;
  config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  config["sliding_window_pattern"] = 3;
  std::ofstream((fs::path(tmp.path()) / "config.json").string()) << config.dump(2);
  ModelConfig c = read_hf_config(tmp.path());
  EXPECT_EQ(c.sliding_layers, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(c.rope.type, RopeType::kLinear);
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.theta, 5e5);
  EXPECT_EQ(c.sliding_rope->type, RopeType::kDefault);
  EXPECT_EQ(c.sliding_rope->theta, 2e4);
  config.erase("sliding_window_pattern");
  config.erase("rope_theta");
  config.erase("rope_local_base_freq");
  config.erase("rope_scaling");
  config.erase("head_dim");
  config.erase("tie_word_embeddings");
  config.erase("query_pre_attn_scalar");
  config["num_hidden_layers"] = 12;
  std::ofstream((fs::path(tmp.path()) / "config.json").string()) << config.dump(2);
  c = read_hf_config(tmp.path());
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(c.window_of(i) == 0, i == 5 || i == 11) << i;
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.sliding_rope->theta, 1e4);
  EXPECT_EQ(c.head_dim, 256);  // Gemma3TextConfig's defaults, not Qwen's
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.query_pre_attn_scalar, 256.0);
}

TEST(Gemma3Directory, RefusesWhatItDoesNotModelByName) {
  TempDir tmp;
  const json base = hf_config_json(find_model_preset("tiny-gemma3"));
  auto error = [&](const std::function<void(json&)>& edit) -> std::string {
    json config = base;
    edit(config);
    std::ofstream((fs::path(tmp.path()) / "config.json").string()) << config.dump(2);
    try {
      read_hf_config(tmp.path());
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "accepted " << config.dump();
    return "";
  };
  EXPECT_THAT(error([](json& c) { c["final_logit_softcapping"] = 30.0; }),
              HasSubstr("final_logit_softcapping"));
  EXPECT_THAT(error([](json& c) { c["attn_logit_softcapping"] = 50.0; }),
              HasSubstr("attn_logit_softcapping"));
  EXPECT_THAT(error([](json& c) { c["use_bidirectional_attention"] = true; }),
              HasSubstr("use_bidirectional_attention"));
  EXPECT_THAT(error([](json& c) { c["hidden_activation"] = "gelu"; }), HasSubstr("only gelu_pytorch_tanh"));
  EXPECT_THAT(error([](json& c) { c["layer_types"][1] = "chunked_attention"; }),
              HasSubstr("valid: sliding_attention, full_attention"));
  EXPECT_THAT(error([](json& c) { c["layer_types"].erase(0); }), HasSubstr("one type per layer (3)"));
  EXPECT_THAT(error([](json& c) { c["sliding_window"] = 0; }), HasSubstr("\"sliding_window\" must be > 0"));
  EXPECT_THAT(error([](json& c) {
                c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
              }),
              HasSubstr("keyed by layer type"));
  EXPECT_THAT(error([](json& c) {
                c.erase("rope_parameters");
                c["rope_scaling"] = {{"type", "linear"}, {"factor", 8.0}};
              }),
              HasSubstr("write \"rope_type\""));
  EXPECT_THAT(error([](json& c) {
                c["rope_parameters"]["full_attention"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
              }),
              HasSubstr("'dynamic' is not supported for Gemma 3"));
  EXPECT_THAT(error([](json& c) { c["architectures"] = {"Gemma3ForConditionalGeneration"}; }),
              HasSubstr("use a text-only checkpoint, or the presets gemma3-4b"));
  EXPECT_THAT(error([](json& c) { c["query_pre_attn_scalar"] = 0; }), HasSubstr("query_pre_attn_scalar"));
}

}  // namespace
}  // namespace bpbench::testing::test_gemma3
