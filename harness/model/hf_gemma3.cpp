// hf_gemma3.cpp: Gemma 3's config.json <-> ModelConfig, following transformers 5.17's Gemma3TextConfig
// (model_type "gemma3_text"): everything it adds to the fields every family shares (hf_model.cpp), as its
// HfFamilyFields, named on its line of hf_families.def.

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "harness/model/hf_family.h"
#include "harness/model/rope_config.h"

namespace bpbench {

using nlohmann::json;

namespace {

// Gemma3TextConfig's defaults for what a config.json may leave out.
constexpr int64_t kDefaultSlidingWindow = 4096;
constexpr int64_t kDefaultPattern = 6;  // the Hub's legacy "sliding_window_pattern": every sixth layer global
constexpr int64_t kDefaultMaxPositions = 131072;
constexpr double kDefaultGlobalTheta = 1e6, kDefaultLocalTheta = 1e4, kDefaultQueryScalar = 256.0;

constexpr const char* kSliding = "sliding_attention";
constexpr const char* kFull = "full_attention";

void read_layer_types(const ConfigReader& r, ModelConfig& c) {
  c.sliding_layers.assign(static_cast<size_t>(c.layers), false);
  if (const json* types = r.find("layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c.layers)
      r.fail(fmt::format("\"layer_types\" must list one type per layer ({})", c.layers));
    for (size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      if (t != kSliding && t != kFull)
        r.fail(fmt::format("\"layer_types\" entry {} is not a Gemma 3 layer type (valid: {}, {})", t.dump(),
                           kSliding, kFull));
      c.sliding_layers[i] = t == kSliding;
    }
  } else {
    const int64_t pattern = r.integer("sliding_window_pattern", kDefaultPattern);
    if (pattern <= 0) r.fail(fmt::format("\"sliding_window_pattern\" must be > 0, got {}", pattern));
    for (int64_t i = 0; i < c.layers; ++i) c.sliding_layers[static_cast<size_t>(i)] = (i + 1) % pattern != 0;
  }
  c.sliding_window = r.integer("sliding_window", kDefaultSlidingWindow);
  if (c.has_sliding_layers() && c.sliding_window <= 0)
    r.fail(fmt::format("\"sliding_window\" must be > 0, got {}", c.sliding_window));
}

// Gemma3TextConfig.convert_rope_params_to_dict: per layer type, rope_parameters' entry (default rope
// otherwise); a legacy "rope_scaling" updates the full layers' entry; the thetas default to "rope_theta"
// (full) and "rope_local_base_freq" (sliding), else 1M and 10k.
void read_rope(const ConfigReader& r, ModelConfig& c) {
  json params = {{kSliding, {{"rope_type", "default"}}}, {kFull, {{"rope_type", "default"}}}};
  if (const json* given = r.find("rope_parameters")) {
    if (!given->is_object()) r.fail("\"rope_parameters\" must be an object");
    for (const auto& [key, value] : given->items()) {
      if (key != kSliding && key != kFull)
        r.fail(fmt::format("\"rope_parameters\" of gemma3_text is keyed by layer type ({}, {}), got \"{}\"",
                           kSliding, kFull, key));
      if (value.is_null()) continue;
      if (!value.is_object()) r.fail(fmt::format("\"rope_parameters\".{} must be an object", key));
      params[key] = value;
    }
  }
  if (const json* scaling = r.find("rope_scaling")) {
    if (!scaling->is_object()) r.fail("\"rope_scaling\" must be an object");
    if (scaling->contains("type") && !scaling->contains("rope_type"))
      r.fail(
          "\"rope_scaling\" names its type as \"type\", which transformers 5 ignores for Gemma 3 (the "
          "full layers keep default RoPE); write \"rope_type\"");
    params[kFull].update(*scaling);
  }
  if (!params[kFull].contains("rope_theta"))
    params[kFull]["rope_theta"] = r.number("rope_theta", kDefaultGlobalTheta);
  if (!params[kSliding].contains("rope_theta"))
    params[kSliding]["rope_theta"] = r.number("rope_local_base_freq", kDefaultLocalTheta);

  RopeConfig base;
  base.max_positions = r.integer("max_position_embeddings", kDefaultMaxPositions);
  auto parse = [&](const char* type) {
    RopeConfig rope;
    try {
      rope = rope_with_parameters(base, params[type]);
    } catch (const std::invalid_argument& e) {
      r.fail(fmt::format("rope of the {} layers: {}", type, e.what()));
    }
    // transformers grows dynamic frequencies per module; with two RoPE modules that state is not modelled.
    if (rope.type == RopeType::kDynamic)
      r.fail(
          fmt::format("rope of the {} layers: 'dynamic' is not supported for Gemma 3 (valid: default, "
                      "linear, yarn, llama3, longrope)",
                      type));
    return rope;
  };
  c.rope = parse(kFull);
  c.sliding_rope = parse(kSliding);
}

// Layer types and the window, the RoPE of each layer type, query_pre_attn_scalar, the norms, activation and
// embedding scale. Refuses by name what bpbench does not model (soft-capping, bidirectional attention,
// another activation, dynamic RoPE, a "rope_scaling" written with "type", which transformers 5 ignores for
// Gemma 3).
void read_gemma3_config(const ConfigReader& r, ModelConfig& c) {
  if (r.boolean("use_bidirectional_attention", false))
    r.fail("\"use_bidirectional_attention\" true is not supported (bpbench trains causal language models)");
  for (const char* cap : {"final_logit_softcapping", "attn_logit_softcapping"})
    if (const json* v = r.find(cap))
      r.fail(
          fmt::format("\"{}\" {} is not supported (bpbench models no soft-capping; the published Gemma 3 "
                      "configs leave it null)",
                      cap, v->dump()));
  const std::string act = r.string("hidden_activation");
  if (!act.empty() && act != activation_name(Activation::gelu_tanh))
    r.fail(fmt::format("\"hidden_activation\" '{}' is not supported (only {})", act,
                       activation_name(Activation::gelu_tanh)));
  read_layer_types(r, c);
  read_rope(r, c);
  c.query_pre_attn_scalar = r.number("query_pre_attn_scalar", kDefaultQueryScalar);
  if (!(c.query_pre_attn_scalar > 0))
    r.fail(fmt::format("\"query_pre_attn_scalar\" must be > 0, got {}", c.query_pre_attn_scalar));
  c.qk_norm = true;
  c.unit_offset_norms = true;
  c.sandwich_norms = true;
  c.activation = Activation::gelu_tanh;
  c.scale_embeddings = true;
}

// Gemma 3's own fields of c (sandwich_norms set) into j: the config.json transformers 5 writes.
void add_gemma3_config_json(const ModelConfig& c, json& j) {
  json layer_types = json::array();
  for (int64_t i = 0; i < c.layers; ++i) layer_types.push_back(c.window_of(i) > 0 ? kSliding : kFull);
  const double query_scalar =
      c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : static_cast<double>(c.head_dim);
  auto rope = [&](const RopeConfig& r) {
    json out = rope_to_json(r);
    out.erase("max_position_embeddings");  // top-level in config.json
    return out;
  };
  j["architectures"] = {"Gemma3ForCausalLM"};
  j["model_type"] = "gemma3_text";
  j["hidden_activation"] = activation_name(c.activation);
  // transformers' Gemma3TextConfig types it int (a float fails its strict validation).
  j["query_pre_attn_scalar"] = query_scalar == std::floor(query_scalar)
                                   ? json(static_cast<int64_t>(query_scalar))
                                   : json(query_scalar);
  j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json();
  j["layer_types"] = layer_types;
  j["rope_parameters"] = {{kSliding, rope(c.sliding_rope.value_or(c.rope))}, {kFull, rope(c.rope)}};
  j["final_logit_softcapping"] = nullptr;
  j["attn_logit_softcapping"] = nullptr;
}

}  // namespace

const HfFamilyFields* gemma3_fields() {
  static const HfFamilyFields fields = [] {
    HfFamilyFields f;
    f.default_head_dim = 256;
    f.default_tied = true;
    f.read = read_gemma3_config;
    f.write = add_gemma3_config_json;
    f.describes = [](const ModelConfig& c) { return c.sandwich_norms; };
    f.reads_rope = f.reads_window = f.reads_activation = true;
    return f;
  }();
  return &fields;
}

}  // namespace bpbench
