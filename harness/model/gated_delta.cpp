// gated_delta.cpp: the gated delta rule, row by row and in chunks (gated_delta.h).
//
// Note [The gated delta rule in chunks]. In a chunk of rows 0..C-1 entered with S0, let G_i = g_0 + ... + g_i
// (the chunk's cumulative log-decay) and u_j = beta_j (v_j - P_j^T k_j) the update row j writes, P_j being S
// just before it (decayed). Unrolling the recurrence inside the chunk:
//   P_i = e^{G_i} S0 + sum_{j<i} e^{G_i - G_j} k_j u_j^T
//   u_i = beta_i (v_i - e^{G_i} S0^T k_i) - sum_{j<i} beta_i e^{G_i - G_j} (k_i . k_j) u_j
// so (I + L) U = B V - B e^{G} K S0, with L_ij = beta_i e^{G_i - G_j} k_i . k_j below the diagonal (j < i):
// one unit lower-triangular solve, W = (I + L)^{-1}, gives U = W (B V) - W (B e^{G} K) S0 for all rows at
// once. Then, with S_i = P_i + k_i u_i^T,
//   o_i   = e^{G_i} S0^T q_i + sum_{j<=i} e^{G_i - G_j} (q_i . k_j) u_j
//   S_out = e^{G_{C-1}} S0 + sum_j e^{G_{C-1} - G_j} k_j u_j^T.
// This is the WY representation the flash-linear-attention kernels use, written here in LibTorch ops.
#include "harness/model/gated_delta.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "harness/model/flop_count.h"

namespace bpbench {

namespace {

void check_shapes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                  const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& state) {
  if (q.dim() != 4 || k.sizes() != q.sizes() || v.dim() != 4 ||
      v.sizes().slice(0, 3) != q.sizes().slice(0, 3) || g.sizes() != q.sizes().slice(0, 3) ||
      beta.sizes() != g.sizes() ||
      state.sizes() != torch::IntArrayRef({q.size(0), q.size(1), q.size(3), v.size(3)}))
    throw std::invalid_argument(
        "gated delta rule: q, k (N, H, T, dk), v (N, H, T, dv), g and beta (N, H, T) "
        "and the state (N, H, dk, dv) do not agree");
}

}  // namespace

DeltaRuleOutput gated_delta_rule_recurrent(const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v, const torch::Tensor& g,
                                           const torch::Tensor& beta, const torch::Tensor& state,
                                           double scale) {
  check_shapes(q, k, v, g, beta, state);
  torch::Tensor S = state;
  std::vector<torch::Tensor> rows;
  for (int64_t t = 0; t < q.size(2); ++t) {
    const auto kt = k.select(2, t), vt = v.select(2, t);                     // (N, H, dk), (N, H, dv)
    S = S * g.select(2, t).exp().unsqueeze(-1).unsqueeze(-1);                // decay
    const auto remembered = torch::einsum("nhkv,nhk->nhv", {S, kt});         // S^T k
    const auto delta = (vt - remembered) * beta.select(2, t).unsqueeze(-1);  // (N, H, dv)
    S = S + kt.unsqueeze(-1) * delta.unsqueeze(-2);
    rows.push_back(torch::einsum("nhkv,nhk->nhv", {S, q.select(2, t) * scale}));
  }
  return {torch::stack(rows, 2), S};
}

DeltaRuleOutput gated_delta_rule_chunked(const torch::Tensor& q, const torch::Tensor& k,
                                         const torch::Tensor& v, const torch::Tensor& g,
                                         const torch::Tensor& beta, const torch::Tensor& state, double scale,
                                         int64_t chunk) {
  check_shapes(q, k, v, g, beta, state);
  if (chunk < 1) throw std::invalid_argument("gated delta rule: a chunk holds one row at least");
  const int64_t T = q.size(2);
  torch::Tensor S = state;
  std::vector<torch::Tensor> outs;
  for (int64_t s = 0; s < T; s += chunk) {
    const int64_t c = std::min(chunk, T - s);
    const auto qc = q.narrow(2, s, c) * scale, kc = k.narrow(2, s, c), vc = v.narrow(2, s, c);
    const auto bc = beta.narrow(2, s, c).unsqueeze(-1);      // (N, H, c, 1)
    const auto G = g.narrow(2, s, c).cumsum(-1);             // (N, H, c)
    const auto decay = (G.unsqueeze(-1) - G.unsqueeze(-2));  // G_i - G_j, (N, H, c, c)
    const auto eye = torch::eye(c, q.options());
    const auto below = torch::ones({c, c}, q.options().dtype(torch::kBool)).tril(-1);
    const auto causal = torch::ones({c, c}, q.options().dtype(torch::kBool)).tril();
    // L_ij = beta_i e^{G_i - G_j} k_i . k_j for j < i; the exponent is masked before exp, so no e^{+G}
    // overflows.
    const auto L = torch::where(
        below, counted_matmul(bc * kc, kc.transpose(-1, -2)) * decay.masked_fill(~below, 0).exp(),
        torch::zeros({}, q.options()));
    const auto W_rhs = torch::cat({bc * vc, bc * kc * G.exp().unsqueeze(-1)}, -1);  // (N, H, c, dv + dk)
    const auto system = eye + L;
    const auto solved = torch::linalg_solve_triangular(system, W_rhs, /*upper=*/false, /*left=*/true,
                                                       /*unitriangular=*/true);
    count_unit_triangular_solve(system, W_rhs, solved);
    const auto u =
        solved.narrow(-1, 0, v.size(3)) - counted_matmul(solved.narrow(-1, v.size(3), k.size(3)), S);
    const auto inner =
        torch::where(causal, counted_matmul(qc, kc.transpose(-1, -2)) * decay.masked_fill(~causal, 0).exp(),
                     torch::zeros({}, q.options()));
    outs.push_back(counted_matmul(qc * G.exp().unsqueeze(-1), S) + counted_matmul(inner, u));
    const auto last = G.select(-1, c - 1);  // (N, H)
    S = S * last.exp().unsqueeze(-1).unsqueeze(-1) +
        counted_matmul((kc * (last.unsqueeze(-1) - G).exp().unsqueeze(-1)).transpose(-1, -2), u);
  }
  return {torch::cat(outs, 2), S};
}

}  // namespace bpbench
