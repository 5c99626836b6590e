// linear_memory_terms.cpp: linear_memory_terms.h (Note [Gated DeltaNet buffers]).
#include "harness/model/linear_memory_terms.h"

#include <utility>
#include <vector>

namespace bpbench {

namespace {
// The widest weight gradient a linear block's backward makes before adding it into .grad: in_qkv's C x d
// or out_proj's d x Hv dv.
int64_t widest_weight_gradient(const MemoryTerms& D) {
  return D.full ? std::max(D.la_C, D.la_Hv * D.la_dv) * D.d * D.s : 0;
}

// The gated RMSNorm's graph a row: o, its rsqrt, the normed o (when its weight is trained), z (s, or its
// cast in f), silu(z), the weighted norm and out_proj's input.
int64_t gated_norm_row(const MemoryTerms& D) {
  const int64_t s = D.s, f = D.f, dv = D.la_dv;
  return D.la_Hv * (dv * f + f + (D.full ? dv * s : 0) + dv * (D.up ? f : s) + dv * f + 2 * dv * s);
}

// One delta-rule chunk of n rows: its (n, dk) and (n, dv) products, decays, (n, n) matrices and masks
// (Note [Gated DeltaNet buffers]).
int64_t delta_chunk_graph(const MemoryTerms& D, int64_t n) {
  const int64_t N = D.N, Hv = D.la_Hv, f = D.f, dk = D.la_dk;
  const int64_t copies = N > 1 ? 3 * N * Hv * n * dk * f : 0;  // bmm's copies of three (n, dk) operands
  return N * Hv * f * (n * (6 * dk + 2 * D.la_dv) + 3 * n + 6 * n * n + 1) + 4 * n * n + copies;
}
}  // namespace

int64_t linear_chunk_graph(const MemoryTerms& D, int64_t rows) {
  const int64_t s = D.s, f = D.f, N = D.N, R = N * rows;
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
    b += delta_chunk_graph(D, n);
    ++chunks;
  });
  b += (chunks - 1) * N * Hv * dk * dv * f;  // the states between the chunks
  b += R * gated_norm_row(D);
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
  return std::max(rule, widest_weight_gradient(D));
}

int64_t linear_whole_graph(const MemoryTerms& D, int64_t rows) {
  const int64_t first = std::min(kDeltaRuleChunk, rows),
                last = rows - (rows - 1) / kDeltaRuleChunk * kDeltaRuleChunk;
  const int64_t no_grad = D.N * D.la_Hv * D.f * (first * D.la_dk + last * (D.la_dk + 1));
  return linear_chunk_graph(D, rows) + linear_state_bytes(D) - no_grad;
}

int64_t linear_whole_backward(const MemoryTerms& D, int64_t rows) {
  const int64_t R = D.N * rows;
  const int64_t input_norm = R * (D.d * D.s + (D.up ? 2 * D.d * D.f : 0));
  const int64_t n = std::min(kDeltaRuleChunk, rows);
  const int64_t rule = D.N * D.la_Hv * D.f * (2 * n * n + n * (D.la_dk + D.la_dv));
  return R * D.d * D.s + std::max({rule, widest_weight_gradient(D), input_norm});
}

int64_t linear_whole_forward(const MemoryTerms& D, int64_t rows) {
  const int64_t s = D.s, f = D.f, R = D.N * rows, Hv = D.la_Hv, dv = D.la_dv, C = D.la_C;
  // The block's locals from the conv to the decay: qkv, SiLU's output when cast, q normed, in_b's and in_a's
  // outputs, in_a's cast, g.
  const int64_t locals =
      C * s + (D.up ? C * s : 0) + Hv * D.la_dk * f + Hv * (2 * s + f) + (D.up ? Hv * f : 0);
  const int64_t leaves = linear_state_bytes(D) + linear_halo_bytes(D);
  // Its last step: the delta rule's output and the gated norm's product before their casts, z; out_proj's
  // output and x1 (with LoRA, out_proj's base output and scaled update beside their sum); the state and halo
  // it leaves.
  const int64_t tail = (D.up ? 2 * Hv * dv * f + Hv * dv * s : 0) + (D.full ? 2 : D.up ? 3 : 4) * D.d * s;
  // The state it leaves keeps its last chunk's k decay and exp(last - G) until the block returns.
  const int64_t nl = rows - (rows - 1) / kDeltaRuleChunk * kDeltaRuleChunk;
  const int64_t final_state_graph = D.N * Hv * f * nl * (D.la_dk + 1);
  const int64_t last_step = linear_whole_graph(D, rows) + R * (locals + tail) + leaves + final_state_graph;
  // In each delta-rule chunk: the graph so far (less the later chunks' and their states, the gated norm's and
  // the adapters' of in_z and out_proj), beside it a head's four (n, n) as the causal mask is read (the
  // decays before their exp, L, the product the mask reads) or, where the head dims are wide, two and the
  // right-hand side's three (n, dk | dv) operands as it is made; the identity and the masks; the outputs of
  // the earlier chunks.
  const int64_t before_rule =
      linear_whole_graph(D, rows) - R * (gated_norm_row(D) + 2 * D.r * s) + R * locals + linear_halo_bytes(D);
  std::vector<std::pair<int64_t, int64_t>> chunks;  // (n, first row)
  for_each_delta_chunk(rows, [&](int64_t n, int64_t s0) { chunks.emplace_back(n, s0); });
  int64_t later = 0, high = last_step;
  for (auto it = chunks.rbegin(); it != chunks.rend(); ++it) {
    const auto [n, s0] = *it;
    const int64_t a_head = std::max(4 * n * n, 2 * n * n + n * (dv + 2 * D.la_dk));
    const int64_t transient = D.N * Hv * f * a_head + n * n * f + 4 * n * n + D.N * s0 * Hv * dv * f;
    high = std::max(high, before_rule - later + transient);
    later += delta_chunk_graph(D, n) + linear_state_bytes(D);
  }
  return high - linear_whole_graph(D, rows);
}

}  // namespace bpbench
