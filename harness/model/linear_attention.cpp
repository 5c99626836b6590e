// linear_attention.cpp: Model's Gated DeltaNet pieces (linear_attention.h): the block over a piece of rows
// with its state in and out.
#include "harness/model/linear_attention.h"

#include <cmath>

#include "harness/model/causal_conv.h"
#include "harness/model/gated_delta.h"
#include "harness/model/model.h"
#include "harness/model/ops.h"

namespace bpbench {

namespace {

torch::Tensor l2_normed(const torch::Tensor& x) {
  return x * torch::rsqrt((x * x).sum(-1, /*keepdim=*/true) + kL2NormEps);
}

// (N, c, H*D) -> (N, H, c, D), in `dtype`, each head repeated `repeat` times (repeat_interleave: value head j
// reads key head j / repeat).
torch::Tensor heads_of(const torch::Tensor& x, int64_t heads, int64_t dim, int64_t repeat,
                       at::ScalarType dtype) {
  auto y = x.unflatten(-1, {heads, dim});
  if (repeat > 1) y = y.repeat_interleave(repeat, 2);
  return y.transpose(1, 2).to(dtype);
}

// Qwen3_5RMSNormGated over the last dim (dv): o normed in the compute dtype, cast, times w, times silu(z) in
// the compute dtype, cast once more.
torch::Tensor gated_rms_norm(const torch::Tensor& o, const torch::Tensor& z, const torch::Tensor& weight,
                             double eps) {
  const auto dtype = o.scalar_type(), wide = compute_dtype(dtype);
  const auto x = o.to(wide);
  const auto normed = (x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(dtype);
  return (weight * normed * torch::silu(z.to(wide))).to(dtype);
}

}  // namespace

LinearState Model::initial_linear_state(int64_t N) const {
  const ModelConfig::LinearAttention& la = *config.linear_attention;
  const auto options = embed_weight.options().requires_grad(false);
  return {torch::zeros({N, la.value_heads, la.key_dim, la.value_dim}, options.dtype(compute_dtype(dtype()))),
          torch::zeros({N, la.conv_kernel - 1, la.conv_channels()}, options)};
}

LinearBlock Model::linear_attention_block(int64_t i, const torch::Tensor& x_rows,
                                          const LinearState& in) const {
  const auto& w = layers[i];
  const ModelConfig::LinearAttention& la = *config.linear_attention;
  const int64_t c = x_rows.size(1), K = la.conv_kernel, repeat = la.value_heads / la.key_heads;
  const int64_t keys = la.key_heads * la.key_dim;
  const auto wide = compute_dtype(dtype());
  const auto h = attn_norm(i, x_rows);         // (N, c, d)
  const auto qkv = w.in_qkv(h, lora_enabled);  // (N, c, C)
  // The next piece's halo: the conv input's last K - 1 rows, some of them this piece's halo where c < K - 1.
  const auto halo = c >= K - 1 ? qkv.narrow(1, c - (K - 1), K - 1).clone()
                               : torch::cat({in.halo.narrow(1, c, K - 1 - c), qkv}, 1);
  const auto mixed = causal_depthwise_conv_silu(qkv, in.halo, w.conv_weight);  // (N, c, C)
  const auto q = l2_normed(heads_of(mixed.narrow(-1, 0, keys), la.key_heads, la.key_dim, repeat, wide));
  const auto k = l2_normed(heads_of(mixed.narrow(-1, keys, keys), la.key_heads, la.key_dim, repeat, wide));
  const auto v = heads_of(mixed.narrow(-1, 2 * keys, la.value_heads * la.value_dim), la.value_heads,
                          la.value_dim, 1, wide);                                      // (N, Hv, c, dv)
  const auto beta = torch::sigmoid(w.in_b(h, lora_enabled)).to(wide).transpose(1, 2);  // (N, Hv, c)
  const auto g = (-w.A_log.to(wide).exp() * torch::softplus(w.in_a(h, lora_enabled).to(wide) + w.dt_bias))
                     .transpose(1, 2);  // (N, Hv, c)
  const double scale = 1.0 / std::sqrt(static_cast<double>(la.key_dim));
  DeltaRuleOutput rule = gated_delta_rule_chunked(q, k, v, g, beta, in.state, scale, kDeltaRuleChunk);
  const auto o = rule.out.transpose(1, 2).to(dtype());  // (N, c, Hv, dv)
  const auto z = w.in_z(h, lora_enabled).unflatten(-1, {la.value_heads, la.value_dim});
  const auto gated = gated_rms_norm(o, z, w.gated_norm, config.rms_eps).flatten(-2);  // (N, c, Hv*dv)
  return {x_rows + w.out_proj(gated, lora_enabled), {std::move(rule.state), halo}};
}

}  // namespace bpbench
