// hf_family_helpers.cpp: the config.json readers and checkpoint-name rewrites that several families' files
// share (declared in hf_family.h): fused checkpoint tensors, a window on every layer, partial RoPE, and the
// fields of a family with Llama's network.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/model/hf_family.h"
#include "harness/model/rope_config.h"

namespace bpbench {

using nlohmann::json;

void fuse_weight_slots(std::vector<WeightSlot>& slots, const std::string& prefix,
                       const std::vector<std::string>& pieces, const std::string& fused) {
  auto first = std::find_if(slots.begin(), slots.end(),
                            [&](const WeightSlot& s) { return s.name == prefix + pieces.front(); });
  if (first == slots.end() || slots.end() - first < static_cast<std::ptrdiff_t>(pieces.size()))
    throw std::logic_error(fmt::format("fuse_weight_slots: no slot {}{}", prefix, pieces.front()));
  WeightSlot merged{prefix + fused, {0, first->shape.at(1)}, {}};
  for (size_t i = 0; i < pieces.size(); ++i) {
    const WeightSlot& piece = first[static_cast<std::ptrdiff_t>(i)];
    if (piece.name != prefix + pieces[i] || piece.shape.size() != 2 || piece.shape[1] != merged.shape[1])
      throw std::logic_error(fmt::format("fuse_weight_slots: {}{} is not next", prefix, pieces[i]));
    merged.shape[0] += piece.shape[0];
    merged.parts.insert(merged.parts.end(), piece.parts.begin(), piece.parts.end());
  }
  *first = std::move(merged);
  slots.erase(first + 1, first + static_cast<std::ptrdiff_t>(pieces.size()));
}

void read_window_on_every_layer(const ConfigReader& r, ModelConfig& c, int64_t absent) {
  if (r.find("layer_types"))
    r.fail(
        "\"layer_types\" is not supported for this architecture (alternating sliding and full layers are "
        "other classes', e.g. Gemma3ForCausalLM)");
  const bool given = r.json().contains("sliding_window");
  const int64_t window = given ? r.integer("sliding_window", 0) : absent;
  if (given && r.find("sliding_window") && window <= 0)
    r.fail(fmt::format("\"sliding_window\" must be > 0 or null, got {}", window));
  c.sliding_window = window;
  c.sliding_layers.assign(window > 0 ? static_cast<size_t>(c.layers) : 0, true);
}

void read_partial_rotary_rope(const ConfigReader& r, ModelConfig& c, double default_factor,
                              int64_t default_max_positions, std::initializer_list<const char*> ignored) {
  json j = r.json();
  double partial = default_factor;
  json* nested =
      j.contains("rope_parameters") && j["rope_parameters"].is_object() ? &j["rope_parameters"] : nullptr;
  for (json* where : {&j, nested}) {
    if (!where || !where->contains("partial_rotary_factor")) continue;
    if (!(*where)["partial_rotary_factor"].is_number())
      r.fail("\"partial_rotary_factor\" must be a number in (0, 1]");
    partial = (*where)["partial_rotary_factor"].get<double>();
    where->erase("partial_rotary_factor");
  }
  if (nested)
    for (const char* key : ignored) nested->erase(key);
  // transformers spaces the frequencies over int(head_dim x factor) dims and rotates the even number its
  // tables span, one more where that is odd (RopeConfig::frequency_dims).
  const auto spaced = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial);
  const int64_t rotated = spaced + spaced % 2;
  if (!(partial > 0 && partial <= 1) || spaced < 1 || rotated > c.head_dim)
    r.fail(fmt::format("\"partial_rotary_factor\" {} must rotate between 1 and the {} dims of a head",
                       partial, c.head_dim));
  c.rotary_dim = rotated < c.head_dim ? rotated : 0;
  try {
    c.rope = rope_from_hf_config(j, default_max_positions);
  } catch (const std::invalid_argument& e) {
    r.fail(e.what());
  }
  if (spaced != rotated) {
    if (c.rope.type != RopeType::kDefault && c.rope.type != RopeType::kLinear)
      r.fail(
          fmt::format("\"partial_rotary_factor\" {} spaces {} RoPE over an odd {} dims (valid with it: "
                      "default, linear)",
                      partial, rope_type_name(c.rope.type), spaced));
    c.rope.frequency_dims = spaced;
  }
}

void write_llama_like_fields(const ModelConfig& c, const char* architecture, const char* model_type,
                             json& j) {
  j["architectures"] = {architecture};
  j["model_type"] = model_type;
  j["hidden_act"] = "silu";
  j["rope_parameters"] = rope_to_json(c.rope);
  j["rope_parameters"].erase("max_position_embeddings");  // top-level in config.json
  j["sliding_window"] = c.has_sliding_layers() ? json(c.sliding_window) : json();
}

}  // namespace bpbench
