// model_config.cpp: ModelConfig's derived counts (parameters, layers of each kind), its validation and the
// gpt-oss blocks its presets and config reader share; the presets themselves: model_presets.cpp.
#include "harness/model/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace bpbench {

namespace {

// Every parameter, or (active) those one token's forward multiplies: k of the E experts and the router.
// Multi-head latent attention's q, kv and o (model.h's LayerWeights: q_a, its norm and q, or q alone; kv_a,
// its norm, kv_b; o of Hq x dv). attention_bias: q_a, kv_a and o have biases, as DeepseekV3Attention's.
int64_t mla_attention_parameters(const ModelConfig& c) {
  const ModelConfig::Mla& m = *c.mla;
  const int64_t d = c.hidden, q_out = c.heads * c.head_dim, bias = c.attention_bias ? 1 : 0;
  const int64_t q = m.q_lora_rank > 0
                        ? d * m.q_lora_rank + bias * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * q_out
                        : d * q_out;
  const int64_t latent = m.kv_lora_rank + m.qk_rope_head_dim;
  const int64_t kv = d * latent + bias * latent + m.kv_lora_rank +
                     m.kv_lora_rank * c.heads * (c.qk_nope_head_dim() + m.v_head_dim);
  const int64_t o = c.heads * m.v_head_dim * d + (c.output_bias ? d : 0);
  return q + kv + o;
}

// A Gated DeltaNet layer's token mixer: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, the conv's taps,
// dt_bias, A_log, the gated norm and out_proj.
int64_t linear_attention_parameters(const ModelConfig& c) {
  const ModelConfig::LinearAttention& la = *c.linear_attention;
  const int64_t d = c.hidden, values = la.value_heads * la.value_dim;
  return d * la.conv_channels() + d * values + 2 * d * la.value_heads + la.conv_channels() * la.conv_kernel +
         2 * la.value_heads + la.value_dim + values * d;
}

int64_t count_parameters(const ModelConfig& c, bool active) {
  const int64_t q = c.hidden * c.heads * c.head_dim * (c.attention_output_gate ? 2 : 1) +
                    (c.attention_bias ? c.heads * c.head_dim : 0);
  const int64_t kv =
      2 * (c.hidden * c.kv_heads * c.head_dim + (c.attention_bias ? c.kv_heads * c.head_dim : 0));
  const int64_t o = c.heads * c.head_dim * c.hidden + (c.output_bias ? c.hidden : 0);
  const int64_t attention = c.mla ? mla_attention_parameters(c) : q + kv + o;
  const int64_t sinks = c.attention_sinks ? c.heads : 0;
  const int64_t dense_mlp = 3 * c.hidden * c.intermediate;
  const int64_t experts = active ? c.experts_per_token : c.experts;
  const int64_t expert =
      3 * c.hidden * c.expert_intermediate + (c.expert_bias ? 2 * c.expert_intermediate + c.hidden : 0);
  const int64_t shared = 3 * c.hidden * c.shared_expert_intermediate + (c.shared_expert_gate ? c.hidden : 0);
  const int64_t moe_mlp = c.experts * c.hidden + (c.router_bias ? c.experts : 0) + experts * expert + shared;
  const int64_t qk_norms = !c.qk_norm        ? 0
                           : c.qk_norm_whole ? (c.heads + c.kv_heads) * c.head_dim
                                             : 2 * c.head_dim;
  const int64_t norms = ((c.block_input_norms ? 2 : 0) + (c.sandwich_norms ? 2 : 0)) * c.hidden + qk_norms;
  const int64_t moe_layers = c.moe_layer_count(), linear_layers = c.linear_layer_count();
  const int64_t embed = c.vocab * c.hidden;
  const int64_t block_norms = norms - qk_norms;  // a linear layer's: no q/k norms
  const int64_t mixers =
      (c.layers - linear_layers) * (attention + sinks + norms) +
      (linear_layers > 0 ? linear_layers * (linear_attention_parameters(c) + block_norms) : 0);
  return embed + (c.tie_embeddings ? 0 : embed) + mixers + (c.layers - moe_layers) * dense_mlp +
         moe_layers * moe_mlp + c.hidden;
}

}  // namespace

int64_t ModelConfig::parameter_count() const {
  return count_parameters(*this, /*active=*/false);
}

int64_t ModelConfig::active_parameter_count() const {
  return count_parameters(*this, /*active=*/true);
}

int64_t ModelConfig::moe_layer_count() const {
  int64_t n = 0;
  for (int64_t i = 0; i < layers; ++i) n += is_moe_layer(i) ? 1 : 0;
  return n;
}

void set_gpt_oss_blocks(ModelConfig& c) {
  c.attention_bias = c.output_bias = c.attention_sinks = true;
  c.norms_scale_before_cast = true;
  c.routing = ModelConfig::Routing::topk_then_softmax;
  c.router_bias = c.expert_bias = true;
  c.activation = Activation::clamped_swiglu;
  c.sliding_layers = gpt_oss_sliding_layers(c.layers);
}

std::vector<bool> gpt_oss_sliding_layers(int64_t layers) {
  std::vector<bool> sliding(static_cast<size_t>(layers));
  for (int64_t i = 0; i < layers; ++i) sliding[static_cast<size_t>(i)] = (i + 1) % 2 != 0;
  return sliding;
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::gelu_tanh:
      return "gelu_pytorch_tanh";
    case Activation::clamped_swiglu:
      return "clamped swiglu";
    case Activation::silu:
      break;
  }
  return "silu";
}

double ModelConfig::attention_scale() const {
  const double scalar = query_pre_attn_scalar > 0 ? query_pre_attn_scalar : static_cast<double>(head_dim);
  const double mscale = mla ? mla->softmax_mscale : 1.0;
  return 1.0 / std::sqrt(scalar) * mscale * mscale;
}

bool ModelConfig::has_sliding_layers() const {
  return sliding_layer_count() > 0;
}

int64_t ModelConfig::sliding_layer_count() const {
  return std::count(sliding_layers.begin(), sliding_layers.end(), true);
}

int64_t ModelConfig::linear_layer_count() const {
  int64_t n = 0;
  for (int64_t i = 0; i < layers; ++i) n += is_linear_layer(i) ? 1 : 0;
  return n;
}

int64_t ModelConfig::rope_layer_count() const {
  int64_t n = 0;
  for (int64_t i = 0; i < layers; ++i) n += has_rope(i) && !is_linear_layer(i) ? 1 : 0;
  return n;
}

void ModelConfig::validate() const {
  auto require = [&](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(fmt::format("model '{}': {}", name, what));
  };
  require(vocab > 0 && hidden > 0 && intermediate > 0 && layers > 0,
          "vocab, hidden, intermediate, layers must be > 0");
  require(heads > 0 && kv_heads > 0 && head_dim > 0, "heads, kv_heads, head_dim must be > 0");
  require(heads % kv_heads == 0, "heads must be a multiple of kv_heads (GQA)");
  require(head_dim % 2 == 0, "head_dim must be even (RoPE rotates pairs)");
  require(rms_eps > 0 && rope.theta > 0, "rms_eps and rope theta must be > 0");
  require(rope.type != RopeType::kDynamic || rope_head_dim() > 2, "dynamic RoPE needs head_dim > 2");
  require(sliding_layers.empty() || static_cast<int64_t>(sliding_layers.size()) == layers,
          "sliding_layers must name every layer (or none)");
  require(!has_sliding_layers() || sliding_window > 0, "sliding layers need a sliding_window > 0");
  require(query_pre_attn_scalar >= 0, "query_pre_attn_scalar must be > 0 (or 0: head_dim)");
  require(!sliding_rope || sliding_rope->theta > 0, "the sliding layers' rope theta must be > 0");
  require(rope_layers.empty() || static_cast<int64_t>(rope_layers.size()) == layers,
          "rope_layers must name every layer (or none)");
  require(block_input_norms || sandwich_norms,
          "a model without block input norms needs its output norms (sandwich_norms)");
  require(!qk_norm_whole || qk_norm, "qk_norm_whole needs qk_norm");
  require(rope.type != RopeType::kLongrope ||
              (static_cast<int64_t>(rope.short_factor.size()) * 2 == rope_head_dim() &&
               static_cast<int64_t>(rope.long_factor.size()) * 2 == rope_head_dim()),
          "longrope needs head_dim / 2 short and long factors");
  require(experts >= 0 && (experts == 0 || (experts_per_token >= 1 && experts_per_token <= experts &&
                                            expert_intermediate > 0 && sparse_step >= 1)),
          "a mixture of experts needs 1 <= experts_per_token <= experts, expert_intermediate > 0 and "
          "sparse_step >= 1");
  require(expert_groups >= 1 && experts % expert_groups == 0 && expert_groups_chosen >= 1 &&
              expert_groups_chosen <= expert_groups,
          "expert groups: experts must split into expert_groups, 1 <= expert_groups_chosen <= expert_groups");
  require(!grouped_routing() || experts_per_token <= expert_groups_chosen * (experts / expert_groups),
          "grouped routing needs experts_per_token <= the experts of the chosen groups");
  require(shared_expert_intermediate >= 0 && routed_scaling > 0,
          "shared_expert_intermediate must be >= 0 and routed_scaling > 0");
  require(rotary_dim >= 0 && rotary_dim <= head_dim && rotary_dim % 2 == 0 && (!mla || rotary_dim == 0),
          "rotary_dim must be even and in 0 .. head_dim (0: the whole head)");
  if (linear_attention) {
    const LinearAttention& la = *linear_attention;
    require(la.key_heads > 0 && la.value_heads > 0 && la.value_heads % la.key_heads == 0 && la.key_dim > 0 &&
                la.value_dim > 0 && la.conv_kernel >= 1,
            "linear attention needs key and value heads > 0 (value heads a multiple of key heads), head dims "
            "> 0 and a conv kernel >= 1");
    require(static_cast<int64_t>(linear_layers.size()) == layers, "linear_layers must name every layer");
    require(!mla && !attention_sinks && !has_sliding_layers(),
            "linear attention is modelled beside plain full attention only (no MLA, sinks or windows)");
  }
  require(linear_attention || linear_layers.empty(), "linear_layers need linear_attention");
  require(!shared_expert_gate || shared_expert_intermediate > 0, "shared_expert_gate needs a shared expert");
  if (mla) {
    require(kv_heads == heads,
            "multi-head latent attention expands K and V to every head (kv_heads = heads)");
    require(mla->kv_lora_rank > 0 && mla->q_lora_rank >= 0 && mla->qk_rope_head_dim > 0 &&
                mla->qk_rope_head_dim % 2 == 0 && mla->qk_rope_head_dim < head_dim,
            "multi-head latent attention needs kv_lora_rank > 0, q_lora_rank >= 0 and an even "
            "qk_rope_head_dim below head_dim (qk_nope + qk_rope)");
    require(mla->v_head_dim > 0 && mla->v_head_dim <= head_dim,
            "multi-head latent attention's v_head_dim must be in 1 .. head_dim (qk_nope + qk_rope): wider "
            "values are not modelled");
    require(!qk_norm && !attention_sinks && rope_layers.empty(),
            "multi-head latent attention has no q/k norms, sinks or NoPE layers");
  }
}

}  // namespace bpbench
