// hf_mixtral.cpp: Mixtral's config.json <-> ModelConfig and checkpoint names, following transformers 5.17's
// MixtralConfig and MixtralForCausalLM (model_type "mixtral"): Llama's attention with a mixture of experts in
// every layer, each of intermediate_size, the k weights always renormalised; a sliding window on every layer
// when "sliding_window" is set (Mixtral-8x7B: null). The checkpoint names its router
// "block_sparse_moe.gate" and its experts' gate, down, up "block_sparse_moe.experts.<e>.w1, w2, w3".

#include <string>
#include <vector>

#include "harness/model/hf_family.h"
#include "harness/model/hf_moe_fields.h"

namespace bpbench {

namespace {

void read_mixtral_config(const ConfigReader& r, ModelConfig& c) {
  refuse_foreign_moe_fields(r);
  read_experts(r, c, /*default_experts=*/8, /*default_k=*/2);
  c.expert_intermediate = c.intermediate;
  c.norm_topk_prob = true;
  read_window_on_every_layer(r, c, /*absent=*/0);
}

void write_mixtral_config(const ModelConfig& c, nlohmann::json& j) {
  write_llama_like_fields(c, "MixtralForCausalLM", "mixtral", j);
  j["intermediate_size"] = c.expert_intermediate;
  j["num_local_experts"] = c.experts;
  j["num_experts_per_tok"] = c.experts_per_token;
}

// bpbench's (Qwen3-MoE's) names -> Mixtral's.
void rename_mixtral_weights(const ModelConfig& /*c*/, std::vector<WeightSlot>& slots) {
  const std::vector<std::pair<std::string, std::string>> renames = {
      {".mlp.gate.weight", ".block_sparse_moe.gate.weight"},
      {".gate_proj.weight", ".w1.weight"},
      {".down_proj.weight", ".w2.weight"},
      {".up_proj.weight", ".w3.weight"}};
  for (WeightSlot& s : slots) {
    if (s.name.find(".mlp.") == std::string::npos) continue;
    if (s.name.find(".mlp.experts.") != std::string::npos)
      s.name.replace(s.name.find(".mlp."), 5, ".block_sparse_moe.");
    for (const auto& [from, to] : renames) {
      const auto at = s.name.rfind(from);
      if (at != std::string::npos && at + from.size() == s.name.size()) {
        s.name.replace(at, from.size(), to);
        break;
      }
    }
  }
}

}  // namespace

const HfFamilyFields* mixtral_fields() {
  static const HfFamilyFields fields = [] {
    HfFamilyFields f;
    f.read = read_mixtral_config;
    f.write = write_mixtral_config;
    f.checkpoint_names = rename_mixtral_weights;
    f.reads_window = true;
    return f;
  }();
  return &fields;
}

}  // namespace bpbench
