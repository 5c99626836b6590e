// hf_family.h: what a model family with config.json fields of its own adds to the fields every family shares
// (read and written by hf_model.cpp). A family's file defines one function returning its HfFamilyFields,
// named on its line of hf_families.def (Gemma 3: hf_gemma3.cpp). Internal to harness/model.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "harness/model/hf_config_reader.h"
#include "harness/model/model_config.h"

namespace bpbench {

struct HfFamilyFields {
  int64_t default_head_dim = 0;  // when config.json has no head_dim; 0: hidden / heads
  bool default_tied = false;     // transformers' tie_word_embeddings default for the family
  // Reads what the family adds (its layer types, RoPE, norms and activation) into c, after the shared
  // fields; refuses by name what bpbench does not model.
  void (*read)(const ConfigReader& r, ModelConfig& c) = nullptr;
  // Writes the family's own fields of c ("architectures" and "model_type" included) into j, which holds the
  // shared ones: the config.json transformers writes; read then gives c back.
  void (*write)(const ModelConfig& c, nlohmann::json& j) = nullptr;
  // Whether c (a preset) is of this family: hf_config_json writes it through `write`.
  bool (*describes)(const ModelConfig& c) = nullptr;
};

}  // namespace bpbench
