// test_hf_model.cpp: Hugging Face model directories written here (config.json + safetensors, sharded or not)
// load into exactly the model they were written from: every tensor equal, the same SFT loss and gradients
// under plain BP, the right architecture flags and config defaults; and each broken directory gives an error
// naming the cause.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "harness/model/hf_model.h"
#include "harness/model/safetensors.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_hf_model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

// Every parameter of `got` has the name, dtype and value of `want`'s (converted to `got`'s dtype).
void expect_same_weights(const Model& want, const Model& got) {
  const auto w = want.named_parameters(), g = got.named_parameters();
  ASSERT_EQ(w.size(), g.size());
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_EQ(w[i].name, g[i].name);
    EXPECT_EQ(g[i].tensor.scalar_type(), got.dtype()) << g[i].name;
    EXPECT_TRUE(g[i].tensor.requires_grad()) << g[i].name;
    EXPECT_TRUE(torch::equal(w[i].tensor.detach().to(g[i].tensor.scalar_type()), g[i].tensor.detach()))
        << g[i].name;
  }
}

TEST(HfModel, LoadsShardedQwen3Exactly) {
  TempDir tmp;
  Model preset = tiny_model({2, false}, torch::kFloat);
  const std::string dir = tmp.sub("tiny-qwen3");
  write_hf_model_dir(dir, hf_config(preset.config, "Qwen3ForCausalLM"), named_tensors_of(preset), 3);
  ASSERT_TRUE(fs::exists(fs::path(dir) / "model.safetensors.index.json"));

  EXPECT_TRUE(is_hf_model_dir(dir));
  Model loaded = load_hf_model(dir, torch::TensorOptions().dtype(torch::kFloat));
  const ModelConfig& c = loaded.config;
  EXPECT_EQ(c.name, "tiny-qwen3");
  EXPECT_EQ(c.vocab, preset.config.vocab);
  EXPECT_EQ(c.hidden, preset.config.hidden);
  EXPECT_EQ(c.intermediate, preset.config.intermediate);
  EXPECT_EQ(c.layers, preset.config.layers);
  EXPECT_EQ(c.heads, preset.config.heads);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.head_dim, preset.config.head_dim);
  EXPECT_TRUE(c.rope == preset.config.rope) << rope_summary(c.rope);
  EXPECT_EQ(c.rms_eps, preset.config.rms_eps);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.parameter_count(), preset.config.parameter_count());
  expect_same_weights(preset, loaded);

  // Same weights, same config: plain BP must give the identical SFT loss and gradients.
  auto objective = make_objective("sft");
  Batch batch = padded_sft_batch(preset, *objective);
  auto want = run_step("plain", preset, batch, *objective, {13, 13});
  auto got = run_step("plain", loaded, batch, *objective, {13, 13});
  EXPECT_EQ(got.loss, want.loss);
  expect_same_gradients(want, got, 0.0, "loaded vs preset");
}

TEST(HfModel, ConvertsOnLoad) {
  TempDir tmp;
  Model preset = tiny_model({2, false}, torch::kFloat);
  const std::string dir = tmp.sub("f32");
  write_hf_model_dir(dir, hf_config(preset.config, "Qwen3ForCausalLM"), named_tensors_of(preset), 1);
  Model as_double = load_hf_model(dir, torch::TensorOptions().dtype(torch::kDouble));
  EXPECT_EQ(as_double.dtype(), torch::kDouble);
  expect_same_weights(preset, as_double);

  // A bf16 checkpoint loaded as float32 holds exactly the bf16 values.
  Model bf16 = preset.converted(torch::TensorOptions().dtype(torch::kBFloat16));
  const std::string dir16 = tmp.sub("bf16");
  write_hf_model_dir(dir16, hf_config(preset.config, "Qwen3ForCausalLM"), named_tensors_of(bf16), 2);
  Model from_bf16 = load_hf_model(dir16, torch::TensorOptions().dtype(torch::kFloat));
  EXPECT_EQ(from_bf16.dtype(), torch::kFloat);
  expect_same_weights(bf16, from_bf16);
}

TEST(HfModel, Qwen2HasAttentionBias) {
  TempDir tmp;
  Model preset = tiny_model({2, false, /*attention_bias=*/true, /*qk_norm=*/false}, torch::kFloat);
  const std::string dir = tmp.sub("tiny-qwen2");
  write_hf_model_dir(dir, hf_config(preset.config, "Qwen2ForCausalLM"), named_tensors_of(preset), 2);
  Model loaded = load_hf_model(dir, torch::TensorOptions().dtype(torch::kFloat));
  EXPECT_TRUE(loaded.config.attention_bias);
  EXPECT_FALSE(loaded.config.qk_norm);
  ASSERT_TRUE(loaded.layers[1].k.bias.defined());
  EXPECT_FALSE(loaded.layers[1].o.bias.defined());
  EXPECT_FALSE(loaded.layers[0].q_norm.defined());
  expect_same_weights(preset, loaded);
}

TEST(HfModel, LlamaHasNoQkNormAndConfigDefaults) {
  TempDir tmp;
  Model preset = tiny_model({4, false, false, /*qk_norm=*/false}, torch::kFloat);
  json config = hf_config(preset.config, "LlamaForCausalLM");
  // Optional fields left out: their defaults must reproduce the preset (kv = heads, hd = d / heads, theta
  // 1e4).
  for (const char* key :
       {"num_key_value_heads", "head_dim", "rope_theta", "tie_word_embeddings", "hidden_act"})
    config.erase(key);
  config["attention_bias"] = false;
  const std::string dir = tmp.sub("tiny-llama");
  write_hf_model_dir(dir, config, named_tensors_of(preset), 1);

  ModelConfig c = read_hf_config(dir + "/");  // a trailing slash must not empty the name
  EXPECT_EQ(c.name, "tiny-llama");
  EXPECT_EQ(c.kv_heads, c.heads);
  EXPECT_EQ(c.head_dim, c.hidden / c.heads);
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);

  Model loaded = load_hf_model(dir, torch::TensorOptions().dtype(torch::kFloat));
  EXPECT_FALSE(loaded.layers[0].q_norm.defined());
  EXPECT_FALSE(loaded.layers[0].q.bias.defined());
  expect_same_weights(preset, loaded);
}

// transformers 5 writes RoPE's base inside "rope_parameters" and no top-level rope_theta; 4.x the opposite.
TEST(HfModel, RopeThetaFromEitherConfigForm) {
  TempDir tmp;
  Model preset = tiny_model({2, false}, torch::kFloat);
  json v5 = hf_config(preset.config, "Qwen3ForCausalLM");
  v5.erase("rope_theta");
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  const std::string dir5 = tmp.sub("v5");
  write_hf_model_dir(dir5, v5, named_tensors_of(preset), 1);
  EXPECT_EQ(read_hf_config(dir5).rope.theta, 1e6);

  json both = v5;
  both["rope_theta"] = 1e6;  // both forms, agreeing
  const std::string dir_both = tmp.sub("both");
  write_hf_model_dir(dir_both, both, named_tensors_of(preset), 1);
  EXPECT_EQ(read_hf_config(dir_both).rope.theta, 1e6);

  json v4 = hf_config(preset.config, "Qwen3ForCausalLM");
  v4["rope_theta"] = 5e5;
  const std::string dir4 = tmp.sub("v4");
  write_hf_model_dir(dir4, v4, named_tensors_of(preset), 1);
  EXPECT_EQ(read_hf_config(dir4).rope.theta, 5e5);
}

TEST(HfModel, ArchitectureFromModelType) {
  TempDir tmp;
  Model preset = tiny_model({2, false}, torch::kFloat);
  json config = hf_config(preset.config, "Qwen3ForCausalLM");
  config.erase("architectures");
  config["model_type"] = "qwen3";
  const std::string dir = tmp.sub("by-type");
  write_json(dir + "/config.json", config);
  EXPECT_TRUE(read_hf_config(dir).qk_norm);
}

TEST(HfModel, TiedCheckpointMayCarryLmHead) {
  TempDir tmp;
  Model preset = tiny_model({2, /*tied=*/true}, torch::kFloat);
  NamedTensors tensors = named_tensors_of(preset);
  tensors.emplace_back("lm_head.weight", preset.embed_weight.detach().clone());
  const std::string dir = tmp.sub("tied");
  write_hf_model_dir(dir, hf_config(preset.config, "Qwen3ForCausalLM"), tensors, 2);
  Model loaded = load_hf_model(dir, torch::TensorOptions().dtype(torch::kFloat));
  EXPECT_TRUE(loaded.config.tie_embeddings);
  EXPECT_TRUE(loaded.lm_head_weight.is_same(loaded.embed_weight));
  expect_same_weights(preset, loaded);

  // ...but only when it has the embedding's shape.
  tensors.back().second = torch::zeros({preset.config.vocab, preset.config.hidden + 1});
  const std::string bad = tmp.sub("tied-bad");
  write_hf_model_dir(bad, hf_config(preset.config, "Qwen3ForCausalLM"), tensors, 1);
  auto msg = error_of([&] { load_hf_model(bad, torch::kFloat); });
  EXPECT_THAT(msg, HasSubstr("'lm_head.weight'"));
  EXPECT_THAT(msg, HasSubstr("expected [97, 24]"));
}

// DeepSeek-V3's and GLM-4.5's checkpoints carry multi-token-prediction layers after the decoder's, which
// transformers' class ignores on load: so does bpbench, num_nextn_predict_layers of them; a tensor past
// those, or one under a layer index of a family without them (Qwen3), is still unexpected.
TEST(HfModel, MultiTokenPredictionLayersAreIgnoredWhereTransformersIgnoresThem) {
  TempDir tmp;
  const Model deepseek = Model::random(find_model_preset("tiny-deepseek"), torch::kFloat, 5);
  NamedTensors tensors = named_tensors_of(deepseek);
  tensors.emplace_back("model.layers.2.eh_proj.weight", torch::zeros({24, 48}));
  const std::string dir = tmp.sub("mtp");
  write_hf_model_dir(dir, hf_config_json(deepseek.config), tensors);
  const Model loaded = load_hf_model(dir, torch::TensorOptions().dtype(torch::kFloat));
  EXPECT_EQ(loaded.config.layers, 2);
  expect_same_weights(deepseek, loaded);

  tensors.emplace_back("model.layers.3.eh_proj.weight", torch::zeros({24, 48}));
  const std::string two = tmp.sub("mtp-two");
  write_hf_model_dir(two, hf_config_json(deepseek.config), tensors);
  EXPECT_THAT(error_of([&] { load_hf_model(two, torch::kFloat); }),
              HasSubstr("unexpected tensor 'model.layers.3.eh_proj.weight'"));
  json config = hf_config_json(deepseek.config);
  config["num_nextn_predict_layers"] = 2;
  write_json(two + "/config.json", config);
  EXPECT_EQ(load_hf_model(two, torch::TensorOptions().dtype(torch::kFloat)).config.layers, 2);

  Model qwen = tiny_model({2}, torch::kFloat);
  NamedTensors qwen_tensors = named_tensors_of(qwen);
  qwen_tensors.emplace_back("model.layers.2.eh_proj.weight", torch::zeros({24, 48}));
  const std::string qwen_dir = tmp.sub("qwen");
  write_hf_model_dir(qwen_dir, hf_config(qwen.config, "Qwen3ForCausalLM"), qwen_tensors);
  EXPECT_THAT(error_of([&] { load_hf_model(qwen_dir, torch::kFloat); }),
              HasSubstr("unexpected tensor 'model.layers.2.eh_proj.weight'"));
}

TEST(HfModel, IsHfModelDir) {
  TempDir tmp;
  const std::string dir = tmp.sub("m");
  EXPECT_FALSE(is_hf_model_dir(dir));  // no config.json yet
  write_json(dir + "/config.json", json::object());
  EXPECT_TRUE(is_hf_model_dir(dir));
  EXPECT_FALSE(is_hf_model_dir(dir + "/config.json"));
  EXPECT_FALSE(is_hf_model_dir(dir + "/missing"));
  EXPECT_FALSE(is_hf_model_dir("tiny"));
}

// ---- broken directories
// ------------------------------------------------------------------------------------------

class HfModelErrors : public ::testing::Test {
 protected:
  // The tiny Qwen3 directory with `edit` applied to its tensors and `config` to its config.json; the load
  // error.
  template <class EditTensors, class EditConfig>
  std::string load_error(EditTensors edit_tensors, EditConfig edit_config) {
    NamedTensors tensors = named_tensors_of(preset_);
    edit_tensors(tensors);
    json config = hf_config(preset_.config, "Qwen3ForCausalLM");
    edit_config(config);
    const std::string dir = tmp_.sub(fmt::format("case{}", ++cases_));
    write_hf_model_dir(dir, config, tensors, 2);
    auto msg = error_of([&] { load_hf_model(dir, torch::TensorOptions().dtype(torch::kFloat)); });
    EXPECT_THAT(msg, HasSubstr(dir));
    return msg;
  }
  template <class EditTensors>
  std::string load_error(EditTensors edit_tensors) {
    return load_error(edit_tensors, [](json&) {});
  }
  static void replace(NamedTensors& t, const std::string& name, torch::Tensor value) {
    for (auto& [n, v] : t)
      if (n == name) v = value;
  }

  TempDir tmp_;
  Model preset_ = tiny_model({2, false}, torch::kFloat);
  int cases_ = 0;
};

TEST_F(HfModelErrors, UnsupportedArchitecture) {
  auto msg = load_error([](NamedTensors&) {},
                        [](json& c) { c["architectures"] = json::array({"GPT2LMHeadModel"}); });
  EXPECT_THAT(msg, HasSubstr("GPT2LMHeadModel"));
  EXPECT_THAT(msg, HasSubstr("Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM"));
}

TEST_F(HfModelErrors, UnsupportedFeatures) {
  EXPECT_THAT(load_error([](NamedTensors&) {}, [](json& c) { c["attention_bias"] = true; }),
              HasSubstr("attention_bias"));
  EXPECT_THAT(load_error([](NamedTensors&) {}, [](json& c) { c["hidden_act"] = "gelu"; }), HasSubstr("gelu"));
  EXPECT_THAT(load_error([](NamedTensors&) {}, [](json& c) { c["num_attention_heads"] = 5; }),
              HasSubstr("heads"));
  EXPECT_THAT(load_error([](NamedTensors&) {}, [](json& c) { c.erase("hidden_size"); }),
              HasSubstr("missing \"hidden_size\""));
  EXPECT_THAT(load_error([](NamedTensors&) {}, [](json& c) { c["vocab_size"] = "97"; }),
              HasSubstr("\"vocab_size\" must be an integer"));
  EXPECT_THAT(load_error([](NamedTensors&) {},
                         [](json& c) {
                           c["rope_theta"] = 1e6;
                           c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
                         }),
              HasSubstr("\"rope_theta\" 1000000 disagrees with \"rope_parameters\".rope_theta 500000"));
  EXPECT_THAT(load_error([](NamedTensors&) {}, [](json& c) { c["rope_parameters"] = 5; }),
              HasSubstr("\"rope_parameters\" must be an object"));
}

TEST_F(HfModelErrors, MissingTensor) {
  auto msg = load_error([](NamedTensors& t) {
    t.erase(std::remove_if(t.begin(), t.end(),
                           [](auto& p) { return p.first == "model.layers.1.mlp.up_proj.weight"; }),
            t.end());
  });
  EXPECT_THAT(msg, HasSubstr("missing tensor 'model.layers.1.mlp.up_proj.weight'"));
}

TEST_F(HfModelErrors, ExtraTensor) {
  auto msg = load_error(
      [](NamedTensors& t) { t.emplace_back("model.layers.0.self_attn.extra.weight", torch::ones({2})); });
  EXPECT_THAT(msg, HasSubstr("unexpected tensor 'model.layers.0.self_attn.extra.weight'"));
}

TEST_F(HfModelErrors, ShapeMismatch) {
  auto msg = load_error([](NamedTensors& t) {
    replace(t, "model.layers.0.self_attn.k_proj.weight", torch::zeros({12, 25}));
  });
  EXPECT_THAT(msg, HasSubstr("'model.layers.0.self_attn.k_proj.weight'"));
  EXPECT_THAT(msg, HasSubstr("has shape [12, 25], expected [12, 24]"));
}

TEST_F(HfModelErrors, WeightDtype) {
  auto msg =
      load_error([](NamedTensors& t) { replace(t, "model.norm.weight", torch::ones({24}, torch::kDouble)); });
  EXPECT_THAT(msg, HasSubstr("'model.norm.weight'"));
  EXPECT_THAT(msg, HasSubstr("dtype F64"));
}

TEST_F(HfModelErrors, BrokenShard) {
  NamedTensors tensors = named_tensors_of(preset_);
  const std::string dir = tmp_.sub("broken");
  write_hf_model_dir(dir, hf_config(preset_.config, "Qwen3ForCausalLM"), tensors, 2);
  const std::string shard = dir + "/model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 5);
  auto msg = error_of([&] { load_hf_model(dir, torch::kFloat); });
  EXPECT_THAT(msg, HasSubstr(shard));
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

TEST_F(HfModelErrors, MissingFiles) {
  const std::string no_config = tmp_.sub("no-config");
  save_safetensors_dir(no_config, named_tensors_of(preset_), 1);
  auto msg = error_of([&] { load_hf_model(no_config, torch::kFloat); });
  EXPECT_THAT(msg, HasSubstr("config.json"));
  EXPECT_THAT(msg, HasSubstr(no_config));

  const std::string no_weights = tmp_.sub("no-weights");
  write_json(no_weights + "/config.json", hf_config(preset_.config, "Qwen3ForCausalLM"));
  msg = error_of([&] { load_hf_model(no_weights, torch::kFloat); });
  EXPECT_THAT(msg, HasSubstr("no weights"));
  EXPECT_THAT(msg, HasSubstr(no_weights));

  const std::string bad_json = tmp_.sub("bad-json");
  std::ofstream(bad_json + "/config.json") << "{\"architectures\": [";
  EXPECT_THAT(error_of([&] { read_hf_config(bad_json); }), HasSubstr("malformed JSON"));
}

}  // namespace
}  // namespace bpbench::testing::test_hf_model
