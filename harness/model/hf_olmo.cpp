// hf_olmo.cpp: OLMo 2's and OLMo 3's config.json <-> ModelConfig, following transformers 5.17's Olmo2Config
// and Olmo3Config (model_types "olmo2", "olmo3"): no norm before the attention or the MLP, a norm on each
// block's output (post_attention_layernorm, post_feedforward_layernorm), q_norm and k_norm over the whole q
// and k projections (Hq*hd and Hkv*hd wide, before the heads are split), every norm scaled by its weight in
// float32 before the one cast (Olmo2RMSNorm). OLMo 3 adds sliding windows by "layer_types" (default: three
// sliding layers in four) and a RoPE per layer type. Their attention_bias would bias o_proj too: refused by
// the shared reader. Their HfFamilyFields are named on their lines of hf_families.def.

#include <vector>

#include "harness/model/hf_family.h"

namespace bpbench {

using nlohmann::json;

namespace {

constexpr int64_t kOlmo3DefaultWindow = 4096;        // Olmo3Config.sliding_window
constexpr int64_t kOlmo3DefaultMaxPositions = 2048;  // Olmo3Config.max_position_embeddings
constexpr double kOlmo3DefaultTheta = 500000.0;      // Olmo3Config.default_theta

void set_olmo_norms(ModelConfig& c) {
  c.qk_norm = true;
  c.qk_norm_whole = true;
  c.norms_scale_before_cast = true;
  c.block_input_norms = false;
  c.sandwich_norms = true;
}

void read_olmo2_config(const ConfigReader& r, ModelConfig& c) {
  (void)r;
  set_olmo_norms(c);
}

// Olmo3Config.convert_rope_params_to_dict: a legacy top-level "rope_theta" reaches the full layers only; the
// sliding layers keep 500k (transformers 5.17 pops the key while filling the full layers' entry), unless
// "rope_parameters" names their theta. bpbench reads what transformers builds.
void read_olmo3_config(const ConfigReader& r, ModelConfig& c) {
  set_olmo_norms(c);
  std::vector<bool> absent(static_cast<size_t>(c.layers));
  for (int64_t i = 0; i < c.layers; ++i) absent[static_cast<size_t>(i)] = (i + 1) % 4 != 0;
  read_sliding_layer_types(r, c, absent, kOlmo3DefaultWindow, "OLMo 3");
  read_rope_by_layer_type(r, c, r.number("rope_theta", kOlmo3DefaultTheta), kOlmo3DefaultTheta,
                          kOlmo3DefaultMaxPositions, "OLMo 3");
}

// No pad token: transformers would freeze its embedding row (nn.Embedding's padding_idx, Olmo2Config's
// default 1), which bpbench's embedding does not (docs/models.md); null builds the network bpbench runs.
void write_olmo2_config(const ModelConfig& c, json& j) {
  write_llama_like_fields(c, "Olmo2ForCausalLM", "olmo2", j);
  j.erase("sliding_window");
  j["pad_token_id"] = nullptr;
}

void write_olmo3_config(const ModelConfig& c, json& j) {
  j["architectures"] = {"Olmo3ForCausalLM"};
  j["model_type"] = "olmo3";
  j["hidden_act"] = "silu";
  write_layer_types_and_rope(c, j);
  j["pad_token_id"] = nullptr;
}

HfFamilyFields olmo_fields(void (*read)(const ConfigReader&, ModelConfig&),
                           void (*write)(const ModelConfig&, json&)) {
  HfFamilyFields f;
  f.default_rms_eps = 1e-5;  // Olmo2Config, Olmo3Config
  f.read = read;
  f.write = write;
  return f;
}

}  // namespace

const HfFamilyFields* olmo2_fields() {
  static const HfFamilyFields fields = olmo_fields(read_olmo2_config, write_olmo2_config);
  return &fields;
}

const HfFamilyFields* olmo3_fields() {
  static const HfFamilyFields fields = [] {
    HfFamilyFields f = olmo_fields(read_olmo3_config, write_olmo3_config);
    f.reads_rope = f.reads_window = true;
    return f;
  }();
  return &fields;
}

}  // namespace bpbench
