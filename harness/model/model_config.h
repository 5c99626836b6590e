// model_config.h: dimensions of a decoder of the families bpbench loads (harness/model/hf_families.def), and
// the named presets (model_presets.cpp).
//
// Dimension legend used across bpbench (shape comments everywhere use these names):
//   N   sequences in a step (SFT: batch B; DPO: 2B, chosen rows then rejected; GRPO: B*G)
//   T   tokens per sequence            c   rows in one chunk (partition), rows [s, e) with e = s + c
//   d   hidden size                    I   MLP intermediate size
//   V   vocabulary size                L   layers
//   Hq  query heads   Hkv  key/value heads   g = Hq / Hkv (GQA group)   hd  head dim
//   E   experts of a mixture-of-experts layer   k  experts a token is routed to   Ie  an expert's
//   intermediate R   rows routed at once (N x c of a chunk)  Re rows routed to expert e (sum over e: k R)
//   Gated DeltaNet (linear_attention.h): Hk, Hv key and value heads, dk, dv their head dims, K the conv's
//   taps, C = 2 Hk dk + Hv dv its channels, S the state (Hv x dk x dv a sequence)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/model/rope_config.h"

namespace bpbench {

// The MLP's gate activation: SiLU (Qwen, Llama), GELU with the tanh approximation (Gemma 3's
// gelu_pytorch_tanh), or gpt-oss's clamped SwiGLU (ops.h, clamped_swiglu: gate and up clamped, the gate's
// sigmoid sharpened by alpha, up + 1).
enum class Activation { silu, gelu_tanh, clamped_swiglu };
const char* activation_name(Activation a);

struct ModelConfig {
  std::string name;
  // The transformers class it is (config.json's "architectures", hf_families.def): set by read_hf_config and
  // by presets of a family that has no feature of its own to tell it by (Mistral, Phi-3); empty: told by its
  // features (hf_model.h, hf_config_json).
  std::string architecture;
  int64_t vocab = 0;         // V
  int64_t hidden = 0;        // d
  int64_t intermediate = 0;  // I
  int64_t layers = 0;        // L
  int64_t heads = 0;         // Hq
  int64_t kv_heads = 0;      // Hkv
  int64_t head_dim = 0;      // hd
  RopeConfig rope;           // type, theta and scaling (harness/model/rope_config.h)
  double rms_eps = 1e-6;
  bool tie_embeddings = false;
  bool qk_norm = false;  // Qwen3: RMSNorm over hd on every q and k head
  // OLMo 2 and 3: q_norm and k_norm over the whole projection (Hq*hd and Hkv*hd wide, one rsqrt a row),
  // before the heads are split; qk_norm says whether there are any.
  bool qk_norm_whole = false;
  bool attention_bias = false;  // Qwen2.5: bias on the q, k, v projections
  bool output_bias = false;     // gpt-oss: bias on o_proj as well
  // gpt-oss: one learned logit per query head in every row's softmax denominator ("sinks": ops.h,
  // causal_attention; harness/model/attention_sinks.h).
  bool attention_sinks = false;
  // Sliding-window attention: layer i attends over its last `sliding_window` keys (ops.h, causal_attention)
  // where sliding_layers[i] is set (Gemma 3's local layers). Empty: every layer attends over the whole
  // prefix.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  // Gemma 3 (transformers' gemma3_text); Qwen and Llama leave these at their defaults.
  // The RoPE of sliding layers where it differs from `rope` (Gemma 3's local theta 10k); absent: `rope`.
  std::optional<RopeConfig> sliding_rope;
  bool unit_offset_norms = false;  // every RMSNorm scales by (1 + w), w zero-centred, cast once at the end
  bool sandwich_norms = false;     // attention and MLP outputs are normed again before the residual add
  // OLMo 2 and 3: every RMSNorm scales by w in the compute dtype and casts once at the end (Olmo2RMSNorm), as
  // Gemma 3's (1 + w) form does; elsewhere the normalised x is cast first, then scaled.
  bool norms_scale_before_cast = false;
  // OLMo 2 and 3: no norm before the attention and the MLP (their inputs enter the projections as they are);
  // with sandwich_norms, only the blocks' outputs are normed.
  bool block_input_norms = true;
  // SmolLM3: the layers where rope_layers[i] is false apply no RoPE to q and k (config.json's
  // "no_rope_layers" 0). Empty: every layer has RoPE.
  std::vector<bool> rope_layers;
  // Mixture of experts (Qwen3-MoE, Mixtral): in layer i where is_moe_layer(i), the MLP is a router (E, d) and
  // E SwiGLU experts of Ie; each token goes to the k experts of highest softmax probability, weighted by
  // those probabilities (renormalised over the k when norm_topk_prob), with no capacity limit (dropless).
  // Other layers keep the dense MLP of `intermediate`. experts = 0: a dense model.
  int64_t experts = 0;              // E
  int64_t experts_per_token = 0;    // k
  int64_t expert_intermediate = 0;  // Ie
  bool norm_topk_prob = false;
  // gpt-oss: the router has a bias, takes the k largest logits and a softmax over just those
  // (topk_then_softmax), and every expert's projections have biases. Qwen3-MoE and Mixtral: softmax over
  // all E, then the k largest.
  // DeepSeek's: softmax_grouped (V2) and sigmoid_grouped (V3, GLM-4.5) pick the k experts within the
  // expert_groups_chosen best of expert_groups groups (a group's score: its best expert's under softmax, its
  // two best's sum under sigmoid), sigmoid choosing by score + the router's correction bias (a buffer, no
  // gradient) and weighting by the score alone, renormalised over the k where norm_topk_prob (+1e-20);
  // either weights x routed_scaling.
  enum class Routing { softmax_then_topk, topk_then_softmax, softmax_grouped, sigmoid_grouped };
  Routing routing = Routing::softmax_then_topk;
  bool router_bias = false;
  bool expert_bias = false;
  int64_t expert_groups = 1;         // n_group
  int64_t expert_groups_chosen = 1;  // topk_group
  double routed_scaling = 1.0;       // routed_scaling_factor
  // DeepSeek's shared experts: one SwiGLU of this intermediate (n_shared_experts x moe_intermediate_size)
  // on every row of a mixture-of-experts layer, added to the routed experts' output. 0: none.
  int64_t shared_expert_intermediate = 0;
  bool grouped_routing() const {
    return routing == Routing::softmax_grouped || routing == Routing::sigmoid_grouped;
  }
  int64_t sparse_step = 1;  // every sparse_step-th layer is sparse (Qwen3-MoE's decoder_sparse_step)
  std::vector<int64_t> dense_layers;  // layers that stay dense (Qwen3-MoE's mlp_only_layers)
  Activation activation = Activation::silu;
  bool scale_embeddings = false;       // embeddings x sqrt(d), the factor first rounded to the model dtype
  double query_pre_attn_scalar = 0.0;  // attention scale query_pre_attn_scalar^-1/2; 0: head_dim^-1/2
  // Multi-head latent attention (DeepSeek-V2 and V3, Kimi K2, Moonlight, GLM-4.7-Flash): q through a latent
  // of q_lora_rank with its norm (0: q_proj directly); per token one latent of kv_lora_rank (normed) and one
  // RoPE key of qk_rope_head_dim shared by every head, from which kv_b_proj makes each head's nope key and
  // value. The expanded form's shapes are the config's: kv_heads = heads, head_dim = qk_nope + qk_rope (the
  // RoPE on its last qk_rope dims), and values v_head_dim wide, carried zero-padded to head_dim through the
  // attention (Note [MLA in the expanded form], model.cpp). Absent: standard attention.
  struct Mla {
    int64_t q_lora_rank = 0;       // rq (0: no q latent)
    int64_t kv_lora_rank = 0;      // r
    int64_t qk_rope_head_dim = 0;  // dr
    int64_t v_head_dim = 0;        // dv <= head_dim
    bool rope_interleave = true;   // RoPE rotates interleaved pairs (x0, x1), (x2, x3), ...
    double softmax_mscale =
        1.0;  // the softmax scale is head_dim^-1/2 x softmax_mscale^2 (YaRN's mscale_all_dim)
  };
  std::optional<Mla> mla;
  int64_t qk_nope_head_dim() const { return mla ? head_dim - mla->qk_rope_head_dim : head_dim; }
  int64_t value_head_dim() const { return mla ? mla->v_head_dim : head_dim; }  // dv: what o_proj reads a head
  // GLM-4.5: RoPE on the first rotary_dim dims of each head only (partial_rotary_factor x head_dim); 0: all.
  int64_t rotary_dim = 0;
  int64_t rope_head_dim() const {  // the rotated dims of a head
    return mla ? mla->qk_rope_head_dim : rotary_dim > 0 ? rotary_dim : head_dim;
  }

  // Gated DeltaNet (Qwen3.5, Qwen3-Next: harness/model/linear_attention.h): the layers where linear_layers[i]
  // is set replace attention by a linear attention carrying a state of Hv x dk x dv per sequence; the other
  // layers keep their (gated) full attention. Absent: every layer attends.
  struct LinearAttention {
    int64_t key_heads = 0;    // Hk: linear_num_key_heads
    int64_t value_heads = 0;  // Hv: linear_num_value_heads, a multiple of Hk
    int64_t key_dim = 0;      // dk: linear_key_head_dim
    int64_t value_dim = 0;    // dv: linear_value_head_dim
    int64_t conv_kernel = 0;  // K: linear_conv_kernel_dim, the causal conv's taps
    int64_t conv_channels() const { return 2 * key_heads * key_dim + value_heads * value_dim; }  // q, k, v
  };
  std::optional<LinearAttention> linear_attention;
  std::vector<bool> linear_layers;  // one a layer where linear_attention is set
  bool is_linear_layer(int64_t layer) const {
    const auto i = static_cast<size_t>(layer);
    return linear_attention && i < linear_layers.size() && linear_layers[i];
  }
  int64_t linear_layer_count() const;
  // Qwen3.5's and Qwen3-Next's full attention: its output times sigmoid(h W_gate) per element before o_proj,
  // W_gate (Hq*hd, d) being each head's second half of q_proj in the checkpoint.
  bool attention_output_gate = false;
  // Qwen3-Next's shared expert: its output times sigmoid(h w) per row, w (1, d), before it is added.
  bool shared_expert_gate = false;

  bool has_rope(int64_t layer) const {
    const auto i = static_cast<size_t>(layer);
    return i >= rope_layers.size() || rope_layers[i];
  }
  int64_t rope_layer_count() const;  // layers that apply RoPE (no Gated DeltaNet layer does)
  const RopeConfig& rope_of(int64_t layer) const {
    return sliding_rope && window_of(layer) > 0 ? *sliding_rope : rope;
  }
  // The softmax scale of the attention scores.
  double attention_scale() const;

  // The window of layer i's attention: sliding_window for a sliding layer, 0 (none) for a full one.
  int64_t window_of(int64_t layer) const {
    const auto i = static_cast<size_t>(layer);
    return i < sliding_layers.size() && sliding_layers[i] ? sliding_window : 0;
  }
  bool has_sliding_layers() const;
  int64_t sliding_layer_count() const;  // layers that slide (0: every layer attends over the whole prefix)
  // The first key the query rows from position s on can see in layer i: 0, or under a sliding window the
  // window start of row s (a chunk's attention needs K/V from there only).
  int64_t first_visible_key(int64_t layer, int64_t s) const {
    const int64_t window = window_of(layer);
    return window > 0 && s - window + 1 > 0 ? s - window + 1 : 0;
  }

  bool is_moe() const { return experts > 0; }
  bool is_moe_layer(int64_t layer) const {
    if (experts == 0 || (layer + 1) % sparse_step != 0) return false;
    for (int64_t dense : dense_layers)
      if (dense == layer) return false;
    return true;
  }
  int64_t moe_layer_count() const;
  // Parameters a token's forward multiplies (k of E experts, the router): FLOPs and MFU count these.
  int64_t active_parameter_count() const;

  int64_t group() const { return heads / kv_heads; }
  // Parameters of the full model (no LoRA), counting a tied embedding once.
  int64_t parameter_count() const;
  // Throws std::invalid_argument naming the first inconsistent field.
  void validate() const;
};

// gpt-oss's blocks as transformers' GptOssConfig defines them, shared by its presets and its config.json
// reader (hf_gpt_oss.cpp): q, k, v and o biases, attention sinks, norms scaled before their cast, the
// top-k-then-softmax router with a bias, experts with biases and the clamped SwiGLU, and the default layer
// types (even layers slide: gpt_oss_sliding_layers).
void set_gpt_oss_blocks(ModelConfig& c);
std::vector<bool> gpt_oss_sliding_layers(int64_t layers);

// Presets with the public dimensions of the paper's models, plus `tiny` (unit tests) and `small` (CPU demos).
const std::vector<ModelConfig>& model_presets();
// The preset called `name`; throws std::invalid_argument listing the valid names when there is none.
ModelConfig find_model_preset(const std::string& name);
std::string model_preset_names();  // "tiny, small, qwen3-0.6b, ..."

}  // namespace bpbench
