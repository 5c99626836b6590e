// hf_deepseek.cpp: the families with DeepSeek's routing, config.json <-> ModelConfig, following
// transformers 5.17's classes (model.h's Note [MLA in the expanded form] says how bpbench runs them):
//   - DeepseekV2ForCausalLM (deepseek_v2; DeepSeek-V2, V2-Lite): MLA with RoPE on interleaved pairs (its
//     complex rotation, always); a softmax router, greedy or group-limited (each group's best expert), its
//     k weights not renormalised (transformers' router ignores norm_topk_prob) and scaled by
//     routed_scaling_factor; n_shared_experts beside the routed ones; layers from first_k_dense_replace on
//     routed (default 0).
//   - DeepseekV3ForCausalLM (deepseek_v3; DeepSeek-V3 and R1, Kimi K2, Moonlight): MLA, interleaved RoPE
//     where rope_interleave (default true); the sigmoid router with its e_score_correction_bias choosing
//     among the topk_group best of n_group groups (each group's two best experts summed), renormalised where
//     norm_topk_prob (default true) and scaled; the first first_k_dense_replace layers dense (default 3).
//     transformers' class ignores scoring_func, topk_method and the multi-token-prediction layers: so does
//     bpbench.
//   - Glm4MoeLiteForCausalLM (glm4_moe_lite; GLM-4.7-Flash): DeepSeek-V3's attention and routing, dense and
//     routed layers by mlp_layer_types (default: layer 0 dense), rms_norm_eps 1e-5.
//   - Glm4MoeForCausalLM (glm4_moe; GLM-4.5 and 4.6, GLM-4.5-Air): grouped-query attention with q, k, v
//     biases (attention_bias), per-head q/k norms where use_qk_norm, RoPE on the first partial_rotary_factor
//     (default 0.5) of each head; DeepSeek-V3's sigmoid routing (n_group and topk_group default 1), the first
//     first_k_dense_replace layers dense (default 1).
// All but GLM-4.5, MLA: q through q_a_proj, q_a_layernorm and q_b_proj (q_lora_rank), or q_proj where it is
// null; the
// softmax scale (qk_nope + qk_rope)^-1/2 x mscale^2 where the RoPE is scaled and states mscale_all_dim
// (yarn_get_mscale(factor, mscale_all_dim)); attention_bias on q_a, kv_a and o_proj. All: every expert and
// shared expert a SwiGLU of moe_intermediate_size (the shared ones n_shared_experts x that, one MLP).
// Their HfFamilyFields are named on their lines of hf_families.def.
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "harness/model/hf_family.h"
#include "harness/model/rope_config.h"

namespace bpbench {

using nlohmann::json;

namespace {

enum class RoutedFamily { deepseek_v2, deepseek_v3, glm4_moe_lite, glm4_moe };

// The RoPE entry of the file (transformers 5's "rope_parameters" or the Hub's "rope_scaling"), or null.
const json* rope_entry(const json& j) {
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (j.contains(key) && j[key].is_object()) return &j[key];
  return nullptr;
}

// The attention: MLA's dimensions, the RoPE (the shared reader's) and the softmax scale's mscale.
void read_mla(const ConfigReader& r, ModelConfig& c, RoutedFamily family, int64_t default_max_positions) {
  if (const int64_t kv = r.integer("num_key_value_heads", c.heads); kv != c.heads)
    r.fail(
        fmt::format("\"num_key_value_heads\" {} differs from \"num_attention_heads\" {}: multi-head latent "
                    "attention makes "
                    "K and V for every head (transformers' eager attention would repeat them again)",
                    kv, c.heads));
  ModelConfig::Mla mla;
  mla.q_lora_rank = r.integer("q_lora_rank", family == RoutedFamily::glm4_moe_lite ? 768 : 1536);
  if (r.json().contains("q_lora_rank") && r.json()["q_lora_rank"].is_null()) mla.q_lora_rank = 0;
  mla.kv_lora_rank = r.integer("kv_lora_rank", 512);
  mla.qk_rope_head_dim = r.integer("qk_rope_head_dim", 64);
  const int64_t nope = r.integer("qk_nope_head_dim", family == RoutedFamily::glm4_moe_lite ? 192 : 128);
  mla.v_head_dim = r.integer("v_head_dim", family == RoutedFamily::glm4_moe_lite ? 256 : 128);
  // DeepseekV2's rotation is complex (pairs, always); V3's and GLM's by rope_interleave.
  mla.rope_interleave = family == RoutedFamily::deepseek_v2 || r.boolean("rope_interleave", true);
  if (mla.q_lora_rank < 0 || mla.kv_lora_rank <= 0 || mla.qk_rope_head_dim <= 0 || nope <= 0 ||
      mla.v_head_dim <= 0)
    r.fail(
        "q_lora_rank (or null), kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim and v_head_dim must be > 0");
  if (mla.v_head_dim > nope + mla.qk_rope_head_dim)
    r.fail(
        fmt::format("\"v_head_dim\" {} wider than qk_nope_head_dim + qk_rope_head_dim ({}) is not modelled",
                    mla.v_head_dim, nope + mla.qk_rope_head_dim));
  c.head_dim = nope + mla.qk_rope_head_dim;  // the expanded form's (the file's head_dim is the RoPE's)
  c.kv_heads = c.heads;
  c.attention_bias = c.output_bias = r.boolean("attention_bias", false);
  try {
    c.rope = rope_from_hf_config(r.json(), default_max_positions);
  } catch (const std::invalid_argument& e) {
    r.fail(e.what());
  }
  // yarn_apply_mscale: a scaled RoPE's mscale_all_dim scales the softmax by yarn_get_mscale(factor, it)^2.
  if (const json* rope = rope_entry(r.json())) {
    const std::string type = rope->value("rope_type", rope->value("type", std::string("default")));
    const double all_dim = rope->contains("mscale_all_dim") && (*rope)["mscale_all_dim"].is_number()
                               ? (*rope)["mscale_all_dim"].get<double>()
                               : 0.0;
    if (type != "default" && all_dim != 0) mla.softmax_mscale = yarn_mscale(c.rope.factor, all_dim);
  }
  c.mla = mla;
}

// The experts: DeepSeek's routing, the shared experts and which layers are routed.
void read_deepseek_moe(const ConfigReader& r, ModelConfig& c, RoutedFamily family) {
  const bool v2 = family == RoutedFamily::deepseek_v2;
  // Each class's defaults: {DeepseekV2, DeepseekV3, Glm4MoeLite, Glm4Moe}.
  auto by_family = [&](auto v2_value, auto v3_value, auto lite_value, auto glm_value) {
    return v2                                      ? v2_value
           : family == RoutedFamily::deepseek_v3   ? v3_value
           : family == RoutedFamily::glm4_moe_lite ? lite_value
                                                   : glm_value;
  };
  c.experts = r.integer("n_routed_experts", by_family(64, 256, 64, 128));
  // DeepseekV2Config leaves num_experts_per_tok null, which its router cannot run (transformers 5.17's
  // DeepseekV2Moe takes topk of None): required there, and said so.
  if (v2 && (!r.json().contains("num_experts_per_tok") || r.json()["num_experts_per_tok"].is_null()))
    r.fail(
        "\"num_experts_per_tok\" is not set (null is DeepseekV2Config's default, with which transformers' "
        "own "
        "router cannot run): set the experts a token, 6 for DeepSeek-V2 and V2-Lite");
  c.experts_per_token =
      v2 ? r.integer("num_experts_per_tok") : r.integer("num_experts_per_tok", by_family(0, 8, 4, 8));
  if (c.experts < 1 || c.experts_per_token < 1 || c.experts_per_token > c.experts)
    r.fail(fmt::format("\"num_experts_per_tok\" {} must be between 1 and the {} experts", c.experts_per_token,
                       c.experts));
  c.expert_intermediate = r.integer("moe_intermediate_size", by_family(1407, 2048, 1536, 1408));
  c.shared_expert_intermediate = r.integer("n_shared_experts", v2 ? 2 : 1) * c.expert_intermediate;
  c.routed_scaling = r.number("routed_scaling_factor", by_family(1.0, 2.5, 1.8, 1.0));
  if (v2) {
    c.routing = ModelConfig::Routing::softmax_grouped;
    c.norm_topk_prob = false;  // DeepseekV2TopkRouter never renormalises
    const std::string method = r.string("topk_method").empty() ? "greedy" : r.string("topk_method");
    if (method == "group_limited_greedy") {
      c.expert_groups = r.integer("n_group");
      c.expert_groups_chosen = r.integer("topk_group");
    } else if (method != "greedy") {
      r.fail(fmt::format("\"topk_method\" '{}' is not DeepseekV2's (valid: greedy, group_limited_greedy)",
                         method));
    }
  } else {
    c.routing = ModelConfig::Routing::sigmoid_grouped;
    c.norm_topk_prob = r.boolean("norm_topk_prob", true);
    c.expert_groups = r.integer("n_group", family == RoutedFamily::deepseek_v3 ? 8 : 1);
    c.expert_groups_chosen = r.integer("topk_group", family == RoutedFamily::deepseek_v3 ? 4 : 1);
  }
  if (c.expert_groups < 1 || c.experts % c.expert_groups != 0 || c.expert_groups_chosen < 1 ||
      c.expert_groups_chosen > c.expert_groups)
    r.fail(fmt::format("\"n_group\" {} must divide the {} experts and \"topk_group\" {} be in 1 .. n_group",
                       c.expert_groups, c.experts, c.expert_groups_chosen));
  if (c.routing == ModelConfig::Routing::sigmoid_grouped && c.experts / c.expert_groups < 2)
    r.fail(
        "sigmoid routing scores each group by its two best experts: n_group must leave >= 2 experts a group");
  c.dense_layers.clear();
  if (family == RoutedFamily::glm4_moe_lite) {
    const json* types = r.find("mlp_layer_types");
    if (types && (!types->is_array() || static_cast<int64_t>(types->size()) != c.layers))
      r.fail(fmt::format("\"mlp_layer_types\" must list \"dense\" or \"sparse\" for each of the {} layers",
                         c.layers));
    for (int64_t i = 0; i < c.layers; ++i) {
      const json type = types ? (*types)[static_cast<size_t>(i)] : json(i == 0 ? "dense" : "sparse");
      if (type != "dense" && type != "sparse")
        r.fail(fmt::format("\"mlp_layer_types\" entry {} is not \"dense\" or \"sparse\"", type.dump()));
      if (type == "dense") c.dense_layers.push_back(i);
    }
  } else {
    const int64_t dense = r.integer("first_k_dense_replace", by_family(0, 3, 0, 1));
    if (dense < 0) r.fail(fmt::format("\"first_k_dense_replace\" must be >= 0, got {}", dense));
    for (int64_t i = 0; i < std::min(dense, c.layers); ++i) c.dense_layers.push_back(i);
  }
}

// GLM-4.5's attention: Llama's with q, k, v biases, per-head q/k norms (use_qk_norm) and partial RoPE.
void read_glm4_moe_attention(const ConfigReader& r, ModelConfig& c) {
  c.attention_bias = r.boolean("attention_bias", false);
  c.qk_norm = r.boolean("use_qk_norm", false);
  read_partial_rotary_rope(r, c, /*default_factor=*/0.5, /*default_max_positions=*/131072);
}

void read_glm4_moe(const ConfigReader& r, ModelConfig& c) {
  read_glm4_moe_attention(r, c);
  read_deepseek_moe(r, c, RoutedFamily::glm4_moe);
}

// What read_deepseek_moe reads, as the family's config class writes it.
void write_deepseek_moe(const ModelConfig& c, json& j, const std::string& model_type) {
  j["n_routed_experts"] = c.experts;
  j["num_experts_per_tok"] = c.experts_per_token;
  j["moe_intermediate_size"] = c.expert_intermediate;
  j["n_shared_experts"] = c.shared_expert_intermediate / c.expert_intermediate;
  j["routed_scaling_factor"] = c.routed_scaling;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["n_group"] = c.expert_groups;
  j["topk_group"] = c.expert_groups_chosen;
  j["pad_token_id"] = nullptr;  // no frozen embedding row (docs/models.md)
  if (model_type == "deepseek_v2") j["topk_method"] = c.expert_groups > 1 ? "group_limited_greedy" : "greedy";
  if (model_type == "glm4_moe_lite") {
    json types = json::array();
    for (int64_t i = 0; i < c.layers; ++i) types.push_back(c.is_moe_layer(i) ? "sparse" : "dense");
    j["mlp_layer_types"] = types;
    return;
  }
  int64_t dense = 0;
  while (dense < c.layers && !c.is_moe_layer(dense)) ++dense;
  j["first_k_dense_replace"] = dense;
}

void write_glm4_moe(const ModelConfig& c, json& j) {
  write_llama_like_fields(c, "Glm4MoeForCausalLM", "glm4_moe", j);
  j.erase("sliding_window");
  j["use_qk_norm"] = c.qk_norm;
  const int64_t spaced = c.rope.frequency_dims > 0 ? c.rope.frequency_dims : c.rope_head_dim();
  j["rope_parameters"]["partial_rotary_factor"] =
      static_cast<double>(spaced) / static_cast<double>(c.head_dim);
  write_deepseek_moe(c, j, "glm4_moe");
}

template <RoutedFamily family>
void read_mla_family(const ConfigReader& r, ModelConfig& c) {
  const int64_t max_positions = family == RoutedFamily::deepseek_v2   ? 2048
                                : family == RoutedFamily::deepseek_v3 ? 4096
                                                                      : 202752;
  read_mla(r, c, family, max_positions);
  read_deepseek_moe(r, c, family);
}

void write_mla_family(const ModelConfig& c, json& j, const char* architecture, const char* model_type) {
  write_llama_like_fields(c, architecture, model_type, j);
  j.erase("sliding_window");
  const ModelConfig::Mla& mla = *c.mla;
  j["head_dim"] = mla.qk_rope_head_dim;  // transformers' (the RoPE's); bpbench's is qk_nope + qk_rope
  j["q_lora_rank"] = mla.q_lora_rank > 0 ? json(mla.q_lora_rank) : json();
  j["kv_lora_rank"] = mla.kv_lora_rank;
  j["qk_rope_head_dim"] = mla.qk_rope_head_dim;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim();
  j["v_head_dim"] = mla.v_head_dim;
  if (std::string(model_type) != "deepseek_v2") j["rope_interleave"] = mla.rope_interleave;
  if (mla.softmax_mscale != 1.0) {  // the mscale_all_dim that gives it back (yarn_mscale)
    j["rope_parameters"]["mscale_all_dim"] = (mla.softmax_mscale - 1.0) / (0.1 * std::log(c.rope.factor));
    j["rope_parameters"]["attention_factor"] = c.rope.attention_factor;
  }
  write_deepseek_moe(c, j, model_type);
}

// Every family here reads its own RoPE (MLA's mscale, GLM's partial rotary factor).
HfFamilyFields routed_family_fields(void (*read)(const ConfigReader&, ModelConfig&),
                                    void (*write)(const ModelConfig&, json&), double rms_eps) {
  HfFamilyFields f;
  f.default_rms_eps = rms_eps;
  f.read = read;
  f.write = write;
  f.reads_rope = true;
  f.ignores_mtp_layers = true;  // DeepseekV2's class has none; its checkpoints carry none
  return f;
}

}  // namespace

const HfFamilyFields* glm4_moe_fields() {
  static const HfFamilyFields fields = routed_family_fields(read_glm4_moe, write_glm4_moe, 1e-5);
  return &fields;
}

const HfFamilyFields* deepseek_v2_fields() {
  static const HfFamilyFields fields = routed_family_fields(
      read_mla_family<RoutedFamily::deepseek_v2>,
      [](const ModelConfig& c, json& j) { write_mla_family(c, j, "DeepseekV2ForCausalLM", "deepseek_v2"); },
      1e-6);
  return &fields;
}

const HfFamilyFields* deepseek_v3_fields() {
  static const HfFamilyFields fields = routed_family_fields(
      read_mla_family<RoutedFamily::deepseek_v3>,
      [](const ModelConfig& c, json& j) { write_mla_family(c, j, "DeepseekV3ForCausalLM", "deepseek_v3"); },
      1e-6);
  return &fields;
}

const HfFamilyFields* glm4_moe_lite_fields() {
  static const HfFamilyFields fields = routed_family_fields(
      read_mla_family<RoutedFamily::glm4_moe_lite>,
      [](const ModelConfig& c, json& j) {
        write_mla_family(c, j, "Glm4MoeLiteForCausalLM", "glm4_moe_lite");
      },
      1e-5);
  return &fields;
}

}  // namespace bpbench
