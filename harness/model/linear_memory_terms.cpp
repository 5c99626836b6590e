// linear_memory_terms.cpp: linear_memory_terms.h (Note [Gated DeltaNet buffers]).
#include "harness/model/linear_memory_terms.h"

namespace bpbench {

int64_t linear_chunk_graph(const MemoryTerms& D, int64_t rows) {
  const int64_t s = D.s, f = D.f, N = D.N, R = N * rows, d = D.d;
  const int64_t Hk = D.la_Hk, Hv = D.la_Hv, dk = D.la_dk, dv = D.la_dv, C = D.la_C;
  const bool repeated = Hv > Hk;
  int64_t b = R * D.input_norm_row();                                  // input norm, h
  b += N * (D.la_K - 1 + rows) * C * s + R * C * s;                    // the conv's input and output
  b += D.up ? R * Hv * dv * f : R * C * s;                             // v's cast, or SiLU's output
  b += 2 * (repeated || D.up ? R * Hv * dk * f : 0) + 2 * R * Hv * f;  // q, k as l2norm reads them; rsqrt
  b += R * Hv * dk * f;                                                // k normed
  b += R * Hv * s + (D.up ? R * Hv * f : 0) + 2 * R * Hv * f;          // beta (its cast); softplus
  int64_t chunks = 0;
  for_each_delta_chunk(rows, [&](int64_t n, int64_t) {
    b += N * Hv * f * (n * (6 * dk + 2 * dv) + 3 * n + 6 * n * n + 1) + 4 * n * n;
    if (N > 1) b += 3 * N * Hv * n * dk * f;  // bmm's copies of three (n, dk) operands
    ++chunks;
  });
  b += (chunks - 1) * N * Hv * dk * dv * f;  // the states between the chunks
  b += R * Hv * (dv * f + f + (D.full ? dv * s : 0) + dv * (D.up ? f : s) + dv * f + 2 * dv * s);
  (void)d;
  b += R * 5 * D.r * s;  // LoRA: x A^T of in_qkv, in_z, in_b, in_a, out_proj
  return b + Hv * (dv + 1) * f;
}

int64_t linear_chunk_forward(const MemoryTerms& D, int64_t rows) {
  const int64_t s = D.s, f = D.f, N = D.N, R = N * rows;
  const int64_t Hv = D.la_Hv, dk = D.la_dk, dv = D.la_dv, C = D.la_C;
  const int64_t locals =
      R * (D.d * s + 2 * C * s + 2 * Hv * dk * f + (D.up ? Hv * dv * f : 0) + Hv * (D.up ? f : s) + Hv * f);
  int64_t high = 0;
  for_each_delta_chunk(rows, [&](int64_t n, int64_t s0) {
    const int64_t chunk = N * Hv * f * (8 * n * n + n * (3 * dk + 3 * dv + 1)) + n * n * f + 3 * n * n;
    const int64_t before = N * Hv * s0 * dv * f + (s0 > 0 ? linear_state_bytes(D) : 0);
    high = std::max(high, chunk + before);
  });
  return linear_halo_bytes(D) + locals + high;
}

int64_t linear_chunk_backward(const MemoryTerms& D, int64_t rows) {
  const int64_t f = D.f, n = std::min(kDeltaRuleChunk, rows - (rows - 1) / kDeltaRuleChunk * kDeltaRuleChunk);
  const int64_t rule = D.N * D.la_Hv * f * (3 * n * n + n * (D.la_dk + D.la_dv));
  const int64_t weights = D.full ? std::max(D.la_C, D.la_Hv * D.la_dv) * D.d * D.s : 0;
  return std::max(rule, weights);
}

}  // namespace bpbench
