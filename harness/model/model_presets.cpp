// model_presets.cpp: the named presets (model_config.h), each with the published dimensions of its
// checkpoint, and the tiny and small ones of the tests and CPU demos.
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness/model/model_config.h"

namespace bpbench {

namespace {

// The shape every preset states.
ModelConfig dims(std::string name, int64_t vocab, int64_t d, int64_t inter, int64_t layers, int64_t heads,
                 int64_t kv_heads, int64_t head_dim) {
  ModelConfig c;
  c.name = std::move(name);
  c.vocab = vocab;
  c.hidden = d;
  c.intermediate = inter;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  return c;
}

ModelConfig qwen3(std::string name, int64_t d, int64_t inter, int64_t layers, int64_t heads, bool tied) {
  ModelConfig c = dims(std::move(name), 151936, d, inter, layers, heads, 8, 128);
  c.rope.theta = 1e6;
  c.rope.max_positions = 40960;  // the published config.json files
  c.rms_eps = 1e-6;
  c.tie_embeddings = tied;
  c.qk_norm = true;
  return c;
}

// Llama 3.1 and 3.2 as published: rope_scaling {"rope_type": "llama3", "factor": rope_factor,
// "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}, rope_theta 500000,
// 131072 positions.
ModelConfig llama3(std::string name, int64_t d, int64_t inter, int64_t layers, int64_t head_dim, bool tied,
                   double rope_factor) {
  ModelConfig c = dims(std::move(name), 128256, d, inter, layers, 32, 8, head_dim);
  c.rope.type = RopeType::kLlama3;
  c.rope.theta = 500000.0;
  c.rope.max_positions = 131072;
  c.rope.factor = rope_factor;
  c.rope.low_freq_factor = 1.0;
  c.rope.high_freq_factor = 4.0;
  c.rope.original_max_positions = 8192;
  c.rms_eps = 1e-5;
  c.tie_embeddings = tied;
  return c;
}

// Gemma 3 (transformers' gemma3_text, as the published config.json files state it): every sixth layer
// global (layer i global iff (i + 1) % 6 == 0), the rest sliding over `window` keys with RoPE theta 10k;
// global layers theta 1M, linearly scaled x8 from 4b on; tied head, eps 1e-6.
ModelConfig gemma3(std::string name, int64_t vocab, int64_t d, int64_t inter, int64_t layers, int64_t heads,
                   int64_t kv_heads, int64_t head_dim, int64_t window, double query_pre_attn_scalar,
                   int64_t max_positions, double global_rope_factor) {
  ModelConfig c = dims(std::move(name), vocab, d, inter, layers, heads, kv_heads, head_dim);
  c.rope.theta = 1e6;
  c.rope.max_positions = max_positions;
  if (global_rope_factor != 1.0) {
    c.rope.type = RopeType::kLinear;
    c.rope.factor = global_rope_factor;
  }
  RopeConfig local;
  local.theta = 1e4;
  local.max_positions = max_positions;
  c.sliding_rope = local;
  c.rms_eps = 1e-6;
  c.tie_embeddings = true;
  c.qk_norm = true;
  c.sliding_window = window;
  for (int64_t i = 0; i < layers; ++i) c.sliding_layers.push_back((i + 1) % 6 != 0);
  c.unit_offset_norms = true;
  c.sandwich_norms = true;
  c.activation = Activation::gelu_tanh;
  c.scale_embeddings = true;
  c.query_pre_attn_scalar = query_pre_attn_scalar;
  return c;
}

// Llama's network under another transformers class: Mistral (a sliding window on every layer when set) and
// Phi-3 (q, k, v and gate, up fused in the checkpoint; a window too), as the published config.json files
// state them.
ModelConfig llama_like(std::string name, std::string architecture, int64_t vocab, int64_t d, int64_t inter,
                       int64_t layers, int64_t heads, int64_t kv_heads, double theta, int64_t max_positions,
                       int64_t window) {
  ModelConfig c = dims(std::move(name), vocab, d, inter, layers, heads, kv_heads, d / heads);
  c.architecture = std::move(architecture);
  c.rope.theta = theta;
  c.rope.max_positions = max_positions;
  c.rms_eps = 1e-5;
  if (window > 0) {
    c.sliding_window = window;
    c.sliding_layers.assign(static_cast<size_t>(layers), true);
  }
  return c;
}

// OLMo 2 and 3 (transformers' olmo2, olmo3): norms on the attention and MLP outputs only, q and k normed
// over the whole projection, every norm scaled before its cast, an untied head, RoPE theta 500k, eps 1e-6.
// OLMo 3 slides over `window` keys on three layers of four (layer i full iff (i + 1) % 4 == 0, as
// Olmo3Config's default layer_types) with the RoPE of `rope` on both layer types, until a preset gives its
// full layers their own (olmo-3-7b's YaRN).
ModelConfig olmo(std::string name, std::string architecture, int64_t vocab, int64_t d, int64_t inter,
                 int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t max_positions,
                 int64_t window) {
  ModelConfig c = dims(std::move(name), vocab, d, inter, layers, heads, kv_heads, head_dim);
  c.architecture = std::move(architecture);
  c.rope.theta = 500000.0;
  c.rope.max_positions = max_positions;
  c.rms_eps = 1e-6;
  c.qk_norm = true;
  c.qk_norm_whole = true;
  c.norms_scale_before_cast = true;
  c.block_input_norms = false;
  c.sandwich_norms = true;
  if (window > 0) {
    c.sliding_window = window;
    for (int64_t i = 0; i < layers; ++i) c.sliding_layers.push_back((i + 1) % 4 != 0);
    c.sliding_rope = c.rope;
  }
  return c;
}

// SmolLM3 (transformers' smollm3): Llama's network with no RoPE on every fourth layer (no_rope_layers'
// default, layer i without RoPE iff (i + 1) % 4 == 0), a tied head.
ModelConfig smollm3(std::string name, int64_t vocab, int64_t d, int64_t inter, int64_t layers, int64_t heads,
                    int64_t kv_heads, double theta, int64_t max_positions) {
  ModelConfig c = dims(std::move(name), vocab, d, inter, layers, heads, kv_heads, d / heads);
  c.architecture = "SmolLM3ForCausalLM";
  c.rope.theta = theta;
  c.rope.max_positions = max_positions;
  c.rms_eps = 1e-6;
  c.tie_embeddings = true;
  for (int64_t i = 0; i < layers; ++i) c.rope_layers.push_back((i + 1) % 4 != 0);
  return c;
}

// Mixture of experts as Qwen3-MoE (q/k norm, norm_topk_prob true in the published models) and Mixtral (every
// layer sparse, the k weights always renormalised) publish them.
ModelConfig with_experts(ModelConfig c, std::string architecture, int64_t experts, int64_t k,
                         int64_t expert_intermediate) {
  c.architecture = std::move(architecture);
  c.experts = experts;
  c.experts_per_token = k;
  c.expert_intermediate = expert_intermediate;
  c.norm_topk_prob = true;
  return c;
}

// `dense`: the dense MLP's intermediate size, for a layer that stays dense (none of the presets has one).
ModelConfig qwen3_moe(std::string name, int64_t d, int64_t dense, int64_t layers, int64_t heads,
                      int64_t kv_heads, int64_t experts, int64_t k, int64_t expert_intermediate) {
  ModelConfig c = qwen3(std::move(name), d, dense, layers, heads, false);
  c.kv_heads = kv_heads;
  return with_experts(c, "Qwen3MoeForCausalLM", experts, k, expert_intermediate);
}

// gpt-oss (transformers' gpt_oss): every layer a mixture of `experts` with biases, the clamped SwiGLU and a
// router with a bias taking the top 4 logits; attention with biases and sinks, 64 query heads and 8 K/V
// heads of 64, sliding (128 keys) on even layers, full on odd; one YaRN RoPE (x32 of 4096, theta 150k,
// beta_fast 32, beta_slow 1, not truncated); norms scaled before their cast, eps 1e-5; untied.
// openai/gpt-oss-20b's and -120b's config.json: 201088 tokens, 2880 wide, experts of 2880, 131072
// positions; 24 layers of 32 experts, and 36 of 128.
ModelConfig gpt_oss(std::string name, int64_t vocab, int64_t d, int64_t expert_intermediate, int64_t layers,
                    int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t experts, int64_t k,
                    int64_t window) {
  ModelConfig c = dims(std::move(name), vocab, d, expert_intermediate, layers, heads, kv_heads, head_dim);
  c.architecture = "GptOssForCausalLM";
  c.rope.theta = 150000.0;
  c.rope.max_positions = 131072;
  c.rope.type = RopeType::kYarn;
  c.rope.factor = 32.0;
  c.rope.original_max_positions = 4096;
  c.rope.beta_fast = 32.0;
  c.rope.beta_slow = 1.0;
  c.rope.truncate = false;
  c.rope.attention_factor = yarn_mscale(c.rope.factor);
  c.rms_eps = 1e-5;
  set_gpt_oss_blocks(c);
  c.sliding_window = window;
  c.experts = experts;
  c.experts_per_token = k;
  c.expert_intermediate = expert_intermediate;
  return c;
}

// DeepSeek's multi-head latent attention and experts (transformers' deepseek_v2 and deepseek_v3): Hq heads of
// qk_nope 128 + qk_rope 64 and values of 128 from latents of kv_lora_rank 512 (q's of q_lora_rank, 0: none),
// interleaved RoPE, `shared` shared experts beside `experts` routed ones (k a token) of Ie, the first
// `dense` layers dense; YaRN x40 over 4096 positions (163840 in all, theta 10000) with mscale and
// mscale_all_dim `mscale`, whose softmax scale is 192^-1/2 x yarn_mscale(40, mscale)^2; eps 1e-6, untied.
ModelConfig deepseek(std::string name, std::string architecture, int64_t vocab, int64_t d, int64_t inter,
                     int64_t layers, int64_t heads, int64_t q_lora_rank, int64_t experts, int64_t k,
                     int64_t expert_intermediate, int64_t shared, int64_t dense, double mscale) {
  ModelConfig c = dims(std::move(name), vocab, d, inter, layers, heads, heads, 128 + 64);
  c.architecture = std::move(architecture);
  c.mla = ModelConfig::Mla{q_lora_rank, 512, 64, 128, true, yarn_mscale(40.0, mscale)};
  c.rope.theta = 10000.0;
  c.rope.max_positions = 163840;
  c.rope.type = RopeType::kYarn;
  c.rope.factor = 40.0;
  c.rope.original_max_positions = 4096;
  c.rope.attention_factor = 1.0;  // yarn_mscale(40, mscale) / yarn_mscale(40, mscale_all_dim), the two equal
  c.rms_eps = 1e-6;
  c.experts = experts;
  c.experts_per_token = k;
  c.expert_intermediate = expert_intermediate;
  c.shared_expert_intermediate = shared * expert_intermediate;
  c.routing =
      ModelConfig::Routing::softmax_grouped;  // V2's greedy softmax (one group); V3: deepseek_v3_routing
  for (int64_t i = 0; i < dense; ++i) c.dense_layers.push_back(i);
  return c;
}

// GLM-4.5 (transformers' glm4_moe): Llama's attention with q, k, v biases and RoPE (theta 1M) on half of
// each head; `experts` of Ie with DeepSeek-V3's sigmoid routing (one group, renormalised, x1.0) and one
// shared expert; layer 0 dense; eps 1e-5, untied.
ModelConfig glm4_moe(std::string name, int64_t vocab, int64_t d, int64_t inter, int64_t layers, int64_t heads,
                     int64_t kv_heads, int64_t head_dim, int64_t experts, int64_t k,
                     int64_t expert_intermediate, int64_t max_positions) {
  ModelConfig c = dims(std::move(name), vocab, d, inter, layers, heads, kv_heads, head_dim);
  c.architecture = "Glm4MoeForCausalLM";
  c.rotary_dim = head_dim / 2;
  c.attention_bias = true;
  c.rope.theta = 1e6;
  c.rope.max_positions = max_positions;
  c.rms_eps = 1e-5;
  c.experts = experts;
  c.experts_per_token = k;
  c.expert_intermediate = expert_intermediate;
  c.shared_expert_intermediate = expert_intermediate;
  c.routing = ModelConfig::Routing::sigmoid_grouped;
  c.norm_topk_prob = true;
  c.dense_layers = {0};
  return c;
}

// Qwen3.5 (transformers' qwen3_5_text): three Gated DeltaNet layers of four (layer i full iff (i + 1) % 4 ==
// 0, full_attention_interval 4), the full layers' attention gated with (1 + w) q/k norms and RoPE on a
// quarter of each head; every norm (1 + w); a conv of 4 taps; eps 1e-6. Qwen3-Next is this with its experts
// (qwen3_next_experts).
ModelConfig qwen3_5(std::string name, int64_t vocab, int64_t d, int64_t inter, int64_t layers, int64_t heads,
                    int64_t kv_heads, int64_t head_dim, ModelConfig::LinearAttention linear, bool tied) {
  ModelConfig c = dims(std::move(name), vocab, d, inter, layers, heads, kv_heads, head_dim);
  c.architecture = "Qwen3_5ForCausalLM";
  c.rope.theta = 1e7;
  c.rope.max_positions = 262144;
  c.rotary_dim = head_dim / 4;
  c.rms_eps = 1e-6;
  c.tie_embeddings = tied;
  c.qk_norm = true;
  c.unit_offset_norms = true;
  c.attention_output_gate = true;
  c.linear_attention = linear;
  for (int64_t i = 0; i < layers; ++i) c.linear_layers.push_back((i + 1) % 4 != 0);
  return c;
}

// Qwen3-Next's mixture of experts on every layer: softmax then the k best, renormalised, and one shared
// expert under a sigmoid gate.
ModelConfig qwen3_next_experts(ModelConfig c, int64_t experts, int64_t k, int64_t expert_intermediate,
                               int64_t shared_intermediate) {
  c.architecture = "Qwen3NextForCausalLM";
  c.experts = experts;
  c.experts_per_token = k;
  c.expert_intermediate = expert_intermediate;
  c.shared_expert_intermediate = shared_intermediate;
  c.shared_expert_gate = true;
  c.norm_topk_prob = true;
  return c;
}

// DeepSeek-V3's router: sigmoid scores over 8 groups of which 4 are chosen, renormalised, x2.5.
ModelConfig deepseek_v3_routing(ModelConfig c) {
  c.routing = ModelConfig::Routing::sigmoid_grouped;
  c.expert_groups = 8;
  c.expert_groups_chosen = 4;
  c.norm_topk_prob = true;
  c.routed_scaling = 2.5;
  return c;
}

std::vector<ModelConfig> build_presets() {
  ModelConfig tiny;  // every feature switched on, dimensions small enough for finite differences
  tiny.name = "tiny";
  tiny.vocab = 97;
  tiny.hidden = 24;
  tiny.intermediate = 40;
  tiny.layers = 2;
  tiny.heads = 4;
  tiny.kv_heads = 2;
  tiny.head_dim = 6;
  tiny.rope.theta = 10000.0;
  tiny.rope.max_positions = 32768;
  tiny.qk_norm = true;

  ModelConfig small;  // CPU demos: vocab >= 32000 so the logits cost shows as it does on real models
  small.name = "small";
  small.vocab = 32000;
  small.hidden = 256;
  small.intermediate = 768;
  small.layers = 4;
  small.heads = 4;
  small.kv_heads = 2;
  small.head_dim = 64;
  small.rope.theta = 1e6;
  small.rope.max_positions = 32768;
  small.qk_norm = true;

  // Training runs on real text in bfloat16 on a CPU (scenarios/cpu_train_text.json): the vocabulary of the
  // BPE that scripts/text_data.py trains (--vocab 2048), and few enough FLOPs a step for LibTorch's bfloat16
  // matmul without oneDNN (off for exact memory accounting, profiles/memory.cpp), whose reference loops
  // run at a few GFLOP/s.
  ModelConfig text = small;
  text.name = "small-text";
  text.vocab = 2048;
  text.hidden = 128;
  text.intermediate = 384;
  text.head_dim = 32;

  // Gemma 3 shaped, small enough for unit tests: both layer types, a window shorter than the test
  // sequences, GQA, a query scale that is not the head size's.
  ModelConfig tiny_gemma = gemma3("tiny-gemma3", 97, 24, 40, 3, 4, 2, 6, 5, 10.0, 32768, 1.0);
  tiny_gemma.sliding_layers = {true, false, true};
  // Gemma 3 shaped CPU demo: `small`'s size, five sliding layers (window 128) and one global, as in 1b.
  ModelConfig small_gemma = gemma3("small-gemma3", 32000, 256, 768, 6, 4, 1, 64, 128, 64.0, 32768, 1.0);

  // Mixtures of experts small enough for float64 exactness tests (8 experts, 2 a token) and CPU demos
  // (`small`'s size, 8 experts of a quarter of its MLP, 2 a token: the active MLP half the dense one's).
  ModelConfig tiny_moe = with_experts(tiny, "Qwen3MoeForCausalLM", 8, 2, 12);
  tiny_moe.name = "tiny-moe";
  tiny_moe.norm_topk_prob = false;  // Qwen3MoeConfig's default; the published models set it
  ModelConfig small_moe = with_experts(small, "Qwen3MoeForCausalLM", 8, 2, 192);
  small_moe.name = "small-moe";

  // OLMo 3 shaped: both layer types (a window shorter than the test sequences), GQA, the head dims of tiny.
  ModelConfig tiny_olmo3 = olmo("tiny-olmo3", "Olmo3ForCausalLM", 97, 24, 40, 4, 4, 2, 6, 32768, 5);
  // SmolLM3 shaped: its top layer (3) without RoPE, GQA.
  ModelConfig tiny_smollm3 = smollm3("tiny-smollm3", 97, 24, 40, 4, 4, 2, 10000.0, 32768);
  tiny_smollm3.tie_embeddings = false;  // tiny's untied head; the tied one is tested on the oracle's models
  // gpt-oss shaped: sliding (window 5, shorter than the test sequences) and full layers, 8 experts of 12, 2 a
  // token, GQA; YaRN over a short original context, so that its ramp shows at the tests' lengths.
  ModelConfig tiny_gpt_oss = gpt_oss("tiny-gpt-oss", 97, 24, 12, 2, 4, 2, 6, 8, 2, 5);
  tiny_gpt_oss.rope.original_max_positions = 16;
  tiny_gpt_oss.rope.max_positions = 512;
  // DeepSeek-V3 shaped: a q latent, values narrower than q and k (padded: Note [MLA in the expanded form]),
  // layer 0 dense, 8 experts of 12 in 4 groups (2 chosen), 2 a token, a shared expert; YaRN over a short
  // original context with mscale_all_dim 1.
  ModelConfig tiny_deepseek = dims("tiny-deepseek", 97, 24, 40, 2, 4, 4, 6 + 4);
  tiny_deepseek.architecture = "DeepseekV3ForCausalLM";
  tiny_deepseek.mla = ModelConfig::Mla{12, 8, 4, 6, true, yarn_mscale(4.0, 1.0)};
  tiny_deepseek.rope.theta = 10000.0;
  tiny_deepseek.rope.max_positions = 512;
  tiny_deepseek.rope.type = RopeType::kYarn;
  tiny_deepseek.rope.factor = 4.0;
  tiny_deepseek.rope.original_max_positions = 16;
  tiny_deepseek.rope.attention_factor = 1.0;
  tiny_deepseek.experts = 8;
  tiny_deepseek.experts_per_token = 2;
  tiny_deepseek.expert_intermediate = 12;
  tiny_deepseek.shared_expert_intermediate = 12;
  tiny_deepseek.routing = ModelConfig::Routing::sigmoid_grouped;
  tiny_deepseek.norm_topk_prob = true;
  tiny_deepseek.expert_groups = 4;
  tiny_deepseek.expert_groups_chosen = 2;
  tiny_deepseek.routed_scaling = 2.5;
  tiny_deepseek.dense_layers = {0};
  // GLM-4.5 shaped: RoPE on half of each head, q, k, v biases and q/k norms, GQA, 8 experts in 2 groups (1
  // chosen), a shared expert, layer 0 dense.
  ModelConfig tiny_glm = glm4_moe("tiny-glm4-moe", 97, 24, 40, 2, 4, 2, 8, 8, 2, 12, 512);
  tiny_glm.qk_norm = true;
  tiny_glm.expert_groups = 2;
  tiny_glm.routed_scaling = 1.5;

  // Qwen3.5 shaped: three linear layers then a full one, 2 key heads of 4 read by 4 value heads of 6 (g' =
  // 2), a conv of 4 taps; the full layer's GQA of 2 with RoPE on 2 of its 8 dims. Qwen3-Next shaped: the same
  // with 8 experts of 12, 2 a token, and a gated shared expert of 12.
  const ModelConfig::LinearAttention tiny_linear{2, 4, 4, 6, 4};
  ModelConfig tiny_qwen3_5 = qwen3_5("tiny-qwen3.5", 97, 24, 40, 4, 4, 2, 8, tiny_linear, false);
  tiny_qwen3_5.rope.theta = 10000.0;
  ModelConfig tiny_qwen3_next = qwen3_next_experts(tiny_qwen3_5, 8, 2, 12, 12);
  tiny_qwen3_next.name = "tiny-qwen3-next";
  // Qwen3.5 shaped CPU demo: `small`'s size (V = 32000, d = 256, 4 layers: three linear, one full), 2 key
  // heads read by 4 value heads of 64, the full layer's heads of 64 with RoPE on 16 dims.
  ModelConfig small_qwen3_5 =
      qwen3_5("small-qwen3.5", 32000, 256, 768, 4, 4, 2, 64, {2, 4, 64, 64, 4}, false);
  small_qwen3_5.rope.theta = 1e6;

  // Qwen/Qwen3.5-27B's config.json, its text_config (as public code transcribes it; the Hub is not reachable
  // from here): 248320 tokens, 5120 wide, 17408, 64 layers (three Gated DeltaNet of every four), attention of
  // 24 heads over 4 K/V heads of 256 (RoPE on a quarter, theta 1e7), DeltaNet 16 key heads and 48 value heads
  // of 128, a conv of 4 taps, 262144 positions, untied, eps 1e-6.
  const ModelConfig qwen3_5_27b =
      qwen3_5("qwen3.5-27b", 248320, 5120, 17408, 64, 24, 4, 256, {16, 48, 128, 128, 4}, false);

  // OLMo 3 7B's full layers: YaRN x8 from 8192 positions, attention factor 1.2079 (config.json's
  // rope_scaling); its sliding ones keep plain RoPE.
  ModelConfig olmo3_7b =
      olmo("olmo-3-7b", "Olmo3ForCausalLM", 100278, 4096, 11008, 32, 32, 32, 128, 65536, 4096);
  olmo3_7b.rope.type = RopeType::kYarn;
  olmo3_7b.rope.factor = 8.0;
  olmo3_7b.rope.original_max_positions = 8192;
  olmo3_7b.rope.attention_factor = 1.2079441541679836;

  return {
      tiny,
      small,
      text,
      tiny_gemma,
      small_gemma,
      tiny_moe,
      small_moe,
      tiny_olmo3,
      tiny_smollm3,
      tiny_gpt_oss,
      tiny_deepseek,
      tiny_glm,
      tiny_qwen3_5,
      tiny_qwen3_next,
      small_qwen3_5,
      qwen3_5_27b,
      qwen3("qwen3-0.6b", 1024, 3072, 28, 16, true),
      qwen3("qwen3-1.7b", 2048, 6144, 28, 16, true),
      qwen3("qwen3-4b", 2560, 9728, 36, 32, true),
      qwen3("qwen3-8b", 4096, 12288, 36, 32, false),
      qwen3("qwen3-14b", 5120, 17408, 40, 40, false),
      qwen3("qwen3-32b", 5120, 25600, 64, 64, false),
      llama3("llama3.1-8b", 4096, 14336, 32, 128, false, 8.0),
      llama3("llama3.2-1b", 2048, 8192, 16, 64, true, 32.0),
      gemma3("gemma3-1b", 262144, 1152, 6912, 26, 4, 1, 256, 512, 256.0, 32768, 1.0),
      gemma3("gemma3-4b", 262208, 2560, 10240, 34, 8, 4, 256, 1024, 256.0, 131072, 8.0),
      gemma3("gemma3-12b", 262208, 3840, 15360, 48, 16, 8, 256, 1024, 256.0, 131072, 8.0),
      gemma3("gemma3-27b", 262208, 5376, 21504, 62, 32, 16, 128, 1024, 168.0, 131072, 8.0),
      // Mistral-7B-v0.3 (no window; v0.1's was 4096) and Phi-3-mini-4k (a window of 2047 keys).
      llama_like("mistral-7b", "MistralForCausalLM", 32768, 4096, 14336, 32, 32, 8, 1e6, 32768, 0),
      llama_like("phi3-mini", "Phi3ForCausalLM", 32064, 3072, 8192, 32, 32, 32, 10000.0, 4096, 2047),
      qwen3_moe("qwen3-30b-a3b", 2048, 6144, 48, 32, 4, 128, 8, 768),
      qwen3_moe("qwen3-235b-a22b", 4096, 12288, 94, 64, 4, 128, 8, 1536),
      // allenai/OLMo-2-1124-7B's config.json: 100352 tokens, 4096 wide, 11008, 32 layers of 32 heads, 4096
      // positions. allenai/Olmo-3-1025-7B's: 100278 tokens, the same shape, 65536 positions, window 4096.
      olmo("olmo-2-7b", "Olmo2ForCausalLM", 100352, 4096, 11008, 32, 32, 32, 128, 4096, 0),
      olmo3_7b,
      // HuggingFaceTB/SmolLM3-3B's config.json: 128256 tokens, 2048 wide, 11008, 36 layers of 16 heads (4 K/V
      // heads), RoPE theta 5M over 65536 positions, no RoPE on every fourth layer, tied.
      smollm3("smollm3-3b", 128256, 2048, 11008, 36, 16, 4, 5e6, 65536),
      gpt_oss("gpt-oss-20b", 201088, 2880, 2880, 24, 64, 8, 64, 32, 4, 128),
      gpt_oss("gpt-oss-120b", 201088, 2880, 2880, 36, 64, 8, 64, 128, 4, 128),
      // deepseek-ai/DeepSeek-V3's config.json: 129280 tokens, 7168 wide, dense layers of 18432 (the first 3),
      // 61 layers of 128 heads, q latent 1536, 256 experts of 2048 (8 a token, 8 groups of which 4 chosen,
      // sigmoid scores renormalised, x2.5) and one shared; YaRN mscale and mscale_all_dim 1.0.
      deepseek_v3_routing(deepseek("deepseek-v3", "DeepseekV3ForCausalLM", 129280, 7168, 18432, 61, 128, 1536,
                                   256, 8, 2048, 1, 3, 1.0)),
      // deepseek-ai/DeepSeek-V2-Lite's: 102400 tokens, 2048 wide, dense layer 0 of 10944, 27 layers of 16
      // heads, no q latent, 64 experts of 1408 (6 a token, greedy softmax, not renormalised, x1.0) and two
      // shared; YaRN mscale and mscale_all_dim 0.707.
      deepseek("deepseek-v2-lite", "DeepseekV2ForCausalLM", 102400, 2048, 10944, 27, 16, 0, 64, 6, 1408, 2, 1,
               0.707),
      // zai-org/GLM-4.5-Air's config.json: 151552 tokens, 4096 wide, dense layer 0 of 10944, 46 layers of 96
      // heads (8 K/V heads of 128, RoPE on 64 of their dims, theta 1M), 128 experts of 1408 (8 a token) and
      // one shared.
      glm4_moe("glm-4.5-air", 151552, 4096, 10944, 46, 96, 8, 128, 128, 8, 1408, 131072),
      with_experts(llama_like("mixtral-8x7b", "", 32000, 4096, 14336, 32, 32, 8, 1e6, 32768, 0),
                   "MixtralForCausalLM", 8, 2, 14336),
  };
}

}  // namespace

const std::vector<ModelConfig>& model_presets() {
  static const std::vector<ModelConfig> presets = build_presets();
  return presets;
}

std::string model_preset_names() {
  std::string names;
  for (const auto& p : model_presets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

ModelConfig find_model_preset(const std::string& name) {
  for (const auto& p : model_presets())
    if (p.name == name) return p;
  throw std::invalid_argument(fmt::format("unknown model '{}' (valid: {}, or a Hugging Face model directory)",
                                          name, model_preset_names()));
}

}  // namespace bpbench
