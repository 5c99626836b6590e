// model_parameters.cpp: Model's parameter lists: every Linear and every other tensor of a layer, the named
// parameters under Hugging Face's names (the order the loader, the optimizer and the gradient report share),
// the buffers, which of them train, and whether a layer's input gradient is wanted.
#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "harness/model/model.h"

namespace bpbench {

const char* param_group_name(ParamGroup g) {
  switch (g) {
    case ParamGroup::embed:
      return "embed";
    case ParamGroup::attention:
      return "attention";
    case ParamGroup::mlp:
      return "mlp";
    case ParamGroup::norms:
      return "norms";
    case ParamGroup::lm_head:
      return "lm_head";
    case ParamGroup::lora:
      return "lora";
  }
  return "?";
}

namespace {

void add_linear(std::vector<NamedParameter>& out, const std::string& prefix, const Linear& l,
                ParamGroup group) {
  out.push_back({prefix + ".weight", group, l.weight});
  if (l.bias.defined()) out.push_back({prefix + ".bias", group, l.bias});
  if (l.lora_a.defined()) {
    out.push_back({prefix + ".lora_A.weight", ParamGroup::lora, l.lora_a});
    out.push_back({prefix + ".lora_B.weight", ParamGroup::lora, l.lora_b});
  }
}

}  // namespace

std::vector<const Linear*> LayerWeights::linears() const {
  std::vector<const Linear*> out;
  if (in_qkv.weight.defined()) {  // Gated DeltaNet
    out.insert(out.end(), {&in_qkv, &in_z, &in_b, &in_a, &out_proj});
  } else if (kv_b.weight.defined()) {  // multi-head latent attention
    if (q_a.weight.defined()) out.push_back(&q_a);
    out.insert(out.end(), {&q, &kv_a, &kv_b, &o});
  } else {
    out.insert(out.end(), {&q, &k, &v, &o});
    if (output_gate.weight.defined()) out.push_back(&output_gate);
  }
  if (!router.defined()) {
    out.insert(out.end(), {&gate, &up, &down});
  } else {
    for (size_t e = 0; e < expert_gate.size(); ++e)
      out.insert(out.end(), {&expert_gate[e], &expert_up[e], &expert_down[e]});
    if (shared_gate.weight.defined()) out.insert(out.end(), {&shared_gate, &shared_up, &shared_down});
  }
  return out;
}

std::vector<Linear*> LayerWeights::linears() {
  std::vector<Linear*> out;
  for (const Linear* l : std::as_const(*this).linears()) out.push_back(const_cast<Linear*>(l));
  return out;
}

std::vector<const torch::Tensor*> LayerWeights::vectors() const {
  return {&input_norm,  &q_norm,      &k_norm, &attn_output_norm, &mlp_norm,  &mlp_output_norm,
          &router,      &router_bias, &sinks,  &q_a_norm,         &kv_a_norm, &shared_expert_gate,
          &conv_weight, &dt_bias,     &A_log,  &gated_norm};
}

std::vector<torch::Tensor*> LayerWeights::vectors() {
  std::vector<torch::Tensor*> out;
  for (const torch::Tensor* t : std::as_const(*this).vectors()) out.push_back(const_cast<torch::Tensor*>(t));
  return out;
}

std::vector<NamedParameter> Model::named_parameters() const {
  std::vector<NamedParameter> out;
  out.push_back({"model.embed_tokens.weight", ParamGroup::embed, embed_weight});
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& w = layers[i];
    const std::string p = fmt::format("model.layers.{}.", i);
    if (w.input_norm.defined())
      out.push_back({p + "input_layernorm.weight", ParamGroup::norms, w.input_norm});
    if (w.in_qkv.weight.defined()) {  // Gated DeltaNet, Qwen3_5GatedDeltaNet's names
      const std::string a = p + "linear_attn.";
      add_linear(out, a + "in_proj_qkv", w.in_qkv, ParamGroup::attention);
      add_linear(out, a + "in_proj_z", w.in_z, ParamGroup::attention);
      add_linear(out, a + "in_proj_b", w.in_b, ParamGroup::attention);
      add_linear(out, a + "in_proj_a", w.in_a, ParamGroup::attention);
      out.push_back({a + "conv1d.weight", ParamGroup::attention, w.conv_weight});
      out.push_back({a + "dt_bias", ParamGroup::attention, w.dt_bias});
      out.push_back({a + "A_log", ParamGroup::attention, w.A_log});
      out.push_back({a + "norm.weight", ParamGroup::norms, w.gated_norm});
      add_linear(out, a + "out_proj", w.out_proj, ParamGroup::attention);
    } else if (w.kv_b.weight.defined()) {  // multi-head latent attention, DeepseekV3Attention's names
      if (w.q_a.weight.defined()) {
        add_linear(out, p + "self_attn.q_a_proj", w.q_a, ParamGroup::attention);
        out.push_back({p + "self_attn.q_a_layernorm.weight", ParamGroup::norms, w.q_a_norm});
        add_linear(out, p + "self_attn.q_b_proj", w.q, ParamGroup::attention);
      } else {
        add_linear(out, p + "self_attn.q_proj", w.q, ParamGroup::attention);
      }
      add_linear(out, p + "self_attn.kv_a_proj_with_mqa", w.kv_a, ParamGroup::attention);
      out.push_back({p + "self_attn.kv_a_layernorm.weight", ParamGroup::norms, w.kv_a_norm});
      add_linear(out, p + "self_attn.kv_b_proj", w.kv_b, ParamGroup::attention);
    } else {
      add_linear(out, p + "self_attn.q_proj", w.q, ParamGroup::attention);
      add_linear(out, p + "self_attn.k_proj", w.k, ParamGroup::attention);
      add_linear(out, p + "self_attn.v_proj", w.v, ParamGroup::attention);
      // Qwen3.5's gate: each head's second half of the checkpoint's q_proj (hf_qwen3_5.cpp).
      if (w.output_gate.weight.defined())
        add_linear(out, p + "self_attn.output_gate", w.output_gate, ParamGroup::attention);
    }
    if (w.o.weight.defined()) add_linear(out, p + "self_attn.o_proj", w.o, ParamGroup::attention);
    if (w.sinks.defined()) out.push_back({p + "self_attn.sinks", ParamGroup::attention, w.sinks});
    if (w.q_norm.defined()) {
      out.push_back({p + "self_attn.q_norm.weight", ParamGroup::norms, w.q_norm});
      out.push_back({p + "self_attn.k_norm.weight", ParamGroup::norms, w.k_norm});
    }
    if (w.attn_output_norm.defined()) {  // Gemma 3's names: a norm before and after each block (OLMo: after)
      out.push_back({p + "post_attention_layernorm.weight", ParamGroup::norms, w.attn_output_norm});
      if (w.mlp_norm.defined())
        out.push_back({p + "pre_feedforward_layernorm.weight", ParamGroup::norms, w.mlp_norm});
      out.push_back({p + "post_feedforward_layernorm.weight", ParamGroup::norms, w.mlp_output_norm});
    } else {
      out.push_back({p + "post_attention_layernorm.weight", ParamGroup::norms, w.mlp_norm});
    }
    if (w.router.defined()) {  // Qwen3-MoE's names (Mixtral's checkpoint names: hf_mixtral.cpp)
      out.push_back({p + "mlp.gate.weight", ParamGroup::mlp, w.router});
      if (w.router_bias.defined()) out.push_back({p + "mlp.gate.bias", ParamGroup::mlp, w.router_bias});
      for (size_t e = 0; e < w.expert_gate.size(); ++e) {
        const std::string expert = fmt::format("{}mlp.experts.{}.", p, e);
        add_linear(out, expert + "gate_proj", w.expert_gate[e], ParamGroup::mlp);
        add_linear(out, expert + "up_proj", w.expert_up[e], ParamGroup::mlp);
        add_linear(out, expert + "down_proj", w.expert_down[e], ParamGroup::mlp);
      }
      if (w.shared_gate.weight.defined()) {
        add_linear(out, p + "mlp.shared_experts.gate_proj", w.shared_gate, ParamGroup::mlp);
        add_linear(out, p + "mlp.shared_experts.up_proj", w.shared_up, ParamGroup::mlp);
        add_linear(out, p + "mlp.shared_experts.down_proj", w.shared_down, ParamGroup::mlp);
        if (w.shared_expert_gate.defined())
          out.push_back({p + "mlp.shared_expert_gate.weight", ParamGroup::mlp, w.shared_expert_gate});
      }
      continue;
    }
    add_linear(out, p + "mlp.gate_proj", w.gate, ParamGroup::mlp);
    add_linear(out, p + "mlp.up_proj", w.up, ParamGroup::mlp);
    add_linear(out, p + "mlp.down_proj", w.down, ParamGroup::mlp);
  }
  out.push_back({"model.norm.weight", ParamGroup::norms, final_norm_weight});
  if (!config.tie_embeddings) out.push_back({"lm_head.weight", ParamGroup::lm_head, lm_head_weight});
  return out;
}

std::vector<NamedParameter> Model::named_buffers() const {
  std::vector<NamedParameter> out;
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i].router_correction.defined())
      out.push_back({fmt::format("model.layers.{}.mlp.gate.e_score_correction_bias", i), ParamGroup::mlp,
                     layers[i].router_correction});
  return out;
}

std::vector<NamedParameter> Model::trainable_parameters() const {
  std::vector<NamedParameter> out;
  for (auto& p : named_parameters())
    if (p.tensor.requires_grad()) out.push_back(p);
  return out;
}

bool Model::has_lora() const {
  return !layers.empty() && layers[0].linears().front()->lora_a.defined();
}

bool Model::input_gradient_needed(int64_t layer) const {
  if (embed_weight.requires_grad()) return true;
  for (int64_t i = 0; i < layer; ++i) {
    const auto& w = layers[static_cast<size_t>(i)];
    for (const torch::Tensor* t : w.vectors())
      if (t->defined() && t->requires_grad()) return true;
    for (const Linear* l : w.linears())
      for (const torch::Tensor* t : {&l->weight, &l->bias, &l->lora_a, &l->lora_b})
        if (t->defined() && t->requires_grad()) return true;
  }
  return false;
}

void Model::set_requires_grad(bool full_finetune) {
  for (auto& p : named_parameters()) p.tensor.requires_grad_(p.group == ParamGroup::lora || full_finetune);
}

}  // namespace bpbench
