// hf_qwen3_5.cpp: Qwen3.5's and Qwen3-Next's config.json <-> ModelConfig, following transformers 5.17's
// Qwen3_5TextConfig (model_type "qwen3_5_text", Qwen3_5ForCausalLM) and Qwen3NextConfig ("qwen3_next",
// Qwen3NextForCausalLM): Gated DeltaNet layers ("linear_attention" in "layer_types", else three of every
// full_attention_interval = 4) beside full-attention ones whose output is gated, every norm (1 + w), RoPE on
// partial_rotary_factor (0.25) of each head, its MRoPE sections plain RoPE for text. Qwen3-Next adds a
// mixture of experts with a sigmoid-gated shared expert, and fuses its projections in the checkpoint (Qwen3.5
// does not): in_proj_qkvz and in_proj_ba, grouped by key head. Qwen3.5-MoE (Qwen3_5MoeTextConfig,
// "qwen3_5_moe_text") is Qwen3.5 with those experts on every layer. Qwen3.5's and Qwen3.5-MoE's image-text
// checkpoints (Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration) load as their text model
// (HfFamilyFields::multimodal_class). Their HfFamilyFields are named on their lines of hf_families.def.

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/model/hf_family.h"
#include "harness/model/hf_moe_fields.h"

namespace bpbench {

using nlohmann::json;

namespace {

constexpr int64_t kQwen3_5MaxPositions = 32768;  // both config classes' max_position_embeddings
constexpr double kQwen3_5PartialRotary = 0.25;

// "linear_attention" or "full_attention" a layer, with transformers' legacy names (remap_legacy_layer_types).
bool linear_layer_type(const ConfigReader& r, const json& type) {
  if (type == "linear_attention" || type == "mamba" || type == "conv") return true;
  if (type == "full_attention" || type == "attention") return false;
  r.fail(fmt::format(
      "\"layer_types\" entry {} is not supported (valid: \"linear_attention\", \"full_attention\")",
      type.dump()));
}

void read_linear_attention(const ConfigReader& r, ModelConfig& c) {
  ModelConfig::LinearAttention la;
  la.key_heads = r.integer("linear_num_key_heads", 16);
  la.value_heads = r.integer("linear_num_value_heads", 32);
  la.key_dim = r.integer("linear_key_head_dim", 128);
  la.value_dim = r.integer("linear_value_head_dim", 128);
  la.conv_kernel = r.integer("linear_conv_kernel_dim", 4);
  if (la.key_heads < 1 || la.value_heads < 1 || la.value_heads % la.key_heads != 0)
    r.fail(fmt::format(
        "\"linear_num_value_heads\" {} must be a multiple of \"linear_num_key_heads\" {} (both >= 1)",
        la.value_heads, la.key_heads));
  if (la.key_dim < 1 || la.value_dim < 1 || la.conv_kernel < 1)
    r.fail("\"linear_key_head_dim\", \"linear_value_head_dim\" and \"linear_conv_kernel_dim\" must be >= 1");
  c.linear_attention = la;
  c.linear_layers.assign(static_cast<size_t>(c.layers), false);
  if (const json* types = r.find("layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c.layers)
      r.fail(fmt::format("\"layer_types\" must list one type a layer ({})", c.layers));
    for (size_t i = 0; i < types->size(); ++i) c.linear_layers[i] = linear_layer_type(r, (*types)[i]);
    return;
  }
  const int64_t interval = r.integer("full_attention_interval", 4);
  if (interval < 1) r.fail(fmt::format("\"full_attention_interval\" must be >= 1, got {}", interval));
  for (int64_t i = 0; i < c.layers; ++i) c.linear_layers[static_cast<size_t>(i)] = (i + 1) % interval != 0;
}

void read_qwen3_5_config(const ConfigReader& r, ModelConfig& c) {
  if (r.boolean("use_sliding_window", false) || r.find("sliding_window"))
    r.fail("a sliding window is not supported on Qwen3.5 (its full layers attend over the whole prefix)");
  c.unit_offset_norms = true;
  c.attention_output_gate = true;
  read_linear_attention(r, c);
  read_partial_rotary_rope(r, c, kQwen3_5PartialRotary, kQwen3_5MaxPositions,
                           {"mrope_section", "mrope_interleaved"});
}

// The experts Qwen3-Next and Qwen3.5-MoE share: softmax then the k best, a gated shared expert.
void read_gated_shared_experts(const ConfigReader& r, ModelConfig& c, int64_t default_experts,
                               int64_t default_k) {
  if (r.boolean("output_router_logits", false))
    r.fail(
        "\"output_router_logits\" true adds the load-balancing loss to the training loss, which bpbench "
        "turns "
        "on in the scenario instead (\"router_aux_loss_coef\"; valid here: false, transformers' default)");
  read_experts(r, c, default_experts, default_k);
  c.expert_intermediate = r.integer("moe_intermediate_size", 512);
  c.shared_expert_intermediate = r.integer("shared_expert_intermediate_size", 512);
  if (c.shared_expert_intermediate < 1)
    r.fail("\"shared_expert_intermediate_size\" must be >= 1 (the gated shared expert)");
  c.shared_expert_gate = true;
}

// Qwen3_5MoeTextConfig: every layer routed (no dense MLP, no intermediate_size), always renormalised.
void read_qwen3_5_moe_config(const ConfigReader& r, ModelConfig& c) {
  read_qwen3_5_config(r, c);
  read_gated_shared_experts(r, c, /*default_experts=*/256, /*default_k=*/8);
  c.norm_topk_prob = true;
}

void read_qwen3_next_config(const ConfigReader& r, ModelConfig& c) {
  read_qwen3_5_config(r, c);
  read_gated_shared_experts(r, c, /*default_experts=*/512, /*default_k=*/10);
  c.norm_topk_prob = r.boolean("norm_topk_prob", true);
  c.sparse_step = r.integer("decoder_sparse_step", 1);
  if (c.sparse_step < 1) r.fail(fmt::format("\"decoder_sparse_step\" must be >= 1, got {}", c.sparse_step));
  c.dense_layers.clear();
  if (const json* dense = r.find("mlp_only_layers")) {
    if (!dense->is_array()) r.fail("\"mlp_only_layers\" must be a list of layer indices");
    for (const auto& layer : *dense) {
      if (!layer.is_number_integer() || layer.get<int64_t>() < 0 || layer.get<int64_t>() >= c.layers)
        r.fail(fmt::format("\"mlp_only_layers\" entry {} is not a layer index (0 .. {})", layer.dump(),
                           c.layers - 1));
      c.dense_layers.push_back(layer.get<int64_t>());
    }
  }
}

void write_qwen3_5_fields(const ModelConfig& c, const char* architecture, const char* model_type, json& j) {
  write_llama_like_fields(c, architecture, model_type, j);
  j.erase("sliding_window");
  const int64_t spaced = c.rope.frequency_dims > 0 ? c.rope.frequency_dims : c.rope_head_dim();
  j["rope_parameters"]["partial_rotary_factor"] =
      static_cast<double>(spaced) / static_cast<double>(c.head_dim);
  const ModelConfig::LinearAttention& la = *c.linear_attention;
  j["linear_num_key_heads"] = la.key_heads;
  j["linear_num_value_heads"] = la.value_heads;
  j["linear_key_head_dim"] = la.key_dim;
  j["linear_value_head_dim"] = la.value_dim;
  j["linear_conv_kernel_dim"] = la.conv_kernel;
  json types = json::array();
  for (int64_t i = 0; i < c.layers; ++i)
    types.push_back(c.is_linear_layer(i) ? "linear_attention" : "full_attention");
  j["layer_types"] = types;
  j["pad_token_id"] = nullptr;  // no frozen embedding row (docs/models.md)
}

void write_qwen3_5_config(const ModelConfig& c, json& j) {
  write_qwen3_5_fields(c, "Qwen3_5ForCausalLM", "qwen3_5_text", j);
}

void write_gated_shared_experts(const ModelConfig& c, json& j) {
  j["num_experts"] = c.experts;
  j["num_experts_per_tok"] = c.experts_per_token;
  j["moe_intermediate_size"] = c.expert_intermediate;
  j["shared_expert_intermediate_size"] = c.shared_expert_intermediate;
}

void write_qwen3_5_moe_config(const ModelConfig& c, json& j) {
  write_qwen3_5_fields(c, "Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", j);
  write_gated_shared_experts(c, j);
  j.erase("intermediate_size");  // not a field of Qwen3_5MoeTextConfig
}

void write_qwen3_next_config(const ModelConfig& c, json& j) {
  write_qwen3_5_fields(c, "Qwen3NextForCausalLM", "qwen3_next", j);
  write_gated_shared_experts(c, j);
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["decoder_sparse_step"] = c.sparse_step;
  j["mlp_only_layers"] = c.dense_layers;
}

std::vector<WeightSlot>::iterator slot_named(std::vector<WeightSlot>& slots, const std::string& name) {
  auto it = std::find_if(slots.begin(), slots.end(), [&](const WeightSlot& s) { return s.name == name; });
  if (it == slots.end()) throw std::logic_error(fmt::format("qwen3.5 checkpoint names: no slot {}", name));
  return it;
}

// Replaces the slots `pieces` by one slot `fused` of `rows` rows whose parts are theirs, each part taking its
// rows from the whole tensor by `take(whole, k)` for the k-th piece.
void fuse_by_take(std::vector<WeightSlot>& slots, const std::vector<std::string>& pieces,
                  const std::string& fused, int64_t rows,
                  const std::function<torch::Tensor(const torch::Tensor&, size_t)>& take) {
  WeightSlot merged{fused, {rows, slot_named(slots, pieces.front())->shape.at(1)}, {}};
  for (size_t k = 0; k < pieces.size(); ++k) {
    auto it = slot_named(slots, pieces[k]);
    WeightSlot::Part part = it->parts.at(0);
    part.take = [take, k](const torch::Tensor& whole) { return take(whole, k); };
    merged.parts.push_back(std::move(part));
    if (k == 0)
      *it = merged;  // its place in the list, filled in below
    else
      slots.erase(it);
  }
  *slot_named(slots, fused) = std::move(merged);
}

// q_proj holds each head's queries then its gate: (Hq, 2, hd, d) rows.
void fuse_gated_q(const ModelConfig& c, std::vector<WeightSlot>& slots, const std::string& p) {
  const int64_t Hq = c.heads, hd = c.head_dim;
  fuse_by_take(slots, {p + "self_attn.q_proj.weight", p + "self_attn.output_gate.weight"},
               p + "self_attn.q_proj.weight", 2 * Hq * hd, [Hq, hd](const torch::Tensor& w, size_t k) {
                 return w.view({Hq, 2, hd, w.size(1)})
                     .select(1, static_cast<int64_t>(k))
                     .reshape({Hq * hd, w.size(1)});
               });
}

void qwen3_5_checkpoint_names(const ModelConfig& c, std::vector<WeightSlot>& slots) {
  for (int64_t i = 0; i < c.layers; ++i)
    if (!c.is_linear_layer(i)) fuse_gated_q(c, slots, fmt::format("model.layers.{}.", i));
}

// The gated shared expert is "mlp.shared_expert.*" in both MoE families' checkpoints.
void name_shared_expert(const ModelConfig& c, std::vector<WeightSlot>& slots) {
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string shared = fmt::format("model.layers.{}.mlp.shared_experts.", i);
    for (auto& s : slots)
      if (s.name.rfind(shared, 0) == 0)
        s.name = fmt::format("model.layers.{}.mlp.shared_expert.", i) + s.name.substr(shared.size());
  }
}

void qwen3_5_moe_checkpoint_names(const ModelConfig& c, std::vector<WeightSlot>& slots) {
  qwen3_5_checkpoint_names(c, slots);
  name_shared_expert(c, slots);
}

// Qwen3-Next's fused projections, grouped by key head h (fix_query_key_value_ordering): in_proj_qkvz rows
// (Hk, [q dk, k dk, v g' dv, z g' dv]), in_proj_ba rows (Hk, [b g', a g']); the shared expert is
// "mlp.shared_expert.*".
void qwen3_next_checkpoint_names(const ModelConfig& c, std::vector<WeightSlot>& slots) {
  qwen3_5_checkpoint_names(c, slots);
  const ModelConfig::LinearAttention& la = *c.linear_attention;
  const int64_t Hk = la.key_heads, dk = la.key_dim, g = la.value_heads / la.key_heads, dv = la.value_dim;
  const int64_t group = 2 * dk + 2 * g * dv;
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string a = fmt::format("model.layers.{}.linear_attn.", i);
    if (c.is_linear_layer(i)) {
      fuse_by_take(slots, {a + "in_proj_qkv.weight", a + "in_proj_z.weight"}, a + "in_proj_qkvz.weight",
                   Hk * group, [=](const torch::Tensor& w, size_t k) {
                     const auto grouped = w.view({Hk, group, w.size(1)});
                     auto rows = [&](int64_t from, int64_t n) {
                       return grouped.narrow(1, from, n).reshape({-1, w.size(1)});
                     };
                     if (k == 1) return rows(2 * dk + g * dv, g * dv);                      // z
                     return torch::cat({rows(0, dk), rows(dk, dk), rows(2 * dk, g * dv)});  // q, k, v
                   });
      fuse_by_take(slots, {a + "in_proj_b.weight", a + "in_proj_a.weight"}, a + "in_proj_ba.weight",
                   2 * la.value_heads, [=](const torch::Tensor& w, size_t k) {
                     return w.view({Hk, 2 * g, w.size(1)})
                         .narrow(1, static_cast<int64_t>(k) * g, g)
                         .reshape({-1, w.size(1)});
                   });
    }
  }
  name_shared_expert(c, slots);
}

}  // namespace

const HfFamilyFields* qwen3_5_fields() {
  static const HfFamilyFields fields = [] {
    HfFamilyFields f;
    f.default_head_dim = 256;
    f.read = read_qwen3_5_config;
    f.write = write_qwen3_5_config;
    f.checkpoint_names = qwen3_5_checkpoint_names;
    f.reads_rope = f.reads_window = true;
    f.ignored_prefixes = {"mtp."};
    f.multimodal_class = "Qwen3_5ForConditionalGeneration";
    return f;
  }();
  return &fields;
}

const HfFamilyFields* qwen3_5_moe_fields() {
  static const HfFamilyFields fields = [] {
    HfFamilyFields f;
    f.default_head_dim = 256;
    f.default_intermediate = 512;  // unused: every layer is routed
    f.read = read_qwen3_5_moe_config;
    f.write = write_qwen3_5_moe_config;
    f.checkpoint_names = qwen3_5_moe_checkpoint_names;
    f.reads_rope = f.reads_window = true;
    f.ignored_prefixes = {"mtp."};
    f.multimodal_class = "Qwen3_5MoeForConditionalGeneration";
    return f;
  }();
  return &fields;
}

const HfFamilyFields* qwen3_next_fields() {
  static const HfFamilyFields fields = [] {
    HfFamilyFields f;
    f.default_head_dim = 256;
    f.read = read_qwen3_next_config;
    f.write = write_qwen3_next_config;
    f.checkpoint_names = qwen3_next_checkpoint_names;
    f.reads_rope = f.reads_window = true;
    f.ignored_prefixes = {"mtp."};
    return f;
  }();
  return &fields;
}

}  // namespace bpbench
