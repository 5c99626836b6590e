// hf_moe_fields.h: the config.json reading the mixture-of-experts families share (hf_qwen3_moe.cpp,
// hf_mixtral.cpp). Internal to harness/model.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>

#include "harness/model/hf_config_reader.h"
#include "harness/model/model_config.h"

namespace bpbench {

// Refuses by name what bpbench's experts do not model (it never approximates them): router noise and the
// fields of other MoE designs (shared experts, a router bias, another scoring or top-k method); and
// output_router_logits, which turns the load-balancing loss on in the model's config, where bpbench turns it
// on in the scenario (router_aux_loss_coef, harness/model/router_balance.h), so that the same directory
// runs with it and without.
inline void refuse_foreign_moe_fields(const ConfigReader& r) {
  if (r.boolean("output_router_logits", false))
    r.fail(
        "\"output_router_logits\" true adds the load-balancing loss to the training loss, which bpbench "
        "turns on in the scenario instead (\"router_aux_loss_coef\": the weight; valid here: false, "
        "transformers' default)");
  if (const double noise = r.number("router_jitter_noise", 0.0); noise != 0.0)
    r.fail(fmt::format(
        "\"router_jitter_noise\" {} is not supported (only 0: bpbench's routing is deterministic)", noise));
  for (const char* key : {"shared_expert_intermediate_size", "n_shared_experts", "num_shared_experts",
                          "moe_shared_expert_intermediate_size", "router_bias", "moe_router_bias",
                          "e_score_correction_bias", "topk_method", "scoring_func", "n_group", "topk_group"})
    if (const nlohmann::json* v = r.find(key); v && !(v->is_number() && v->get<double>() == 0))
      r.fail(
          fmt::format("\"{}\" {} is not supported (bpbench's experts: a softmax top-k router without bias "
                      "over E SwiGLU experts, no shared expert)",
                      key, v->dump()));
}

// E and k: "num_experts" (or transformers 5's "num_local_experts") with the class's default; k within E.
inline void read_experts(const ConfigReader& r, ModelConfig& c, int64_t default_experts, int64_t default_k) {
  c.experts =
      r.find("num_experts") ? r.integer("num_experts") : r.integer("num_local_experts", default_experts);
  c.experts_per_token = r.integer("num_experts_per_tok", default_k);
  if (c.experts < 1 || c.experts_per_token < 1 || c.experts_per_token > c.experts)
    r.fail(fmt::format("\"num_experts_per_tok\" {} must be between 1 and the {} experts", c.experts_per_token,
                       c.experts));
}

}  // namespace bpbench
