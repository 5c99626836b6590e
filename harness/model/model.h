// model.h: a Qwen3 / Qwen2.5 / Llama-family, Gemma 3, OLMo 2 and 3, SmolLM3 or mixture-of-experts (Qwen3-MoE,
// Mixtral) decoder as named parameters plus small forward pieces.
//
// Strategies compose these pieces; none re-implements attention or the MLP. One layer, split the way StreamBP
// needs it (legend in model_config.h):
//
//   h      = attn_norm(i, x)                       x: (N, rows, d)
//   K, V   = project_kv(i, h_all)                  (N, Hkv, T, hd) each: RoPE'd, k-normed keys; values
//            project_kv(i, h_rows, s, T)           (N, Hkv, c, hd): rows [s, e) of them alone
//   q      = project_q(i, h_rows, s, T)            (N, Hq, c, hd): rows [s, e) of a T-token sequence
//   x1     = attention_block(i, x_rows, q, K[k0:e], V[k0:e])   x_rows + o_proj(causal_attention(q, K, V))
//   y      = mlp_block(i, x1)                      x1 + down(act(gate(n)) * up(n)), n = mlp_norm(x1)
//            in a mixture-of-experts layer         x1 + sum over the k experts e a row is routed to of
//                                                  w_e down_e(act(gate_e(n)) * up_e(n)), router over its rows
//
// Gemma 3 norms each block's output again before the residual add (x_rows + attn_output_norm(o_proj(..)),
// x1 + mlp_output_norm(down(..))), scales its norms by (1 + w), its embeddings by sqrt(d), and its sliding
// layers see keys from k0 = first_visible_key(i, s) on. OLMo 2 and 3 norm only the blocks' outputs (attn_norm
// and mlp_norm are the identity), and norm q and k over the whole projection before the heads are split;
// SmolLM3's NoPE layers skip RoPE (ModelConfig::has_rope). layer(i, x) is all of it over every row;
// head_logits(x) = final_norm then the LM head.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/model/model_config.h"
#include "harness/model/ops.h"
#include "harness/model/router_balance.h"

namespace bpbench {

// y = x W^T (+ b) (+ scale * (x A^T) B^T when a LoRA adapter is attached and enabled).
struct Linear {
  torch::Tensor weight;  // (out, in)
  torch::Tensor bias;    // (out) or undefined
  torch::Tensor lora_a;  // (r, in) or undefined
  torch::Tensor lora_b;  // (out, r)
  double lora_scale = 0.0;

  torch::Tensor operator()(const torch::Tensor& x, bool lora_enabled = true) const;
};

struct LayerWeights {
  torch::Tensor input_norm;  // (d), or undefined without block input norms (OLMo)
  Linear q, k, v, o;         // (Hq*hd, d), (Hkv*hd, d), (Hkv*hd, d), (d, Hq*hd)
  Linear output_gate;        // (Hq*hd, d): Qwen3.5's gate on the attention output, or undefined
  torch::Tensor sinks;       // (Hq): gpt-oss's attention sink logits, or undefined
  torch::Tensor q_norm,
      k_norm;  // (hd) each, (Hq*hd), (Hkv*hd) over the whole projection (OLMo), or undefined
  // Gemma 3's sandwich norms, (d) each, undefined elsewhere: on the attention output (its
  // "post_attention_layernorm") and on the MLP output ("post_feedforward_layernorm").
  torch::Tensor attn_output_norm, mlp_output_norm;
  // (d): the MLP's input norm ("post_attention_layernorm" in Qwen and Llama, "pre_feedforward_layernorm" in
  // Gemma 3); undefined in OLMo, whose "post_attention_layernorm" is attn_output_norm.
  torch::Tensor mlp_norm;
  Linear gate, up, down;  // (I, d), (I, d), (d, I); undefined in a mixture-of-experts layer
  // Multi-head latent attention (ModelConfig::mla): q is q_proj (Hq*hd, d), or q_b_proj (Hq*hd, rq) after
  // q_a and its norm; k and v stay undefined; o is (d, Hq*dv).
  Linear q_a;               // (rq, d), or undefined (no q latent)
  torch::Tensor q_a_norm;   // (rq)
  Linear kv_a;              // (r + dr, d): the latent, then the RoPE key ("kv_a_proj_with_mqa")
  torch::Tensor kv_a_norm;  // (r)
  Linear kv_b;              // (Hq*(dn + dv), r): each head's nope key, then its value
  // A mixture-of-experts layer (ModelConfig::is_moe_layer): the router and E experts.
  torch::Tensor router;       // (E, d)
  torch::Tensor router_bias;  // (E): gpt-oss's, or undefined
  // (E): DeepSeek's e_score_correction_bias, which picks experts but weights none: a buffer (no gradient),
  // float32 as transformers keeps it (float64 in a float64 model), or undefined.
  torch::Tensor router_correction;
  std::vector<Linear> expert_gate, expert_up, expert_down;  // E each: (Ie, d), (Ie, d), (d, Ie)
  Linear shared_gate, shared_up, shared_down;  // DeepSeek's shared experts: (Ish, d), (Ish, d), (d, Ish)
  torch::Tensor shared_expert_gate;            // (1, d): Qwen3-Next's sigmoid gate on them, or undefined
  // A Gated DeltaNet layer (ModelConfig::is_linear_layer; harness/model/linear_attention.h), instead of q, k,
  // v, o and the q/k norms. C = 2 Hk dk + Hv dv, the conv's channels (q, k, v).
  Linear in_qkv;              // (C, d): "in_proj_qkv"
  Linear in_z;                // (Hv*dv, d): the output gate
  Linear in_b, in_a;          // (Hv, d) each: beta's and the decay's logits
  torch::Tensor conv_weight;  // (C, K): each channel's taps, oldest first ("conv1d.weight" (C, 1, K))
  torch::Tensor dt_bias;      // (Hv)
  torch::Tensor A_log;        // (Hv)
  torch::Tensor gated_norm;   // (dv): the output's RMSNorm weight, w (not 1 + w), before the gate
  Linear out_proj;            // (d, Hv*dv)

  // Every Linear of the layer (q, k, v, o and the output gate, MLA's q_a, q, kv_a, kv_b, o, or Gated
  // DeltaNet's in_qkv, in_z, in_b, in_a, out_proj; then the MLP's: dense, or each expert's gate, up, down and
  // the shared experts').
  std::vector<const Linear*> linears() const;
  std::vector<Linear*> linears();
  // Every other tensor of the layer, defined or not (norms, sinks, the router and its bias, the conv,
  // dt_bias, A_log, the shared expert's gate; not the router correction, a buffer).
  std::vector<const torch::Tensor*> vectors() const;
  std::vector<torch::Tensor*> vectors();
};

// The parameter groups of the gradient-error report.
enum class ParamGroup { embed, attention, mlp, norms, lm_head, lora };
const char* param_group_name(ParamGroup g);

struct NamedParameter {
  std::string name;  // Hugging Face-style, e.g. "model.layers.3.self_attn.q_proj.weight"
  ParamGroup group;
  torch::Tensor tensor;
};

struct KV {
  KV() = default;
  KV(torch::Tensor keys, torch::Tensor values, KvGradSink grad_sink = {})
      : k(std::move(keys)), v(std::move(values)), sink(std::move(grad_sink)) {}
  torch::Tensor k, v;  // (N, Hkv, T, hd)
  KvGradSink sink;     // defined: attention adds dK, dV here; k and v need no grad (ops.h)
};

// Multi-head latent attention's per-token state (ModelConfig::mla): what K and V are made from.
struct MlaLatent {
  torch::Tensor latent;  // (N, rows, r): kv_a's latent after its norm
  torch::Tensor k_rot;   // (N, rows, dr): the RoPE key every head shares, rotated
};

// K and V (N, Hq, rows, hd) from latent rows through kv_b (Hq*(dn + dv), r): each head's nope key beside
// the shared RoPE key, and its value zero-padded from dv to hd (Note [MLA in the expanded form], model.cpp).
// Differentiable in kv_b and the rows. A free function, so that an autograd node can run it again in its
// backward from kv_b alone (latent_attention.cpp).
KV expand_mla_latent(const Linear& kv_b, bool lora_enabled, const MlaLatent& rows, int64_t heads,
                     int64_t nope_dim, int64_t value_dim, int64_t head_dim);

// What a Gated DeltaNet layer carries from one piece of rows to the next (harness/model/linear_attention.h).
struct LinearState {
  torch::Tensor state;  // (N, Hv, dk, dv) in the compute dtype (float32 under bf16): the recurrence's S
  torch::Tensor halo;   // (N, K - 1, C): the conv's input rows before the piece, zeros before row 0
};
// A linear-attention block's output rows and the state after them.
struct LinearBlock {
  torch::Tensor x1;  // (N, c, d): x_rows + out_proj(gated_norm(delta rule, z))
  LinearState next;
};

class Model {
 public:
  ModelConfig config;
  torch::Tensor embed_weight;  // (V, d)
  std::vector<LayerWeights> layers;
  torch::Tensor final_norm_weight;          // (d)
  torch::Tensor lm_head_weight;             // (V, d); the same tensor as embed_weight when tied
  bool lora_enabled = true;                 // false: the reference policy of DPO/GRPO in LoRA mode
  NormKernel norm_kernel = NormKernel::hf;  // every RMSNorm of the model (ops.h)
  // The routers' load-balancing loss (off unless its coefficient is set; router_balance.h). Shared by copies
  // of the model, as its weights are; converted() gives the copy its own, with the same coefficient.
  std::shared_ptr<RouterBalance> router_balance = std::make_shared<RouterBalance>();

  // Seeded random init made directly on `options`' device and dtype (std 0.02 for matrices, norms at the
  // identity: 1, or 0 under Gemma 3's (1 + w)).
  static Model random(const ModelConfig& config, const torch::TensorOptions& options, uint64_t seed);

  // A copy of every weight converted to `options` (device and dtype), ties and requires_grad kept. The
  // float64 reference of the gradient error is this model converted, so both runs see the same weights.
  Model converted(const torch::TensorOptions& options) const;

  // Every parameter (tied weights once), in a fixed order. trainable_parameters() are those that get .grad.
  std::vector<NamedParameter> named_parameters() const;
  std::vector<NamedParameter> trainable_parameters() const;
  // Tensors of the checkpoint that are not parameters (DeepSeek's router correction biases): loaded, never
  // trained.
  std::vector<NamedParameter> named_buffers() const;
  void set_requires_grad(bool full_finetune);  // full: every base weight; else only LoRA adapters
  bool has_lora() const;
  // Whether the gradient of layer i's input is wanted: something below it (the embedding, an earlier layer)
  // is trained. Not so for layer 0 of a LoRA model, whose frozen embedding takes none: plain BP never
  // computes it there, and a strategy that re-enters layer 0 from a detached input must not either.
  bool input_gradient_needed(int64_t layer) const;
  // Attach rank-r adapters to q, k, v, o, gate, up, down (A random, B zero: output unchanged at init).
  void add_lora(int64_t rank, double alpha, uint64_t seed);

  torch::ScalarType dtype() const { return embed_weight.scalar_type(); }
  torch::Device device() const { return embed_weight.device(); }

  // ---- forward pieces -------------------------------------------------------------------------------------
  torch::Tensor embed(const torch::Tensor& ids) const;  // (N, T) int64 -> (N, T, d), scaled for Gemma 3
  // Gemma 3's embedding factor sqrt(d) as transformers applies it: rounded to float32, then to the model
  // dtype (exact in float64, whose reference stays float64). 1 for the other families.
  double embedding_scale() const;
  torch::Tensor attn_norm(int64_t i, const torch::Tensor& x) const;
  // Keys and values of all T rows, at positions 0 .. T-1.
  KV project_kv(int64_t i, const torch::Tensor& h) const;
  // Keys and values of rows at positions pos0 .. of a seq_len-token sequence: those rows of project_kv's.
  KV project_kv(int64_t i, const torch::Tensor& h_rows, int64_t pos0, int64_t seq_len) const;
  // Keys and values of all T rows of layer i's input x (N, T, d), values only (no grad), made `rows` rows at
  // a time into (N, Hkv, T, hd) buffers: no T-row temporary beside them (normed rows, raw projections).
  KV kv_values(int64_t i, const torch::Tensor& x, int64_t rows) const;
  // MLA: the normed latent and the RoPE key of all rows, (N, T, r) and (N, T, dr), values made `rows` rows at
  // a time (what StreamBP holds instead of K and V: Note [StreamBP through the latent]).
  MlaLatent latent_values(int64_t i, const torch::Tensor& x, int64_t rows) const;
  // Queries of rows at positions pos0 .. of a seq_len-token sequence (RoPE's dynamic scaling depends on it).
  torch::Tensor project_q(int64_t i, const torch::Tensor& h_rows, int64_t pos0, int64_t seq_len) const;
  // Rows of h (N, rows, d) that lie at separate places of a seq_len-token sequence, in h's row order: each
  // block `rows` rows from position `pos0` (ring context parallelism's zigzag blocks). The projections run
  // once over all of h (a block of N > 1 sequences would be a strided slice, copied for its matmul and kept
  // by its graph), RoPE block by block.
  struct PositionBlock {
    int64_t rows, pos0;
  };
  torch::Tensor project_q(int64_t i, const torch::Tensor& h, const std::vector<PositionBlock>& blocks,
                          int64_t seq_len) const;
  KV project_kv(int64_t i, const torch::Tensor& h, const std::vector<PositionBlock>& blocks,
                int64_t seq_len) const;
  // gate: output_gate(i, h_rows) where the layer's attention is gated (ModelConfig::attention_output_gate),
  // else undefined.
  torch::Tensor attention_block(int64_t i, const torch::Tensor& x_rows, const torch::Tensor& q, const KV& kv,
                                const torch::Tensor& gate = {}) const;
  // Qwen3.5's gate logits on the attention output, h_rows (N, c, d) -> (N, c, Hq*hd), or undefined where
  // layer i has none: attention_output multiplies the attention's output by their sigmoid.
  torch::Tensor output_gate(int64_t i, const torch::Tensor& h_rows) const;
  // ---- Gated DeltaNet (ModelConfig::is_linear_layer; harness/model/linear_attention.cpp) ------------------
  // Layer i's token mixer over rows x_rows (N, c, d) that follow the state `in`: x1 and the state after them.
  // Differentiable in the weights, x_rows and in's tensors (StreamBP carries dS and the halo's gradient
  // back).
  LinearBlock linear_attention_block(int64_t i, const torch::Tensor& x_rows, const LinearState& in) const;
  // The state before row 0: zeros, (N, Hv, dk, dv) and (N, K - 1, C).
  LinearState initial_linear_state(int64_t N) const;
  // Multi-head latent attention's q and K/V in the expanded form (project_q and project_kv take them where
  // ModelConfig::mla is set; Note [MLA in the expanded form], model.cpp).
  torch::Tensor mla_project_q(int64_t i, const torch::Tensor& h, const std::vector<PositionBlock>& blocks,
                              int64_t seq_len) const;
  KV mla_project_kv(int64_t i, const torch::Tensor& h, const std::vector<PositionBlock>& blocks,
                    int64_t seq_len) const;
  // MLA's two halves of mla_project_kv, which StreamBP runs apart (harness/model/latent_attention.h):
  //   project_latent(i, h, pos0, T): the normed kv latent and the RoPE'd key of rows at positions pos0..
  //   expand_latent(i, rows): each head's K and V (N, Hq, rows, hd), V zero-padded, made by kv_b_proj
  MlaLatent project_latent(int64_t i, const torch::Tensor& h, int64_t pos0, int64_t seq_len) const;
  KV expand_latent(int64_t i, const MlaLatent& rows) const;
  // attention_block's two halves, which sequence parallelism (impls/machinery/sequence_parallel.h) runs
  // apart, with the heads exchanged between ranks around the first:
  //   attention_heads(i, q, kv, head0): causal attention with layer i's window, scale and sinks, on the
  //                              query heads [head0, head0 + H') (a Ulysses rank's; q: (N, H', c, hd), kv:
  //                              (N, H'kv, e, hd), H' a multiple of H'kv) -> (N, c, H'*hd)
  //   attention_output(i, x_rows, o, gate): x_rows + [Gemma 3: norm of] o_proj(o [x sigmoid(gate)]),
  //                              o (N, c, Hq*hd)
  torch::Tensor attention_heads(int64_t i, const torch::Tensor& q, const KV& kv, int64_t head0 = 0) const;
  // Layer i's attention sink logits of query heads [head0, head0 + heads), or undefined (no sinks).
  torch::Tensor sink_logits(int64_t i, int64_t head0, int64_t heads) const;
  torch::Tensor attention_output(int64_t i, const torch::Tensor& x_rows, const torch::Tensor& o,
                                 const torch::Tensor& gate = {}) const;
  torch::Tensor mlp_block(int64_t i, const torch::Tensor& x) const;
  // A mixture-of-experts layer's MLP output (before the residual add) for normed rows n (N, rows, d): each
  // row routed on its own, so any split of the rows into chunks gives the same rows.
  torch::Tensor experts_mlp(int64_t i, const torch::Tensor& n) const;
  // x1 of all rows (N, T, d): x + the attention block's output, or the Gated DeltaNet block's from the
  // state before row 0. layer(i, x) is mlp_block(i, token_mixer(i, x)).
  torch::Tensor token_mixer(int64_t i, const torch::Tensor& x) const;
  torch::Tensor layer(int64_t i, const torch::Tensor& x) const;  // all rows: (N, T, d) -> (N, T, d)
  // The same layer under no grad with queries in chunks of `rows` (K, V once for all rows): no T x T scores.
  torch::Tensor layer_in_chunks(int64_t i, const torch::Tensor& x, int64_t rows) const;
  torch::Tensor final_norm(const torch::Tensor& x) const;
  torch::Tensor lm_head(const torch::Tensor& h) const;  // (N, c, d) -> (N, c, V) in the model dtype
  // Every RMSNorm of the model: ops.h's rms_norm, or Gemma 3's (1 + w) form.
  torch::Tensor norm(const torch::Tensor& x, const torch::Tensor& weight) const;
  torch::Tensor head_logits(const torch::Tensor& x) const {  // final_norm then lm_head
    return lm_head(final_norm(x));
  }
};

}  // namespace bpbench
