// model.cpp: parameters, initialisation, LoRA adapters and the attention side of the decoder's forward
// pieces (the MLP and the experts: model_mlp.cpp).
#include "harness/model/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "harness/model/attention_sinks.h"
#include "harness/model/flop_count.h"
#include "harness/model/latent_attention.h"
#include "harness/model/ops.h"
#include "harness/model/rope.h"

namespace bpbench {

torch::Tensor Linear::operator()(const torch::Tensor& x, bool lora_enabled) const {
  auto y = counted_linear(x, weight, bias);
  if (lora_enabled && lora_a.defined())
    y = y + lora_scale * counted_linear(counted_linear(x, lora_a), lora_b);
  return y;
}

namespace {

// Weights are drawn in float32 and cast, so a float32, bfloat16 and float64 model built with one seed are the
// same model up to rounding.
torch::Tensor normal_init(torch::IntArrayRef shape, const torch::TensorOptions& options) {
  return (torch::randn(shape, options.dtype(torch::kFloat)) * 0.02).to(options.dtype());
}

// DeepSeek's router correction bias: float32 as transformers keeps it, float64 in a float64 model.
torch::ScalarType router_correction_dtype(const torch::TensorOptions& options) {
  return options.dtype() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// A norm weight that leaves its input unscaled: 1, or 0 where the norm scales by (1 + w) (Gemma 3).
torch::Tensor identity_norm_init(int64_t n, const ModelConfig& config, const torch::TensorOptions& options) {
  return config.unit_offset_norms ? torch::zeros({n}, options) : torch::ones({n}, options);
}

Linear make_linear(int64_t out, int64_t in, bool bias, const torch::TensorOptions& options) {
  Linear l;
  l.weight = normal_init({out, in}, options);
  if (bias) l.bias = normal_init({out}, options);
  return l;
}

// A Gated DeltaNet layer as transformers initialises one: the conv's taps U(-1/sqrt(K), 1/sqrt(K)) (Conv1d's
// default), A = exp(A_log) from U(0.01, 16), dt_bias 1, the gated norm's weight 1.
void random_linear_attention(LayerWeights& w, const ModelConfig& config, const torch::TensorOptions& opts) {
  const ModelConfig::LinearAttention& la = *config.linear_attention;
  const int64_t d = config.hidden, C = la.conv_channels(), values = la.value_heads * la.value_dim;
  w.in_qkv = make_linear(C, d, false, opts);
  w.in_z = make_linear(values, d, false, opts);
  w.in_b = make_linear(la.value_heads, d, false, opts);
  w.in_a = make_linear(la.value_heads, d, false, opts);
  const double bound = 1.0 / std::sqrt(static_cast<double>(la.conv_kernel));
  w.conv_weight =
      ((torch::rand({C, la.conv_kernel}, opts.dtype(torch::kFloat)) * 2 - 1) * bound).to(opts.dtype());
  w.dt_bias = torch::ones({la.value_heads}, opts);
  w.A_log =
      (torch::rand({la.value_heads}, opts.dtype(torch::kFloat)) * (16 - 0.01) + 0.01).log().to(opts.dtype());
  w.gated_norm = torch::ones({la.value_dim}, opts);
  w.out_proj = make_linear(d, values, false, opts);
}

}  // namespace

Model Model::random(const ModelConfig& config, const torch::TensorOptions& options, uint64_t seed) {
  config.validate();
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  const auto opts = options.requires_grad(false);
  const int64_t d = config.hidden, hd = config.head_dim;
  Model m;
  m.config = config;
  m.embed_weight = normal_init({config.vocab, d}, opts);
  for (int64_t i = 0; i < config.layers; ++i) {
    LayerWeights w;
    if (config.block_input_norms) w.input_norm = identity_norm_init(d, config, opts);
    if (config.is_linear_layer(i)) {
      random_linear_attention(w, config, opts);
    } else if (config.mla) {
      const ModelConfig::Mla& mla = *config.mla;
      const int64_t rq = mla.q_lora_rank, r = mla.kv_lora_rank;
      if (rq > 0) {
        w.q_a = make_linear(rq, d, config.attention_bias, opts);
        w.q_a_norm = identity_norm_init(rq, config, opts);
      }
      w.q = make_linear(config.heads * hd, rq > 0 ? rq : d, false, opts);
      w.kv_a = make_linear(r + mla.qk_rope_head_dim, d, config.attention_bias, opts);
      w.kv_a_norm = identity_norm_init(r, config, opts);
      w.kv_b = make_linear(config.heads * (config.qk_nope_head_dim() + mla.v_head_dim), r, false, opts);
      w.o = make_linear(d, config.heads * mla.v_head_dim, config.output_bias, opts);
    } else {
      w.q = make_linear(config.heads * hd, d, config.attention_bias, opts);
      w.k = make_linear(config.kv_heads * hd, d, config.attention_bias, opts);
      w.v = make_linear(config.kv_heads * hd, d, config.attention_bias, opts);
      w.o = make_linear(d, config.heads * hd, config.output_bias, opts);
      if (config.attention_output_gate) w.output_gate = make_linear(config.heads * hd, d, false, opts);
    }
    if (config.attention_sinks) w.sinks = normal_init({config.heads}, opts);
    if (config.qk_norm && !config.is_linear_layer(i)) {  // per head, or (OLMo) over the whole projection
      w.q_norm = identity_norm_init(config.qk_norm_whole ? config.heads * hd : hd, config, opts);
      w.k_norm = identity_norm_init(config.qk_norm_whole ? config.kv_heads * hd : hd, config, opts);
    }
    if (config.sandwich_norms) {
      w.attn_output_norm = identity_norm_init(d, config, opts);
      w.mlp_output_norm = identity_norm_init(d, config, opts);
    }
    if (config.block_input_norms) w.mlp_norm = identity_norm_init(d, config, opts);
    if (config.is_moe_layer(i)) {
      w.router = normal_init({config.experts, d}, opts);
      if (config.router_bias) w.router_bias = normal_init({config.experts}, opts);
      const bool bias = config.expert_bias;
      for (int64_t e = 0; e < config.experts; ++e) {
        w.expert_gate.push_back(make_linear(config.expert_intermediate, d, bias, opts));
        w.expert_up.push_back(make_linear(config.expert_intermediate, d, bias, opts));
        w.expert_down.push_back(make_linear(d, config.expert_intermediate, bias, opts));
      }
      if (config.routing == ModelConfig::Routing::sigmoid_grouped)
        w.router_correction = torch::zeros({config.experts}, opts.dtype(router_correction_dtype(opts)));
      if (const int64_t Ish = config.shared_expert_intermediate; Ish > 0) {
        w.shared_gate = make_linear(Ish, d, false, opts);
        w.shared_up = make_linear(Ish, d, false, opts);
        w.shared_down = make_linear(d, Ish, false, opts);
        if (config.shared_expert_gate) w.shared_expert_gate = normal_init({1, d}, opts);
      }
    } else {
      w.gate = make_linear(config.intermediate, d, false, opts);
      w.up = make_linear(config.intermediate, d, false, opts);
      w.down = make_linear(d, config.intermediate, false, opts);
    }
    m.layers.push_back(std::move(w));
  }
  m.final_norm_weight = identity_norm_init(d, config, opts);
  m.lm_head_weight = config.tie_embeddings ? m.embed_weight : normal_init({config.vocab, d}, opts);
  m.set_requires_grad(true);
  return m;
}

Model Model::converted(const torch::TensorOptions& options) const {
  torch::NoGradGuard no_grad;
  Model m = *this;  // shares storage; every tensor is replaced below
  m.router_balance = std::make_shared<RouterBalance>(router_balance->coefficient());
  auto convert = [&](torch::Tensor& t) {
    if (t.defined())
      t = t.to(options.requires_grad(false), /*non_blocking=*/false, /*copy=*/true)
              .requires_grad_(t.requires_grad());
  };
  auto convert_linear = [&](Linear& l) {
    for (torch::Tensor* t : {&l.weight, &l.bias, &l.lora_a, &l.lora_b}) convert(*t);
  };
  convert(m.embed_weight);
  for (auto& w : m.layers) {
    for (torch::Tensor* t : w.vectors()) convert(*t);
    if (w.router_correction.defined())
      w.router_correction = w.router_correction.to(options.device(), router_correction_dtype(options),
                                                   /*non_blocking=*/false, /*copy=*/true);
    for (Linear* l : w.linears()) convert_linear(*l);
  }
  convert(m.final_norm_weight);
  if (config.tie_embeddings)
    m.lm_head_weight = m.embed_weight;
  else
    convert(m.lm_head_weight);
  return m;
}

void Model::add_lora(int64_t rank, double alpha, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed + 0x10A);
  const auto opts = embed_weight.options().requires_grad(false);
  for (auto& w : layers) {
    for (Linear* l : w.linears()) {  // every expert's too; never the router
      const int64_t out = l->weight.size(0), in = l->weight.size(1);
      // PEFT's init: A ~ kaiming-uniform(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)), B = 0.
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));
      l->lora_a = (torch::rand({rank, in}, opts.dtype(torch::kFloat)) * 2 * bound - bound).to(opts.dtype());
      l->lora_b = torch::zeros({out, rank}, opts);
      l->lora_scale = alpha / static_cast<double>(rank);
    }
  }
  set_requires_grad(false);
}

// ---- forward pieces ---------------------------------------------------------------------------------------

double Model::embedding_scale() const {
  if (!config.scale_embeddings) return 1.0;
  const double scale = std::sqrt(static_cast<double>(config.hidden));
  if (dtype() == torch::kDouble) return scale;
  // transformers keeps the factor as a float32 buffer and casts it to the weights' dtype before multiplying.
  return torch::scalar_tensor(static_cast<float>(scale), torch::kFloat).to(dtype()).item<double>();
}

torch::Tensor Model::embed(const torch::Tensor& ids) const {
  auto x = torch::embedding(embed_weight, ids);
  return config.scale_embeddings ? x * embedding_scale() : x;
}

torch::Tensor Model::norm(const torch::Tensor& x, const torch::Tensor& weight) const {
  if (config.unit_offset_norms) return unit_offset_rms_norm(x, weight, config.rms_eps);
  if (config.norms_scale_before_cast) return rms_norm_scaled_before_cast(x, weight, config.rms_eps);
  return rms_norm(x, weight, config.rms_eps, norm_kernel);
}

torch::Tensor Model::attn_norm(int64_t i, const torch::Tensor& x) const {
  const auto& weight = layers[i].input_norm;
  // OLMo: the layer's input itself; a strided chunk of rows made contiguous once, not by each projection.
  return weight.defined() ? norm(x, weight) : x.contiguous();
}

namespace {
// (N, rows, H*hd) -> (N, H, rows, hd)
torch::Tensor split_heads(const torch::Tensor& x, int64_t heads, int64_t hd) {
  return x.view({x.size(0), x.size(1), heads, hd}).transpose(1, 2);
}
}  // namespace

KV Model::project_kv(int64_t i, const torch::Tensor& h) const {
  return project_kv(i, h, 0, h.size(1));
}

KV Model::project_kv(int64_t i, const torch::Tensor& h_rows, int64_t pos0, int64_t seq_len) const {
  return project_kv(i, h_rows, {{h_rows.size(1), pos0}}, seq_len);
}

namespace {

// (N, H, rows, a) and (N, H, rows, b) -> (N, H, rows, a + b) laid out as split_heads lays a projection out
// (rows, then heads), as a RoPE output over whole heads is: the attention's output then has that layout too,
// and its (N, rows, H*hd) form for o_proj is a view, not a copy kept by o_proj (a plain cat's (N, H, rows, .)
// layout costs one more q-sized tensor a row in the graph).
torch::Tensor heads_cat(const torch::Tensor& a, const torch::Tensor& b) {
  return torch::cat({a.transpose(1, 2), b.transpose(1, 2)}, 3).transpose(1, 2);
}

// RoPE on x (N, H, rows, hd) block by block, each at its own positions; one block is RoPE itself (no copy).
// A layer without RoPE (SmolLM3's) takes x as it is.
torch::Tensor rope_blocks(const torch::Tensor& x, const std::vector<Model::PositionBlock>& blocks,
                          int64_t seq_len, const ModelConfig& config, int64_t layer) {
  if (!config.has_rope(layer)) return x;
  if (!config.mla && config.rope_head_dim() < x.size(3)) {  // GLM-4.5's partial RoPE: the first dims only
    const int64_t rotated = config.rope_head_dim();
    return heads_cat(rope_blocks(x.narrow(3, 0, rotated), blocks, seq_len, config, layer),
                     x.narrow(3, rotated, x.size(3) - rotated));
  }
  const RopeConfig& rope = config.rope_of(layer);
  if (blocks.size() == 1) return apply_rope(x, blocks[0].pos0, seq_len, rope);
  std::vector<torch::Tensor> parts;
  int64_t row = 0;
  for (const auto& b : blocks) {
    parts.push_back(apply_rope(x.narrow(2, row, b.rows), b.pos0, seq_len, rope));
    row += b.rows;
  }
  TORCH_CHECK(row == x.size(2), "rope blocks: ", row, " rows for ", x.size(2));
  return torch::cat(parts, 2);
}

// h's projection (N, rows, H*hd) split into H heads (N, H, rows, hd), normed per head (Qwen3), over the whole
// projection before the split (OLMo), or not at all.
torch::Tensor normed_heads(const Model& m, const Linear& projection, const torch::Tensor& norm_weight,
                           int64_t heads, const torch::Tensor& h) {
  auto y = projection(h, m.lora_enabled);
  if (m.config.qk_norm_whole) return split_heads(m.norm(y, norm_weight), heads, m.config.head_dim);
  y = split_heads(y, heads, m.config.head_dim);
  return norm_weight.defined() ? m.norm(y, norm_weight) : y;
}

}  // namespace

// Note [MLA in the expanded form]
// Multi-head latent attention (DeepseekV3Attention) as transformers trains it: every head's K and V are
// made from the latent before the attention, and the kernels see a standard attention of Hq heads:
//   q      = q_b(norm(q_a(h))) or q_proj(h)          (N, Hq, c, hd), hd = dn + dr; RoPE on its last dr
//   latent, k_rot = split(kv_a(h))                  (N, c, r), (N, c, dr); the latent normed, k_rot RoPE'd
//   k_nope, v = split(kv_b(latent))                 (N, Hq, c, dn), (N, Hq, c, dv)
//   K      = cat(k_nope, k_rot on every head)       (N, Hq, c, hd)
//   V      = v with hd - dv zero columns            (N, Hq, c, hd)
// The values are carried at hd, zero-padded, so that every kernel (the CPU one takes one head size for q,
// k and v, as flash does), the ring and Ulysses run MLA unchanged: the zero columns give zero outputs, which
// attention_output drops before o_proj, and the gradient of the padding is dropped with them, so the
// result is exact. The cost is (hd - dv) / dv more bytes of V (none where dv = hd: GLM-4.7-Flash), counted
// by the estimate. Interleaved RoPE (DeepSeek's pairs (x0, x1), (x2, x3), ...) is RoPE on the dims
// de-interleaved (evens, then odds), as transformers computes it; q and k permuted alike leave the scores
// as they are. DeepSeek's latent norms keep RMSNorm's default eps (1e-6), not rms_norm_eps.
namespace {
constexpr double kMlaLatentNormEps = 1e-6;

// (.., dr) interleaved pairs -> evens then odds (a copy; its backward the inverse permutation).
torch::Tensor deinterleaved(const torch::Tensor& x) {
  return x.unflatten(-1, {x.size(-1) / 2, 2}).transpose(-1, -2).flatten(-2);
}

// q's or k's RoPE dims (N, H, rows, dr) rotated at their blocks' positions.
torch::Tensor mla_rope(const torch::Tensor& x, const std::vector<Model::PositionBlock>& blocks,
                       int64_t seq_len, const ModelConfig& config, int64_t layer) {
  return rope_blocks(config.mla->rope_interleave ? deinterleaved(x) : x, blocks, seq_len, config, layer);
}
}  // namespace

namespace {
MlaLatent latent_of(const Model& m, int64_t i, const torch::Tensor& h,
                    const std::vector<Model::PositionBlock>& blocks, int64_t seq_len) {
  const auto& w = m.layers[i];
  const ModelConfig::Mla& mla = *m.config.mla;
  const int64_t r = mla.kv_lora_rank, dr = mla.qk_rope_head_dim;
  const auto compressed = w.kv_a(h, m.lora_enabled);  // (N, rows, r + dr)
  auto latent = rms_norm(compressed.narrow(-1, 0, r), w.kv_a_norm, kMlaLatentNormEps, m.norm_kernel);
  auto k_rot = mla_rope(compressed.narrow(-1, r, dr).unsqueeze(1), blocks, seq_len, m.config, i).squeeze(1);
  return {latent, k_rot};
}
}  // namespace

KV expand_mla_latent(const Linear& kv_b, bool lora_enabled, const MlaLatent& rows, int64_t heads,
                     int64_t nope_dim, int64_t value_dim, int64_t head_dim) {
  const int64_t N = rows.latent.size(0), n = rows.latent.size(1), dr = rows.k_rot.size(-1);
  const auto kv =
      split_heads(kv_b(rows.latent, lora_enabled), heads, nope_dim + value_dim);  // (N, Hq, n, dn + dv)
  auto k = torch::cat({kv.narrow(-1, 0, nope_dim), rows.k_rot.unsqueeze(1).expand({N, heads, n, dr})},
                      -1);  // (N, Hq, n, hd)
  auto v = kv.narrow(-1, nope_dim, value_dim);
  v = value_dim < head_dim ? torch::constant_pad_nd(v, {0, head_dim - value_dim}) : v.contiguous();
  return {k, v};
}

MlaLatent Model::project_latent(int64_t i, const torch::Tensor& h, int64_t pos0, int64_t seq_len) const {
  return latent_of(*this, i, h, {{h.size(1), pos0}}, seq_len);
}

KV Model::expand_latent(int64_t i, const MlaLatent& rows) const {
  return expand_mla_latent(layers[i].kv_b, lora_enabled, rows, config.heads, config.qk_nope_head_dim(),
                           config.value_head_dim(), config.head_dim);
}

KV Model::mla_project_kv(int64_t i, const torch::Tensor& h, const std::vector<PositionBlock>& blocks,
                         int64_t seq_len) const {
  return expand_latent(i, latent_of(*this, i, h, blocks, seq_len));
}

torch::Tensor Model::mla_project_q(int64_t i, const torch::Tensor& h,
                                   const std::vector<PositionBlock>& blocks, int64_t seq_len) const {
  const auto& w = layers[i];
  const int64_t dr = config.mla->qk_rope_head_dim, dn = config.qk_nope_head_dim();
  torch::Tensor q;  // (N, Hq, rows, hd)
  if (w.q_a.weight.defined()) {
    const auto latent = rms_norm(w.q_a(h, lora_enabled), w.q_a_norm, kMlaLatentNormEps, norm_kernel);
    q = split_heads(w.q(latent, lora_enabled), config.heads, config.head_dim);
  } else {
    q = split_heads(w.q(h, lora_enabled), config.heads, config.head_dim);
  }
  return heads_cat(q.narrow(-1, 0, dn), mla_rope(q.narrow(-1, dn, dr), blocks, seq_len, config, i));
}

KV Model::project_kv(int64_t i, const torch::Tensor& h, const std::vector<PositionBlock>& blocks,
                     int64_t seq_len) const {
  if (config.mla) return mla_project_kv(i, h, blocks, seq_len);
  const auto& w = layers[i];
  auto k = normed_heads(*this, w.k, w.k_norm, config.kv_heads, h);  // (N, Hkv, rows, hd)
  k = rope_blocks(k, blocks, seq_len, config, i);  // the unrotated keys released before v is made
  auto v = split_heads(w.v(h, lora_enabled), config.kv_heads, config.head_dim);  // (N, Hkv, rows, hd)
  return {k, v};
}

namespace {
// Two per-row tensors of all T rows of x as values, into `first` and `second` (rows along `dim`), made `rows`
// rows at a time by make(s, c) -> {first's rows, second's}: no T-row temporaries.
template <class Make>
void fill_in_chunks(int64_t T, int64_t rows, int64_t dim, const torch::Tensor& first,
                    const torch::Tensor& second, Make&& make) {
  for (int64_t s = 0; s < T; s += rows) {
    const int64_t c = std::min(rows, T - s);
    const auto [a, b] = make(s, c);
    first.narrow(dim, s, c).copy_(a);
    second.narrow(dim, s, c).copy_(b);
  }
}
}  // namespace

KV Model::kv_values(int64_t i, const torch::Tensor& x, int64_t rows) const {
  torch::NoGradGuard no_grad;
  const int64_t T = x.size(1);
  auto k = torch::empty({x.size(0), config.kv_heads, T, config.head_dim}, x.options());
  auto v = torch::empty_like(k);
  fill_in_chunks(T, rows, 2, k, v, [&](int64_t s, int64_t c) {
    const KV part = project_kv(i, attn_norm(i, x.narrow(1, s, c)), s, T);
    return std::pair{part.k, part.v};
  });
  return {k, v};
}

MlaLatent Model::latent_values(int64_t i, const torch::Tensor& x, int64_t rows) const {
  torch::NoGradGuard no_grad;
  const ModelConfig::Mla& mla = *config.mla;
  const int64_t N = x.size(0), T = x.size(1);
  MlaLatent all{torch::empty({N, T, mla.kv_lora_rank}, x.options()),
                torch::empty({N, T, mla.qk_rope_head_dim}, x.options())};
  fill_in_chunks(T, rows, 1, all.latent, all.k_rot, [&](int64_t s, int64_t c) {
    const MlaLatent part = project_latent(i, attn_norm(i, x.narrow(1, s, c)), s, T);
    return std::pair{part.latent, part.k_rot};
  });
  return all;
}

torch::Tensor Model::project_q(int64_t i, const torch::Tensor& h_rows, int64_t pos0, int64_t seq_len) const {
  return project_q(i, h_rows, {{h_rows.size(1), pos0}}, seq_len);
}

torch::Tensor Model::project_q(int64_t i, const torch::Tensor& h, const std::vector<PositionBlock>& blocks,
                               int64_t seq_len) const {
  if (config.mla) return mla_project_q(i, h, blocks, seq_len);
  const auto& w = layers[i];
  const auto q = normed_heads(*this, w.q, w.q_norm, config.heads, h);  // (N, Hq, rows, hd)
  return rope_blocks(q, blocks, seq_len, config, i);
}

torch::Tensor Model::attention_block(int64_t i, const torch::Tensor& x_rows, const torch::Tensor& q,
                                     const KV& kv, const torch::Tensor& gate) const {
  return attention_output(i, x_rows, attention_heads(i, q, kv), gate);
}

torch::Tensor Model::output_gate(int64_t i, const torch::Tensor& h_rows) const {
  const Linear& gate = layers[i].output_gate;
  return gate.weight.defined() ? gate(h_rows, lora_enabled) : torch::Tensor();
}

torch::Tensor Model::attention_heads(int64_t i, const torch::Tensor& q, const KV& kv, int64_t head0) const {
  return causal_attention(q, kv.k, kv.v, config.window_of(i), config.attention_scale(), kv.sink,
                          sink_logits(i, head0, q.size(1)));
}

torch::Tensor Model::sink_logits(int64_t i, int64_t head0, int64_t heads) const {
  return sink_logits_of_heads(layers[i].sinks, head0, heads);
}

torch::Tensor Model::attention_output(int64_t i, const torch::Tensor& x_rows, const torch::Tensor& o,
                                      const torch::Tensor& gate) const {
  const auto& w = layers[i];
  const int64_t hd = config.head_dim, dv = config.value_head_dim();
  // A gated layer's output without its gate would be another network: no caller may leave it out.
  TORCH_CHECK(gate.defined() == w.output_gate.weight.defined(), "layer ", i, "'s attention is ",
              gate.defined() ? "not gated, yet a gate was given" : "gated (Qwen3.5), yet no gate was given");
  // MLA: the values' zero columns dropped (Note [MLA in the expanded form]): (N, c, Hq*hd) -> (N, c, Hq*dv).
  auto values = dv < hd ? o.unflatten(-1, {config.heads, hd}).narrow(-1, 0, dv).flatten(-2) : o;
  if (gate.defined()) values = values * torch::sigmoid(gate);
  auto y = w.o(values, lora_enabled);  // (N, c, d)
  return x_rows + (w.attn_output_norm.defined() ? norm(y, w.attn_output_norm) : y);
}

}  // namespace bpbench
