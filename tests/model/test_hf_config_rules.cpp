// test_hf_config_rules.cpp: each family's config.json as transformers reads it (Mistral, Phi-3, OLMo 2 and 3,
// SmolLM3, gpt-oss, Qwen3-MoE and Mixtral): the defaults where a file is silent, the forms of the Hub's
// files, and what bpbench does not model refused by name in one line. Loading whole directories:
// test_hf_model.cpp.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "harness/model/hf_model.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_hf_config_rules {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// config.json objects read as files of their own: the ModelConfig, or the one-line refusal.
class ConfigFiles {
 public:
  ModelConfig read(const json& config) {
    const std::string path = tmp_.file(fmt::format("config{}.json", ++files_));
    write_json(path, config);
    return read_hf_config(path);
  }
  std::string refusal(const json& config) {
    return error_of([&] { read(config); });
  }

 private:
  TempDir tmp_;
  int files_ = 0;
};

// Mistral and Phi-3 as transformers reads their files: a window on every layer from "sliding_window" (absent
// in a Mistral file: MistralConfig's 4096; null: none); what bpbench does not model refused by name (Phi-3's
// "su" and "yarn", which transformers runs as longrope; dropout; alternating layer types).
TEST(HfModel, MistralAndPhi3ConfigRules) {
  ConfigFiles files;
  auto read = [&](const json& config) { return files.read(config); };
  auto refusal = [&](const json& config) { return files.refusal(config); };
  const json mistral = hf_config_json(find_model_preset("mistral-7b"));
  EXPECT_FALSE(read(mistral).has_sliding_layers());  // v0.3: null
  json edited = mistral;
  edited.erase("sliding_window");
  ModelConfig c = read(edited);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.sliding_layer_count(), c.layers);
  EXPECT_EQ(c.architecture, "MistralForCausalLM");
  edited["sliding_window"] = 0;
  EXPECT_THAT(refusal(edited), HasSubstr("\"sliding_window\" must be > 0 or null, got 0"));
  edited = mistral;
  edited["layer_types"] = json::array({"sliding_attention", "full_attention"});
  EXPECT_THAT(refusal(edited), HasSubstr("\"layer_types\" is not supported for this architecture"));

  const json phi3 = hf_config_json(find_model_preset("phi3-mini"));
  c = read(phi3);
  EXPECT_EQ(c.sliding_window, 2047);
  EXPECT_EQ(c.sliding_layer_count(), 32);
  EXPECT_EQ(hf_config_json(c), phi3);  // read gives the preset back (its name aside)
  for (const char* type : {"su", "yarn"}) {
    edited = phi3;
    edited["rope_scaling"] = {{"type", type}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
    EXPECT_THAT(refusal(edited), HasSubstr("runs it as longrope (valid: write \"longrope\"")) << type;
  }
  edited = phi3;
  edited["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 1e4}};
  EXPECT_THAT(refusal(edited), HasSubstr("\"rope_parameters\".short_factor must be a list of numbers"));
  edited["rope_parameters"]["short_factor"] = std::vector<double>(48, 1.0);
  edited["rope_parameters"]["long_factor"] = std::vector<double>(47, 2.0);
  EXPECT_THAT(refusal(edited), HasSubstr("must have one factor per frequency each (got 48 and 47)"));
  edited["rope_parameters"]["long_factor"] = std::vector<double>(40, 2.0);
  edited["rope_parameters"]["short_factor"] = std::vector<double>(40, 1.0);
  EXPECT_THAT(refusal(edited), HasSubstr("longrope needs head_dim / 2 short and long factors"));
  edited = phi3;
  edited["resid_pdrop"] = 0.1;
  EXPECT_THAT(refusal(edited), HasSubstr("\"resid_pdrop\" 0.1 is not supported"));
  edited = phi3;
  edited["partial_rotary_factor"] = 0.75;  // Phi-4-mini
  EXPECT_THAT(refusal(edited), HasSubstr("partial_rotary_factor"));
}

// OLMo 2 and 3 and SmolLM3 as transformers reads their files: OLMo's norms (no input norms, q/k over the
// whole projection, scaled before the cast), OLMo 3's layer types and RoPE per type (a legacy rope_theta
// reaches the full layers only, as transformers 5.17 reads it), SmolLM3's NoPE layers by list or interval and
// its window on the layer types only with use_sliding_window; each refusal one line naming the field.
TEST(HfModel, OlmoAndSmolLM3ConfigRules) {
  ConfigFiles files;
  auto read = [&](const json& config) { return files.read(config); };
  auto refusal = [&](const json& config) { return files.refusal(config); };
  const json olmo2 = hf_config_json(find_model_preset("olmo-2-7b"));
  ModelConfig c = read(olmo2);
  EXPECT_EQ(c.architecture, "Olmo2ForCausalLM");
  EXPECT_TRUE(c.qk_norm && c.qk_norm_whole && c.norms_scale_before_cast && c.sandwich_norms);
  EXPECT_FALSE(c.block_input_norms);
  EXPECT_FALSE(c.has_sliding_layers());
  json edited = olmo2;
  edited.erase("rms_norm_eps");
  EXPECT_EQ(read(edited).rms_eps, 1e-5);  // Olmo2Config's default
  edited = olmo2;
  edited["attention_bias"] = true;
  EXPECT_THAT(refusal(edited), HasSubstr("biases o_proj too"));
  edited = olmo2;
  edited["layer_types"] = json::array({"sliding_attention"});
  EXPECT_THAT(refusal(edited), HasSubstr("\"layer_types\" entry \"sliding_attention\" is not supported"));

  const json olmo3 = hf_config_json(find_model_preset("olmo-3-7b"));
  c = read(olmo3);
  EXPECT_EQ(c.sliding_layer_count(), 24);
  EXPECT_EQ(c.window_of(3), 0);
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_EQ(c.sliding_rope->type, RopeType::kDefault);
  EXPECT_EQ(hf_config_json(c), olmo3);
  edited = olmo3;
  for (const char* key : {"layer_types", "rope_parameters"}) edited.erase(key);
  edited["rope_theta"] = 1e4;
  c = read(edited);
  EXPECT_EQ(c.sliding_layer_count(), 24);  // Olmo3Config's default: three sliding layers of four
  EXPECT_EQ(c.rope.theta, 1e4);
  EXPECT_EQ(c.sliding_rope->theta, 500000.0);
  edited = olmo3;
  edited["layer_types"][0] = "chunked_attention";
  EXPECT_THAT(refusal(edited),
              HasSubstr("is not one of OLMo 3's layer types (valid: sliding_attention, full_attention)"));
  edited = olmo3;
  edited["rope_parameters"]["full_attention"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  EXPECT_THAT(refusal(edited), HasSubstr("'dynamic' is not supported for OLMo 3"));

  const json smollm3 = hf_config_json(find_model_preset("smollm3-3b"));
  c = read(smollm3);
  EXPECT_EQ(c.rope_layer_count(), 27);
  EXPECT_FALSE(c.has_rope(3));
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(hf_config_json(c), smollm3);
  edited = smollm3;
  edited.erase("no_rope_layers");
  edited["no_rope_layer_interval"] = 3;
  EXPECT_EQ(read(edited).rope_layer_count(), 24);
  edited = smollm3;
  edited["no_rope_layers"][0] = 2;
  EXPECT_THAT(refusal(edited), HasSubstr("\"no_rope_layers\" entry 2 must be 1 (RoPE) or 0 (none)"));
  edited = smollm3;
  edited["no_rope_layers"] = json::array({1, 0});
  EXPECT_THAT(refusal(edited), HasSubstr("\"no_rope_layers\" must list one 0 or 1 per layer (36)"));
  edited = smollm3;
  edited["layer_types"][3] = "sliding_attention";
  edited["sliding_window"] = 128;
  EXPECT_FALSE(read(edited).has_sliding_layers());  // use_sliding_window false: no layer slides
  edited["use_sliding_window"] = true;
  c = read(edited);
  EXPECT_EQ(c.sliding_layer_count(), 1);
  EXPECT_EQ(c.window_of(3), 128);
}

// gpt-oss as transformers reads its files: the round trip of the presets, GptOssConfig's defaults where the
// file is silent (alternating layers, the YaRN RoPE and its 150k theta, 128 experts, 4 a token), the Hub's
// 4.x form (rope_theta and rope_scaling at the top), and what it cannot have refused by name.
TEST(HfModel, GptOssConfigRules) {
  ConfigFiles files;
  auto read = [&](const json& config) { return files.read(config); };
  auto refusal = [&](const json& config) { return files.refusal(config); };
  for (const std::string preset : {"gpt-oss-20b", "gpt-oss-120b", "tiny-gpt-oss"}) {
    const ModelConfig want = find_model_preset(preset);
    const json written = hf_config_json(want);
    const ModelConfig c = read(written);
    EXPECT_EQ(c.parameter_count(), want.parameter_count()) << preset;
    EXPECT_EQ(hf_config_json(c), written) << preset;
    EXPECT_TRUE(c.attention_sinks && c.output_bias && c.router_bias && c.expert_bias) << preset;
    EXPECT_EQ(c.activation, Activation::clamped_swiglu);
    EXPECT_EQ(c.routing, ModelConfig::Routing::topk_then_softmax);
  }
  const json gpt_oss = hf_config_json(find_model_preset("gpt-oss-20b"));
  json edited = gpt_oss;
  for (const char* key : {"layer_types", "rope_parameters", "sliding_window", "num_local_experts",
                          "num_experts_per_tok", "rms_norm_eps", "attention_bias"})
    edited.erase(key);
  ModelConfig c = read(edited);
  EXPECT_EQ(c.sliding_layer_count(), 12);
  EXPECT_EQ(c.window_of(0), 128);
  EXPECT_EQ(c.window_of(1), 0);
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_EQ(c.rope.theta, 150000.0);
  EXPECT_EQ(c.rope.factor, 32.0);
  EXPECT_FALSE(c.rope.truncate);
  EXPECT_EQ(c.experts, 128);
  EXPECT_EQ(c.experts_per_token, 4);
  EXPECT_EQ(c.rms_eps, 1e-5);
  EXPECT_TRUE(c.attention_bias);
  // The Hub's openai/gpt-oss-20b form.
  edited = gpt_oss;
  edited.erase("rope_parameters");
  edited["rope_theta"] = 150000;
  edited["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0},
                            {"beta_fast", 32.0},   {"beta_slow", 1.0},
                            {"truncate", false},   {"original_max_position_embeddings", 4096}};
  EXPECT_EQ(read(edited).rope, find_model_preset("gpt-oss-20b").rope);
  edited = gpt_oss;
  edited["layer_types"][0] = "chunked_attention";
  EXPECT_THAT(refusal(edited), HasSubstr("is not one of gpt-oss's layer types"));
  edited = gpt_oss;
  edited["output_router_logits"] = true;
  EXPECT_THAT(refusal(edited), HasSubstr("\"output_router_logits\" true"));
  // The Hub's released weights are MXFP4: the config estimates (its weights load: HfModel.GptOssMxfp4...);
  // another method, or MXFP4 on another family, is refused by name before any weight is read.
  edited = gpt_oss;
  edited["quantization_config"] = {{"quant_method", "mxfp4"}, {"modules_to_not_convert", json::array()}};
  EXPECT_EQ(read(edited).parameter_count(), find_model_preset("gpt-oss-20b").parameter_count());
  edited["quantization_config"]["quant_method"] = "gptq";
  TempDir quantized;
  write_json(quantized.file("config.json"), edited);
  EXPECT_THAT(error_of([&] { load_hf_model(quantized.dir().string(), torch::kFloat); }),
              HasSubstr("weights quantized as gptq (\"quantization_config\"), which bpbench does not load"));
  json llama = hf_config_json(find_model_preset("llama3.2-1b"));
  llama["quantization_config"] = {{"quant_method", "mxfp4"}};
  TempDir quantized_llama;
  write_json(quantized_llama.file("config.json"), llama);
  EXPECT_THAT(error_of([&] { load_hf_model(quantized_llama.dir().string(), torch::kFloat); }),
              HasSubstr("weights quantized as mxfp4 (\"quantization_config\"), which bpbench does not load"));
}

// Qwen3-MoE and Mixtral as transformers reads their files (num_experts or 5.x's num_local_experts,
// mlp_only_layers, decoder_sparse_step); what bpbench's experts do not model refused by name, never
// approximated: the load-balancing loss in the training loss, router noise, shared experts, a router bias,
// another scoring function.
TEST(HfModel, MixtureOfExpertsConfigRules) {
  ConfigFiles files;
  auto read = [&](const json& config) { return files.read(config); };
  auto refusal = [&](const json& config) { return files.refusal(config); };
  for (const std::string preset : {"qwen3-30b-a3b", "mixtral-8x7b", "tiny-moe"}) {
    const ModelConfig want = find_model_preset(preset);
    const ModelConfig got = read(hf_config_json(want));
    EXPECT_EQ(got.architecture, want.architecture) << preset;
    EXPECT_EQ(got.parameter_count(), want.parameter_count()) << preset;
    EXPECT_EQ(got.active_parameter_count(), want.active_parameter_count()) << preset;
    EXPECT_EQ(got.norm_topk_prob, want.norm_topk_prob) << preset;
  }
  json qwen = hf_config_json(find_model_preset("qwen3-30b-a3b"));
  json edited = qwen;
  edited.erase("num_experts");
  edited["num_local_experts"] = 64;  // as transformers 5 saves it
  edited["mlp_only_layers"] = {0, 47};
  edited["decoder_sparse_step"] = 2;
  ModelConfig c = read(edited);
  EXPECT_EQ(c.experts, 64);
  EXPECT_FALSE(c.is_moe_layer(0));   // listed
  EXPECT_TRUE(c.is_moe_layer(1));    // (1 + 1) % 2 == 0
  EXPECT_FALSE(c.is_moe_layer(2));   // not a sparse step
  EXPECT_FALSE(c.is_moe_layer(47));  // listed
  EXPECT_EQ(c.moe_layer_count(), 23);
  for (const auto& [key, value, named] :
       {std::tuple("output_router_logits", json(true), "load-balancing loss"),
        std::tuple("router_jitter_noise", json(0.01), "router_jitter_noise"),
        std::tuple("shared_expert_intermediate_size", json(2048), "shared_expert_intermediate_size"),
        std::tuple("e_score_correction_bias", json(true), "e_score_correction_bias"),
        std::tuple("scoring_func", json("sigmoid"), "scoring_func"),
        std::tuple("num_experts_per_tok", json(200), "between 1 and the 128 experts"),
        std::tuple("mlp_only_layers", json({48}), "not a layer index")}) {
    edited = qwen;
    edited[key] = value;
    EXPECT_THAT(refusal(edited), HasSubstr(named)) << key;
  }
  // DeepseekV2Config's own default, which transformers' router cannot run either: named, with what to set.
  json v2 = hf_config_json(find_model_preset("deepseek-v2-lite"));
  v2["num_experts_per_tok"] = nullptr;
  EXPECT_THAT(refusal(v2),
              HasSubstr("\"num_experts_per_tok\" is not set (null is DeepseekV2Config's default"));
  json mixtral = hf_config_json(find_model_preset("mixtral-8x7b"));
  mixtral["router_jitter_noise"] = 0.1;
  EXPECT_THAT(refusal(mixtral), HasSubstr("\"router_jitter_noise\" 0.1 is not supported"));
}

}  // namespace
}  // namespace bpbench::testing::test_hf_config_rules
