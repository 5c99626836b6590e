// hf_gemma3.cpp: Gemma 3's config.json <-> ModelConfig, following transformers 5.17's Gemma3TextConfig
// (model_type "gemma3_text"): everything it adds to the fields every family shares (hf_model.cpp), as its
// HfFamilyFields, named on its line of hf_families.def.

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

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

// Layers from the Hub's legacy "sliding_window_pattern" where there are no "layer_types".
void read_layer_types(const ConfigReader& r, ModelConfig& c) {
  const int64_t pattern = r.integer("sliding_window_pattern", kDefaultPattern);
  if (!r.find("layer_types") && pattern <= 0)
    r.fail(fmt::format("\"sliding_window_pattern\" must be > 0, got {}", pattern));
  std::vector<bool> absent(static_cast<size_t>(c.layers));
  for (int64_t i = 0; i < c.layers; ++i)
    absent[static_cast<size_t>(i)] = pattern > 0 && (i + 1) % pattern != 0;
  read_sliding_layer_types(r, c, absent, kDefaultSlidingWindow, "Gemma 3");
}

// Gemma3TextConfig.convert_rope_params_to_dict: the thetas default to "rope_theta" (full) and
// "rope_local_base_freq" (sliding), else 1M and 10k.
void read_rope(const ConfigReader& r, ModelConfig& c) {
  read_rope_by_layer_type(r, c, r.number("rope_theta", kDefaultGlobalTheta),
                          r.number("rope_local_base_freq", kDefaultLocalTheta), kDefaultMaxPositions,
                          "Gemma 3");
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
  const double query_scalar =
      c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : static_cast<double>(c.head_dim);
  j["architectures"] = {"Gemma3ForCausalLM"};
  j["model_type"] = "gemma3_text";
  j["hidden_activation"] = activation_name(c.activation);
  // transformers' Gemma3TextConfig types it int (a float fails its strict validation).
  j["query_pre_attn_scalar"] = query_scalar == std::floor(query_scalar)
                                   ? json(static_cast<int64_t>(query_scalar))
                                   : json(query_scalar);
  write_layer_types_and_rope(c, j);
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
    f.describes = [](const ModelConfig& c) { return c.sandwich_norms && c.block_input_norms; };
    f.reads_rope = f.reads_window = f.reads_activation = true;
    return f;
  }();
  return &fields;
}

}  // namespace bpbench
