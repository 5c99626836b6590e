// hf_smollm3.cpp: SmolLM3's config.json <-> ModelConfig, following transformers 5.17's SmolLM3Config
// (model_type "smollm3"): Llama's network whose layers with "no_rope_layers"[i] = 0 apply no RoPE (NoPE;
// default: every fourth layer, by "no_rope_layer_interval"), and a sliding window on the layers "layer_types"
// marks "sliding_attention" when "use_sliding_window" is true (the published model uses none). Its
// attention_bias would bias o_proj too: refused by the shared reader. Its HfFamilyFields are named on its
// line of hf_families.def.

#include <fmt/format.h>

#include <vector>

#include "harness/model/hf_family.h"

namespace bpbench {

using nlohmann::json;

namespace {

constexpr int64_t kDefaultNoRopeInterval = 4;  // SmolLM3Config.no_rope_layer_interval

void read_no_rope_layers(const ConfigReader& r, ModelConfig& c) {
  c.rope_layers.assign(static_cast<size_t>(c.layers), true);
  if (const json* given = r.find("no_rope_layers")) {
    if (!given->is_array() || static_cast<int64_t>(given->size()) != c.layers)
      r.fail(fmt::format("\"no_rope_layers\" must list one 0 or 1 per layer ({})", c.layers));
    for (size_t i = 0; i < given->size(); ++i) {
      const json& v = (*given)[i];
      if (v != 0 && v != 1)
        r.fail(fmt::format("\"no_rope_layers\" entry {} must be 1 (RoPE) or 0 (none)", v.dump()));
      c.rope_layers[i] = v == 1;
    }
    return;
  }
  const int64_t interval = r.integer("no_rope_layer_interval", kDefaultNoRopeInterval);
  if (interval <= 0) r.fail(fmt::format("\"no_rope_layer_interval\" must be > 0, got {}", interval));
  for (int64_t i = 0; i < c.layers; ++i) c.rope_layers[static_cast<size_t>(i)] = (i + 1) % interval != 0;
}

// SmolLM3Attention: a layer slides when use_sliding_window is set and its layer type is sliding (the config
// class derives the types from the NoPE layers when the file has none).
void read_smollm3_window(const ConfigReader& r, ModelConfig& c) {
  const bool use = r.boolean("use_sliding_window", false);
  const json* window = r.find("sliding_window");
  std::vector<bool> absent(static_cast<size_t>(c.layers));
  for (int64_t i = 0; i < c.layers; ++i) absent[static_cast<size_t>(i)] = use && window && !c.has_rope(i);
  read_sliding_layer_types(r, c, absent, /*default_window=*/0, "SmolLM3");
  if (!use || !window) {  // the types alone do not slide: transformers' attention takes no window then
    c.sliding_layers.assign(static_cast<size_t>(c.layers), false);
    c.sliding_window = 0;
  }
  if (!c.has_sliding_layers()) c.sliding_layers.clear();
}

void read_smollm3_config(const ConfigReader& r, ModelConfig& c) {
  read_no_rope_layers(r, c);
  read_smollm3_window(r, c);
}

void write_smollm3_config(const ModelConfig& c, json& j) {
  write_llama_like_fields(c, "SmolLM3ForCausalLM", "smollm3", j);
  json no_rope = json::array(), layer_types = json::array();
  for (int64_t i = 0; i < c.layers; ++i) {
    no_rope.push_back(c.has_rope(i) ? 1 : 0);
    layer_types.push_back(c.window_of(i) > 0 ? "sliding_attention" : "full_attention");
  }
  j["no_rope_layers"] = no_rope;
  j["layer_types"] = layer_types;
  j["use_sliding_window"] = c.has_sliding_layers();
  // No pad token (SmolLM3Config's default 128004 freezes that embedding row, and lies past a small preset's
  // vocabulary): the network bpbench runs, as hf_olmo.cpp writes it.
  j["pad_token_id"] = nullptr;
}

}  // namespace

const HfFamilyFields* smollm3_fields() {
  static const HfFamilyFields fields = [] {
    HfFamilyFields f;
    f.default_tied = true;
    f.read = read_smollm3_config;
    f.write = write_smollm3_config;
    f.reads_window = true;
    return f;
  }();
  return &fields;
}

}  // namespace bpbench
