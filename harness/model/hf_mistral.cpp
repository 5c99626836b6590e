// hf_mistral.cpp: Mistral's config.json <-> ModelConfig, following transformers 5.17's MistralConfig
// (model_type "mistral"): Llama's network with a sliding window on every layer when "sliding_window" is set
// (Mistral-7B-v0.1: 4096; v0.2 on: null, none). A file without the key has MistralConfig's default, 4096.
// Its HfFamilyFields are named on its line of hf_families.def.

#include "harness/model/hf_family.h"

namespace bpbench {

namespace {

constexpr int64_t kMistralDefaultWindow = 4096;  // MistralConfig.sliding_window

void read_mistral_config(const ConfigReader& r, ModelConfig& c) {
  read_window_on_every_layer(r, c, kMistralDefaultWindow);
}

void write_mistral_config(const ModelConfig& c, nlohmann::json& j) {
  write_llama_like_fields(c, "MistralForCausalLM", "mistral", j);
}

}  // namespace

const HfFamilyFields* mistral_fields() {
  static const HfFamilyFields fields = [] {
    HfFamilyFields f;
    f.read = read_mistral_config;
    f.write = write_mistral_config;
    f.reads_window = true;
    return f;
  }();
  return &fields;
}

}  // namespace bpbench
