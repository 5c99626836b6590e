// test_hf_hybrid_config.cpp: Qwen3.5's, Qwen3.5-MoE's and Qwen3-Next's config.json as transformers 5.17 reads
// them (Qwen3_5TextConfig, Qwen3_5MoeTextConfig, Qwen3NextConfig): the layer types from
// full_attention_interval where the file has none, partial RoPE with its MRoPE sections, the image-text
// wrapper's text_config; and what bpbench does not model, or a malformed file, refused by name in one line.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "harness/model/hf_model.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_hf_hybrid_config {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

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

TEST(HfHybridConfig, TheDefaultsAndFormsTransformersReads) {
  ConfigFiles files;
  const json written = hf_config_json(find_model_preset("small-qwen3.5"));
  // Without layer_types: three linear layers of every full_attention_interval (4, or the file's).
  json edited = written;
  edited.erase("layer_types");
  ModelConfig c = files.read(edited);
  EXPECT_EQ(c.linear_layers, (std::vector<bool>{true, true, true, false}));
  edited["full_attention_interval"] = 2;
  EXPECT_EQ(files.read(edited).linear_layers, (std::vector<bool>{true, false, true, false}));
  // MRoPE's sections are plain RoPE for text; partial_rotary_factor defaults to 0.25 of the head (64: 16).
  edited = written;
  edited["rope_parameters"] = {{"rope_type", "default"},
                               {"rope_theta", 1e7},
                               {"mrope_section", {11, 11, 10}},
                               {"mrope_interleaved", true}};
  c = files.read(edited);
  EXPECT_EQ(c.rotary_dim, 16);
  EXPECT_EQ(c.rope.theta, 1e7);
  // The image-text checkpoint's config: its text model, the top level's tie_word_embeddings.
  json text = written;
  text.erase("architectures");
  text.erase("tie_word_embeddings");
  text["model_type"] = "qwen3_5_text";
  const json wrapper = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
                        {"model_type", "qwen3_5"},
                        {"tie_word_embeddings", true},
                        {"text_config", text},
                        {"vision_config", {{"depth", 27}}}};
  c = files.read(wrapper);
  EXPECT_EQ(c.architecture, "Qwen3_5ForCausalLM");
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.linear_layer_count(), 3);
}

// Qwen/Qwen3.5-27B's config.json as public code transcribes it (its image-text wrapper; the vision tower's
// fields cut to three): read as its text model, it is the preset qwen3.5-27b field for field, and the preset
// counts the parameters transformers 5.17's Qwen3_5ForCausalLM builds from that text_config (26,895,998,464,
// counted on the meta device, 2026-12-04).
TEST(HfHybridConfig, Qwen3_5_27bIsItsPublishedConfig) {
  ConfigFiles files;
  json text = {{"attention_bias", false},
               {"attention_dropout", 0.0},
               {"attn_output_gate", true},
               {"eos_token_id", 248044},
               {"full_attention_interval", 4},
               {"head_dim", 256},
               {"hidden_act", "silu"},
               {"hidden_size", 5120},
               {"initializer_range", 0.02},
               {"intermediate_size", 17408},
               {"linear_conv_kernel_dim", 4},
               {"linear_key_head_dim", 128},
               {"linear_num_key_heads", 16},
               {"linear_num_value_heads", 48},
               {"linear_value_head_dim", 128},
               {"mamba_ssm_dtype", "float32"},
               {"max_position_embeddings", 262144},
               {"mlp_only_layers", json::array()},
               {"model_type", "qwen3_5_text"},
               {"mtp_num_hidden_layers", 1},
               {"mtp_use_dedicated_embeddings", false},
               {"num_attention_heads", 24},
               {"num_hidden_layers", 64},
               {"num_key_value_heads", 4},
               {"pad_token_id", nullptr},
               {"partial_rotary_factor", 0.25},
               {"rms_norm_eps", 1e-6},
               {"rope_parameters",
                {{"mrope_interleaved", true},
                 {"mrope_section", {11, 11, 10}},
                 {"partial_rotary_factor", 0.25},
                 {"rope_theta", 10000000},
                 {"rope_type", "default"}}},
               {"tie_word_embeddings", false},
               {"use_cache", true},
               {"vocab_size", 248320}};
  const json published = {
      {"architectures", {"Qwen3_5ForConditionalGeneration"}},
      {"model_type", "qwen3_5"},
      {"text_config", text},
      {"tie_word_embeddings", false},
      {"vision_config", {{"depth", 27}, {"hidden_size", 1152}, {"out_hidden_size", 5120}}}};
  const ModelConfig read = files.read(published);
  const ModelConfig preset = find_model_preset("qwen3.5-27b");
  EXPECT_EQ(hf_config_json(read), hf_config_json(preset));
  EXPECT_EQ(preset.parameter_count(), 26895998464);
}

TEST(HfHybridConfig, WhatBpbenchDoesNotModelIsRefusedByName) {
  ConfigFiles files;
  const json written = hf_config_json(find_model_preset("small-qwen3.5"));
  json edited = written;
  edited["linear_num_value_heads"] = 3;  // 2 key heads
  EXPECT_THAT(files.refusal(edited),
              HasSubstr("\"linear_num_value_heads\" 3 must be a multiple of \"linear_num_key_heads\" 2"));
  edited = written;
  edited["layer_types"] = {"linear_attention", "sliding_attention", "linear_attention", "full_attention"};
  EXPECT_THAT(files.refusal(edited), HasSubstr("\"layer_types\" entry \"sliding_attention\" is not supported "
                                               "(valid: \"linear_attention\", \"full_attention\")"));
  edited["layer_types"] = {"linear_attention", "full_attention"};
  EXPECT_THAT(files.refusal(edited), HasSubstr("\"layer_types\" must list one type a layer (4)"));
  edited = written;
  edited["sliding_window"] = 4096;
  EXPECT_THAT(files.refusal(edited), HasSubstr("a sliding window is not supported on Qwen3.5"));
  edited = written;
  edited["attention_bias"] = true;
  EXPECT_THAT(files.refusal(edited),
              HasSubstr("attention_bias = true on Qwen3_5ForCausalLM biases o_proj too"));
  const json wrapper = {{"architectures", {"Qwen3_5ForConditionalGeneration"}}, {"model_type", "qwen3_5"}};
  EXPECT_THAT(files.refusal(wrapper), HasSubstr("needs a \"text_config\" object (its text model)"));
  json next = hf_config_json(find_model_preset("tiny-qwen3-next"));
  next["output_router_logits"] = true;
  EXPECT_THAT(files.refusal(next), HasSubstr("\"output_router_logits\" true adds the load-balancing loss"));
  for (const std::string& error : {files.refusal(edited), files.refusal(wrapper), files.refusal(next)})
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

}  // namespace
}  // namespace bpbench::testing::test_hf_hybrid_config
