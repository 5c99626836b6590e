// model_mlp.cpp: the decoder's MLP pieces (model.h): the gated MLP and the mixture of experts with its
// routers (top-k then softmax, softmax then top-k, DeepSeek's group-limited choice) and shared experts.
#include <cmath>

#include "harness/model/flop_count.h"
#include "harness/model/latent_attention.h"
#include "harness/model/model.h"
#include "harness/model/ops.h"
#include "harness/model/router_balance.h"

namespace bpbench {

namespace {
// The MLP's activated product of gate and up (N.., I) each.
torch::Tensor gated(Activation activation, const torch::Tensor& gate, const torch::Tensor& up) {
  switch (activation) {
    case Activation::gelu_tanh:
      return torch::gelu(gate, "tanh") * up;
    case Activation::clamped_swiglu:
      return clamped_swiglu(gate, up);
    case Activation::silu:
      break;
  }
  return torch::silu(gate) * up;
}
}  // namespace

torch::Tensor Model::mlp_block(int64_t i, const torch::Tensor& x) const {
  const auto& w = layers[i];
  auto n = w.mlp_norm.defined() ? norm(x, w.mlp_norm) : x.contiguous();  // OLMo: x1 itself, as attn_norm
  if (w.router.defined()) {
    auto y = experts_mlp(i, n);  // (N, rows, d)
    return x + (w.mlp_output_norm.defined() ? norm(y, w.mlp_output_norm) : y);
  }
  auto gate = w.gate(n, lora_enabled);  // (N, rows, I)
  // The up projection first, then the activation: C++ leaves the order of an operator's operands to the
  // compiler (g++ takes them right to left, clang++ left to right), and with LoRA it sets the peak (the up
  // projection's LoRA temporaries beside the activated gate or not). The estimate counts this order.
  torch::Tensor act;
  {
    auto up = w.up(n, lora_enabled);  // (N, rows, I)
    act = gated(config.activation, gate, up);
  }
  auto y = w.down(act, lora_enabled);  // (N, rows, d)
  return x + (w.mlp_output_norm.defined() ? norm(y, w.mlp_output_norm) : y);
}

namespace {
// DeepSeek's group-limited choice of k experts (ModelConfig::Routing: softmax_grouped, sigmoid_grouped) from
// the scores (R, E) in the routing dtype and the router's correction bias (undefined: none): the experts
// (R, k), chosen under no grad (the weights that follow are differentiable).
torch::Tensor grouped_top_experts(const ModelConfig& c, const torch::Tensor& scores,
                                  const torch::Tensor& correction) {
  torch::NoGradGuard no_grad;
  const bool sigmoid = c.routing == ModelConfig::Routing::sigmoid_grouped;
  const int64_t R = scores.size(0), E = c.experts, G = c.expert_groups;
  const auto choice = correction.defined() ? scores + correction : scores;  // (R, E)
  const auto grouped = choice.view({R, G, E / G});
  // A group's score: its two best experts' sum (sigmoid, V3), its best expert's (softmax, V2).
  const auto group_scores = sigmoid ? std::get<0>(grouped.topk(2, -1)).sum(-1) : grouped.amax(-1);  // (R, G)
  const auto groups = std::get<1>(group_scores.topk(c.expert_groups_chosen, -1, true, /*sorted=*/false));
  const auto allowed = torch::zeros_like(group_scores, torch::kBool)
                           .scatter_(1, groups, true)
                           .unsqueeze(-1)
                           .expand({R, G, E / G})
                           .reshape({R, E});
  const auto masked = choice.masked_fill(allowed.logical_not(), sigmoid ? -INFINITY : 0.0);
  return std::get<1>(masked.topk(c.experts_per_token, -1, true, /*sorted=*/false));
}
}  // namespace

torch::Tensor Model::experts_mlp(int64_t i, const torch::Tensor& n) const {
  const auto& w = layers[i];
  const auto flat = n.reshape({-1, n.size(-1)});  // (R, d)
  const auto routing_dtype = n.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  torch::Tensor probabilities, top_weights, top_experts;  // (R, E), (R, k), (R, k)
  const bool topk_first = config.routing == ModelConfig::Routing::topk_then_softmax;
  if (config.grouped_routing()) {
    // DeepSeek's router: its logits in float32 (float64 in a float64 model), as transformers computes them.
    TORCH_CHECK(!router_balance->on(), "DeepSeek's routing has no load-balancing loss");
    const auto logits = counted_linear(flat.to(routing_dtype), w.router.to(routing_dtype));  // (R, E)
    const bool sigmoid = config.routing == ModelConfig::Routing::sigmoid_grouped;
    const auto scores = sigmoid ? torch::sigmoid(logits) : torch::softmax(logits, -1);
    top_experts = grouped_top_experts(config, scores, w.router_correction);
    top_weights = scores.gather(1, top_experts);  // (R, k): the scores, not the correction
    if (sigmoid && config.norm_topk_prob) top_weights = top_weights / (top_weights.sum(-1, true) + 1e-20);
    // Kept in the routing dtype: transformers weights each expert's output in float32 and casts the product.
    top_weights = top_weights * config.routed_scaling;
  } else if (const auto logits = counted_linear(flat, w.router, w.router_bias);  // (R, E)
             topk_first && !router_balance->on()) {
    // gpt-oss's router: the k largest logits, a softmax over just them in the logits' dtype.
    std::tie(top_weights, top_experts) = logits.topk(config.experts_per_token, -1);
    top_weights = torch::softmax(top_weights, -1);
  } else {
    // Qwen3-MoE's and Mixtral's: softmax in float32 (float64 in a float64 model), the k largest,
    // renormalised over the k where the family does, cast back to the model dtype. gpt-oss's with the
    // load-balancing loss on, which needs the softmax over all E in the graph: its top-k softmax is that
    // softmax's top k renormalised (exp(l_i) / sum_k exp(l_k) = p_i / sum_k p_k), the same to round-off.
    probabilities = torch::softmax(logits, -1, routing_dtype);
    std::tie(top_weights, top_experts) = probabilities.topk(config.experts_per_token, -1);
    if (config.norm_topk_prob || topk_first)
      top_weights = top_weights / top_weights.sum(-1, /*keepdim=*/true);
    top_weights = top_weights.to(logits.scalar_type());
  }
  // Dropless dispatch: each expert takes every row routed to it; the rows' outputs are added in expert order.
  auto out = torch::zeros_like(flat);  // (R, d)
  torch::Tensor counts;
  {
    torch::NoGradGuard no_grad;
    counts = torch::bincount(top_experts.flatten(), {}, config.experts).cpu();  // (E)
  }
  if (probabilities.defined()) router_balance->observe(probabilities, counts);
  const auto* count = counts.data_ptr<int64_t>();
  for (int64_t e = 0; e < config.experts; ++e) {
    if (count[e] == 0) continue;
    torch::Tensor rows, slots;  // Re each: the rows routed to e, and which of their k choices it is
    {
      torch::NoGradGuard no_grad;
      const auto where = torch::nonzero(top_experts == e);  // (Re, 2)
      rows = where.select(1, 0);
      slots = where.select(1, 1);
    }
    const auto h = flat.index_select(0, rows);  // (Re, d)
    const auto gate = w.expert_gate[e](h, lora_enabled);
    torch::Tensor act;
    {
      auto up = w.expert_up[e](h, lora_enabled);  // (Re, Ie): as mlp_block, up before the activation
      act = gated(config.activation, gate, up);
    }
    const auto y = w.expert_down[e](act, lora_enabled) * top_weights.index({rows, slots}).unsqueeze(-1);
    out.index_add_(0, rows, y.to(out.scalar_type()));  // (Re, d) into (R, d)
  }
  if (w.shared_gate.weight.defined()) {  // DeepSeek's shared experts, on every row (up before the activation)
    const auto gate = w.shared_gate(flat, lora_enabled);  // (R, Ish)
    torch::Tensor act;
    {
      auto up = w.shared_up(flat, lora_enabled);
      act = gated(config.activation, gate, up);
    }
    auto shared = w.shared_down(act, lora_enabled);  // (R, d)
    // Qwen3-Next's gate on it, a sigmoid of one logit a row.
    if (w.shared_expert_gate.defined())
      shared = torch::sigmoid(counted_linear(flat, w.shared_expert_gate)) * shared;
    out.add_(shared);  // in place: no third (R, d) beside the two
  }
  return out.view(n.sizes());
}

torch::Tensor Model::token_mixer(int64_t i, const torch::Tensor& x) const {
  if (config.is_linear_layer(i)) return linear_attention_block(i, x, initial_linear_state(x.size(0))).x1;
  auto h = attn_norm(i, x);
  auto kv = project_kv(i, h);
  auto q = project_q(i, h, 0, x.size(1));
  return attention_block(i, x, q, kv, output_gate(i, h));
}

torch::Tensor Model::layer(int64_t i, const torch::Tensor& x) const {
  return mlp_block(i, token_mixer(i, x));
}

torch::Tensor Model::layer_in_chunks(int64_t i, const torch::Tensor& x, int64_t rows) const {
  torch::NoGradGuard no_grad;
  const int64_t T = x.size(1);
  auto y = torch::empty_like(x);
  if (config.is_linear_layer(i)) {  // Gated DeltaNet: the state carried from chunk to chunk
    LinearState state = initial_linear_state(x.size(0));
    for (int64_t s = 0; s < T; s += rows) {
      const int64_t c = std::min(rows, T - s);
      LinearBlock block = linear_attention_block(i, x.narrow(1, s, c), state);
      y.narrow(1, s, c).copy_(mlp_block(i, block.x1));
      state = std::move(block.next);
    }
    return y;
  }
  // The keys of all T rows as values, made chunk by chunk as the queries below: K and V (N, Hkv, T, hd), or
  // MLA's latent rows (N, T, r + dr), from which K and V are expanded a key block of `rows` at a time (no
  // T-row K or V, which would hold 2 Hq hd values a token where StreamBP's backward holds r + dr:
  // latent_attention.h). Chunk [s, e)'s attention block sees the keys before e.
  KV kv;
  MlaLatent latent;
  if (config.mla)
    latent = latent_values(i, x, rows);
  else
    kv = kv_values(i, x, rows);
  auto attention = [&](const torch::Tensor& x_rows, const torch::Tensor& q, const torch::Tensor& gate,
                       int64_t s, int64_t e) {
    if (config.mla) {
      const MlaLatent visible{latent.latent.narrow(1, 0, e), latent.k_rot.narrow(1, 0, e)};
      return attention_output(i, x_rows, latent_attention_values(*this, i, q, visible, e - s));
    }
    const int64_t k0 = config.first_visible_key(i, s);
    return attention_block(i, x_rows, q, KV{kv.k.narrow(2, k0, e - k0), kv.v.narrow(2, k0, e - k0)}, gate);
  };
  for (int64_t s = 0; s < T; s += rows) {
    const int64_t c = std::min(rows, T - s);
    auto x_rows = x.narrow(1, s, c);
    auto h = attn_norm(i, x_rows);
    auto q = project_q(i, h, s, T);
    auto gate = output_gate(i, h);
    h = torch::Tensor();  // not alive through the attention and the MLP: the estimate counts it so
    y.narrow(1, s, c).copy_(mlp_block(i, attention(x_rows, q, gate, s, s + c)));
  }
  return y;
}

torch::Tensor Model::final_norm(const torch::Tensor& x) const {
  return norm(x, final_norm_weight);
}

torch::Tensor Model::lm_head(const torch::Tensor& h) const {
  router_balance->stop_counting();  // every layer has run over every row (router_balance.h)
  return counted_linear(h, lm_head_weight);
}

}  // namespace bpbench
