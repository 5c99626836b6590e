// hf_gemma3.h: Gemma 3's config.json (transformers 5's Gemma3TextConfig, model_type "gemma3_text") read into
// and written from a ModelConfig. Internal to harness/model (hf_model.cpp dispatches here).
#pragma once

#include <nlohmann/json.hpp>

#include "harness/model/hf_config_reader.h"
#include "harness/model/model_config.h"

namespace bpbench {

// Everything Gemma 3 adds to the fields every family shares (read by hf_model.cpp first): layer types and the
// window, the RoPE of each layer type, query_pre_attn_scalar, the norms, activation and embedding scale.
// Refuses by name what bpbench does not model (soft-capping, bidirectional attention, another activation,
// dynamic RoPE, a "rope_scaling" written with "type", which transformers 5 ignores for Gemma 3).
void read_gemma3_config(const ConfigReader& r, ModelConfig& c);

// Gemma 3's own fields of `c` (sandwich_norms set) into `j`, which holds those every family shares
// (hf_config_json): the config.json transformers 5 writes; read_hf_config gives `c` back.
void add_gemma3_config_json(const ModelConfig& c, nlohmann::json& j);

}  // namespace bpbench
