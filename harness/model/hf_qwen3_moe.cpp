// hf_qwen3_moe.cpp: Qwen3-MoE's config.json <-> ModelConfig, following transformers 5.17's Qwen3MoeConfig and
// Qwen3MoeForCausalLM (model_type "qwen3_moe"): Qwen3's attention (q/k norm) with a mixture of experts in
// every decoder_sparse_step-th layer not listed in mlp_only_layers (those keep a dense MLP of
// intermediate_size): a router "mlp.gate" (E, d) and experts "mlp.experts.<e>.{gate,up,down}_proj" of
// moe_intermediate_size, the checkpoint names bpbench's parameters carry. Its HfFamilyFields are named on
// its line of hf_families.def.

#include <fmt/format.h>

#include "harness/model/hf_family.h"
#include "harness/model/hf_moe_fields.h"

namespace bpbench {

namespace {

void read_qwen3_moe_config(const ConfigReader& r, ModelConfig& c) {
  refuse_foreign_moe_fields(r);
  read_experts(r, c, /*default_experts=*/128, /*default_k=*/8);
  c.expert_intermediate = r.integer("moe_intermediate_size", 768);
  c.norm_topk_prob = r.boolean("norm_topk_prob", false);
  c.sparse_step = r.integer("decoder_sparse_step", 1);
  if (c.sparse_step < 1) r.fail(fmt::format("\"decoder_sparse_step\" must be >= 1, got {}", c.sparse_step));
  c.dense_layers.clear();
  if (const nlohmann::json* dense = r.find("mlp_only_layers")) {
    if (!dense->is_array()) r.fail("\"mlp_only_layers\" must be a list of layer indices");
    for (const auto& layer : *dense) {
      if (!layer.is_number_integer() || layer.get<int64_t>() < 0 || layer.get<int64_t>() >= c.layers)
        r.fail(fmt::format("\"mlp_only_layers\" entry {} is not a layer index (0 .. {})", layer.dump(),
                           c.layers - 1));
      c.dense_layers.push_back(layer.get<int64_t>());
    }
  }
}

void write_qwen3_moe_config(const ModelConfig& c, nlohmann::json& j) {
  write_llama_like_fields(c, "Qwen3MoeForCausalLM", "qwen3_moe", j);
  j.erase("sliding_window");
  j["num_experts"] = c.experts;
  j["num_experts_per_tok"] = c.experts_per_token;
  j["moe_intermediate_size"] = c.expert_intermediate;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["decoder_sparse_step"] = c.sparse_step;
  j["mlp_only_layers"] = c.dense_layers;
}

}  // namespace

const HfFamilyFields* qwen3_moe_fields() {
  static const HfFamilyFields fields = [] {  // Qwen's window and activation: the shared reader's
    HfFamilyFields f;
    f.read = read_qwen3_moe_config;
    f.write = write_qwen3_moe_config;
    return f;
  }();
  return &fields;
}

}  // namespace bpbench
