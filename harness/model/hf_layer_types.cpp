// hf_layer_types.cpp: the config.json fields of the families whose layers alternate sliding and full
// attention, each type with a RoPE of its own (Gemma 3, OLMo 3): "layer_types" and "rope_parameters" keyed
// by layer type, read and written the way transformers 5.17's Gemma3TextConfig and Olmo3Config do. Declared
// in hf_family.h.

#include <fmt/format.h>

#include <string>

#include "harness/model/hf_family.h"
#include "harness/model/rope_config.h"

namespace bpbench {

using nlohmann::json;

namespace {
constexpr const char* kSliding = "sliding_attention";
constexpr const char* kFull = "full_attention";
}  // namespace

void read_sliding_layer_types(const ConfigReader& r, ModelConfig& c, const std::vector<bool>& absent,
                              int64_t default_window, const char* family) {
  c.sliding_layers = absent;
  if (const json* types = r.find("layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c.layers)
      r.fail(fmt::format("\"layer_types\" must list one type per layer ({})", c.layers));
    for (size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      if (t != kSliding && t != kFull)
        r.fail(fmt::format("\"layer_types\" entry {} is not one of {}'s layer types (valid: {}, {})",
                           t.dump(), family, kSliding, kFull));
      c.sliding_layers[i] = t == kSliding;
    }
  }
  c.sliding_window = r.integer("sliding_window", default_window);
  if (c.has_sliding_layers() && c.sliding_window <= 0)
    r.fail(fmt::format("\"sliding_window\" must be > 0, got {}", c.sliding_window));
}

void read_rope_by_layer_type(const ConfigReader& r, ModelConfig& c, double full_theta, double sliding_theta,
                             int64_t default_max_positions, const char* family) {
  json params = {{kSliding, {{"rope_type", "default"}}}, {kFull, {{"rope_type", "default"}}}};
  if (const json* given = r.find("rope_parameters")) {
    if (!given->is_object()) r.fail("\"rope_parameters\" must be an object");
    for (const auto& [key, value] : given->items()) {
      if (key != kSliding && key != kFull)
        r.fail(fmt::format("\"rope_parameters\" of {} is keyed by layer type ({}, {}), got \"{}\"", family,
                           kSliding, kFull, key));
      if (value.is_null()) continue;
      if (!value.is_object()) r.fail(fmt::format("\"rope_parameters\".{} must be an object", key));
      params[key] = value;
    }
  }
  if (const json* scaling = r.find("rope_scaling")) {
    if (!scaling->is_object()) r.fail("\"rope_scaling\" must be an object");
    if (scaling->contains("type") && !scaling->contains("rope_type"))
      r.fail(fmt::format(
          "\"rope_scaling\" names its type as \"type\", which transformers 5 ignores for {} (the full "
          "layers keep default RoPE); write \"rope_type\"",
          family));
    params[kFull].update(*scaling);
  }
  if (!params[kFull].contains("rope_theta")) params[kFull]["rope_theta"] = full_theta;
  if (!params[kSliding].contains("rope_theta")) params[kSliding]["rope_theta"] = sliding_theta;

  RopeConfig base;
  base.max_positions = r.integer("max_position_embeddings", default_max_positions);
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
          fmt::format("rope of the {} layers: 'dynamic' is not supported for {} (valid: default, linear, "
                      "yarn, llama3, longrope)",
                      type, family));
    return rope;
  };
  c.rope = parse(kFull);
  c.sliding_rope = parse(kSliding);
}

void write_layer_types_and_rope(const ModelConfig& c, json& j) {
  json layer_types = json::array();
  for (int64_t i = 0; i < c.layers; ++i) layer_types.push_back(c.window_of(i) > 0 ? kSliding : kFull);
  auto rope = [&](const RopeConfig& r) {
    json out = rope_to_json(r);
    out.erase("max_position_embeddings");  // top-level in config.json
    return out;
  };
  j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json();
  j["layer_types"] = layer_types;
  j["rope_parameters"] = {{kSliding, rope(c.sliding_rope.value_or(c.rope))}, {kFull, rope(c.rope)}};
}

}  // namespace bpbench
