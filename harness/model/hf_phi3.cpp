// hf_phi3.cpp: Phi-3's config.json <-> ModelConfig and checkpoint names, following transformers 5.17's
// Phi3Config and Phi3ForCausalLM (model_type "phi3"): Llama's network whose checkpoint fuses q, k, v into
// self_attn.qkv_proj ([Hq hd + 2 Hkv hd, d], rows in that order) and gate, up into mlp.gate_up_proj ([2 I,
// d], gate first); split at load into bpbench's parameters, each in storage of its own. A sliding window on
// every layer when "sliding_window" is set (Phi-3-mini-4k: 2047); longrope (Phi-3-mini-128k) as
// rope_config.h reads it. Refused by name: dropout (resid_pdrop, embd_pdrop), partial rotary embeddings
// (Phi-4-mini; rope_config.cpp), and a RoPE typed "su" or "yarn", which transformers' Phi-3 runs as longrope
// (bpbench asks for the name it runs: "longrope").

#include <fmt/format.h>

#include <string>
#include <vector>

#include "harness/model/hf_family.h"

namespace bpbench {

namespace {

void read_phi3_config(const ConfigReader& r, ModelConfig& c) {
  for (const char* dropout : {"resid_pdrop", "embd_pdrop"})
    if (const double p = r.number(dropout, 0.0); p != 0.0)
      r.fail(fmt::format("\"{}\" {} is not supported (only 0: bpbench has no dropout)", dropout, p));
  // Phi3Config.convert_rope_params_to_dict renames "su" and "yarn" to longrope; the shared reader (after
  // this) would take them at their word, so they are refused here by what transformers makes of them.
  for (const char* key : {"rope_scaling", "rope_parameters"})
    if (const nlohmann::json* rope = r.find(key); rope && rope->is_object())
      for (const char* type_key : {"rope_type", "type"})
        if (rope->contains(type_key) && ((*rope)[type_key] == "su" || (*rope)[type_key] == "yarn"))
          r.fail(
              fmt::format("\"{}\" type {}: transformers' Phi-3 runs it as longrope (valid: write "
                          "\"longrope\", the type it "
                          "runs, or default RoPE)",
                          key, (*rope)[type_key].dump()));
  read_window_on_every_layer(r, c, /*absent=*/0);  // Phi3Config.sliding_window: None
}

void write_phi3_config(const ModelConfig& c, nlohmann::json& j) {
  write_llama_like_fields(c, "Phi3ForCausalLM", "phi3", j);
  j["original_max_position_embeddings"] = c.rope.max_positions;  // what longrope would scale from
}

void fuse_phi3_projections(const ModelConfig& c, std::vector<WeightSlot>& slots) {
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    fuse_weight_slots(slots, p + "self_attn.", {"q_proj.weight", "k_proj.weight", "v_proj.weight"},
                      "qkv_proj.weight");
    fuse_weight_slots(slots, p + "mlp.", {"gate_proj.weight", "up_proj.weight"}, "gate_up_proj.weight");
  }
}

}  // namespace

const HfFamilyFields* phi3_fields() {
  static const HfFamilyFields fields = [] {
    HfFamilyFields f;
    f.read = read_phi3_config;
    f.write = write_phi3_config;
    f.checkpoint_names = fuse_phi3_projections;
    f.reads_window = true;
    return f;
  }();
  return &fields;
}

}  // namespace bpbench
