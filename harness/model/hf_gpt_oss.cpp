// hf_gpt_oss.cpp: gpt-oss's config.json <-> ModelConfig and checkpoint names, following transformers 5.17's
// GptOssConfig and GptOssForCausalLM (model_type "gpt_oss"):
//   - attention with q, k, v and o biases (attention_bias) and one sink logit per query head
//     ("self_attn.sinks": harness/model/attention_sinks.h); sliding (128) and full layers alternating by
//     "layer_types" (default: even layers slide); one RoPE for every layer (default YaRN x32 of 4096,
//     beta_fast 32, beta_slow 1, truncate false, theta 150000);
//   - a mixture of experts in every layer: a router with a bias ("mlp.router"), the k largest logits and a
//     softmax over them, experts with biases whose gate and up are one stacked, interleaved tensor
//     ("mlp.experts.gate_up_proj" (E, d, 2 Ie): gate at even columns, up at odd; x @ W, not x W^T) and
//     down likewise ("mlp.experts.down_proj" (E, Ie, d)); the clamped SwiGLU of ops.h (hidden_act is not read
//     by transformers' experts, nor here);
//   - norms scaled in float32 before the one cast, as OLMo's (GptOssRMSNorm).
// The Hub's released checkpoints store the experts in MXFP4 ("gate_up_proj_blocks", "_scales"): the loader
// dequantizes them (hf_model.cpp, mxfp4.h) into the weights a BF16 release gives.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "harness/model/hf_family.h"
#include "harness/model/hf_moe_fields.h"
#include "harness/model/rope_config.h"

namespace bpbench {

using nlohmann::json;

namespace {

constexpr int64_t kGptOssDefaultWindow = 128;           // GptOssConfig.sliding_window
constexpr int64_t kGptOssDefaultMaxPositions = 131072;  // GptOssConfig.max_position_embeddings
constexpr double kGptOssDefaultTheta = 150000.0;        // GptOssConfig.default_theta

// GptOssConfig.__post_init__'s RoPE where config.json states none.
json gpt_oss_default_rope() {
  return {{"rope_type", "yarn"},
          {"factor", 32.0},
          {"beta_fast", 32.0},
          {"beta_slow", 1.0},
          {"truncate", false},
          {"original_max_position_embeddings", 4096},
          {"rope_theta", kGptOssDefaultTheta}};
}

void read_gpt_oss_config(const ConfigReader& r, ModelConfig& c) {
  refuse_foreign_moe_fields(r);
  read_experts(r, c, /*default_experts=*/128, /*default_k=*/4);
  c.expert_intermediate = c.intermediate;
  set_gpt_oss_blocks(c);
  c.attention_bias = c.output_bias = r.boolean("attention_bias", true);
  read_sliding_layer_types(r, c, gpt_oss_sliding_layers(c.layers), kGptOssDefaultWindow, "gpt-oss");
  // The shared RoPE reader with gpt-oss's defaults where the file leaves them out.
  json j = r.json();
  if (!j.contains("rope_parameters") && !j.contains("rope_scaling"))
    j["rope_parameters"] = gpt_oss_default_rope();
  if (!j.contains("rope_theta") &&
      !(j.contains("rope_parameters") && j["rope_parameters"].contains("rope_theta")))
    j["rope_theta"] = kGptOssDefaultTheta;
  try {
    c.rope = rope_from_hf_config(j, kGptOssDefaultMaxPositions);
  } catch (const std::invalid_argument& e) {
    r.fail(e.what());
  }
}

void write_gpt_oss_config(const ModelConfig& c, json& j) {
  write_llama_like_fields(c, "GptOssForCausalLM", "gpt_oss", j);
  json layer_types = json::array();
  for (int64_t i = 0; i < c.layers; ++i)
    layer_types.push_back(c.window_of(i) > 0 ? "sliding_attention" : "full_attention");
  j["layer_types"] = layer_types;
  j["sliding_window"] = c.sliding_window;
  j["attention_bias"] = c.attention_bias;
  j["intermediate_size"] = c.expert_intermediate;
  j["num_local_experts"] = c.experts;
  j["num_experts_per_tok"] = c.experts_per_token;
  j["pad_token_id"] = nullptr;  // no frozen embedding row (docs/models.md), as the other new families
}

// `name` with its ending `from` replaced by `to`, where it ends so.
void replace_suffix(std::string& name, const std::string& from, const std::string& to) {
  if (name.size() >= from.size() && name.compare(name.size() - from.size(), from.size(), from) == 0)
    name.replace(name.size() - from.size(), from.size(), to);
}

// bpbench's per-expert parameters (Model::named_parameters) from the checkpoint's stacked tensors, and its
// router (bpbench's "mlp.gate") as the checkpoint names it.
void gpt_oss_weights(const ModelConfig& c, std::vector<WeightSlot>& slots) {
  std::vector<WeightSlot> out;
  const int64_t E = c.experts, Ie = c.expert_intermediate, d = c.hidden;
  for (size_t k = 0; k < slots.size(); ++k) {
    WeightSlot& s = slots[k];
    const auto at = s.name.find("mlp.experts.0.gate_proj.weight");
    if (at == std::string::npos) {
      replace_suffix(s.name, "mlp.gate.weight", "mlp.router.weight");
      replace_suffix(s.name, "mlp.gate.bias", "mlp.router.bias");
      out.push_back(std::move(s));
      continue;
    }
    // The layer's E experts: gate (weight, bias), up (weight, bias), down (weight, bias), expert by expert.
    const std::string p = s.name.substr(0, at) + "mlp.experts.";
    WeightSlot gate_up{p + "gate_up_proj", {E, d, 2 * Ie}, {}},
        gate_up_bias{p + "gate_up_proj_bias", {E, 2 * Ie}, {}}, down{p + "down_proj", {E, Ie, d}, {}},
        down_bias{p + "down_proj_bias", {E, d}, {}};
    for (int64_t e = 0; e < E; ++e) {
      auto part = [&](size_t offset) {
        return slots.at(k + 6 * static_cast<size_t>(e) + offset).parts.at(0);
      };
      WeightSlot::Part gw = part(0), gb = part(1), uw = part(2), ub = part(3), dw = part(4), db = part(5);
      using torch::indexing::None;
      using torch::indexing::Slice;
      gw.take = [e](const torch::Tensor& t) { return t[e].index({Slice(), Slice(0, None, 2)}).t(); };
      uw.take = [e](const torch::Tensor& t) { return t[e].index({Slice(), Slice(1, None, 2)}).t(); };
      gb.take = [e](const torch::Tensor& t) { return t[e].index({Slice(0, None, 2)}); };
      ub.take = [e](const torch::Tensor& t) { return t[e].index({Slice(1, None, 2)}); };
      dw.take = [e](const torch::Tensor& t) { return t[e].t(); };
      db.take = [e](const torch::Tensor& t) { return t[e]; };
      gate_up.parts.insert(gate_up.parts.end(), {gw, uw});
      gate_up_bias.parts.insert(gate_up_bias.parts.end(), {gb, ub});
      down.parts.push_back(dw);
      down_bias.parts.push_back(db);
    }
    out.insert(out.end(), {gate_up, gate_up_bias, down, down_bias});
    k += 6 * static_cast<size_t>(E) - 1;
  }
  slots = std::move(out);
}

}  // namespace

const HfFamilyFields* gpt_oss_fields() {
  static const HfFamilyFields fields = [] {
    HfFamilyFields f;
    f.default_rms_eps = 1e-5;  // GptOssConfig
    f.read = read_gpt_oss_config;
    f.write = write_gpt_oss_config;
    f.checkpoint_names = gpt_oss_weights;
    f.reads_rope = f.reads_window = f.reads_activation = true;
    return f;
  }();
  return &fields;
}

}  // namespace bpbench
