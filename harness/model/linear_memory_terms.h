// linear_memory_terms.h: what a Gated DeltaNet layer (harness/model/linear_attention.h) keeps alive over a
// piece of `rows` rows, as byte terms on memory_terms.h's MemoryTerms (legend: model_config.h; R = N x rows;
// n the rows of one of the delta rule's chunks of kDeltaRuleChunk = 64, the last one shorter).
//
// Note [Gated DeltaNet buffers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With a graph (full fine-tuning; measured with the tracking allocator to the byte over float32, bfloat16 and
// float64, N = 1 and 2, pieces of 5, 32, 69 and 131 rows, on tiny-qwen3.5 and small-qwen3.5) the block keeps
// per row: the input norm's terms and h (rms(d) + d s); the conv's input, its halo included (N (K - 1 + c) C
// s over the piece) and the conv's output, which SiLU saves (C s); SiLU's output where v is a view of it
// (float32, float64: C s) or else v's float32 copy (Hv dv f); q and k as l2norm reads them, repeated to Hv
// heads or cast (Hv dk f each, where Hv > Hk or the dtype is cast), their rsqrt (Hv f each) and the normed k
// (Hv dk f); beta (Hv s, and Hv f cast); softplus' input and output (2 Hv f). Per head and delta-rule chunk
// of n rows (in f): q scaled and five other (n, dk) products, the solved system (n, dk + dv), u (n, dv),
// three decays e^G (n each), six (n, n) matrices (k k^T and q k^T, their decays, the system, the masked
// scores), the last row's decay, and four (n, n) boolean masks; the states between those chunks (Hv dk dv f
// each); with N > 1 the three (n, dk) operands a batched matmul copies to merge N and Hv. The gated RMSNorm:
// o, its rsqrt, the normed o (when its weight is trained), z (s, or its cast in f), silu(z) (f), the weighted
// norm and out_proj's input (s each). Per layer: two vectors of Hv dv + Hv values in f. Without a graph (a
// no-grad forward, no MLP) the high point is in the delta rule's last chunk, as its masked scores are made:
// the block's locals (h, the conv's input and output, q and k normed, v's and beta's casts, g), the outputs
// of the earlier chunks and the state between them, eight (n, n) matrices a head, the chunk's q, u, G, its
// right-hand side and its solution, the identity and three masks. Measured: to 4 bytes on tiny-qwen3.5; up
// to 4.9% under on small-qwen3.5 at 64 rows a piece (the conv and the projections' own buffers at head dims
// of 64) and 28% under at 32 rows, where the high point is the conv's, not modelled. The backward's
// transients (the delta rule's (n, n) gradients, the weight gradients added into .grad) are bounded, not
// itemised: linear_chunk_backward.
#pragma once

#include <algorithm>
#include <cstdint>

#include "harness/model/linear_attention.h"
#include "harness/model/memory_terms.h"

namespace bpbench {

// The state a piece leaves (N, Hv, dk, dv) in the compute dtype, and the conv's halo (N, K - 1, C) in s.
inline int64_t linear_state_bytes(const MemoryTerms& D) {
  return D.N * D.la_Hv * D.la_dk * D.la_dv * D.f;
}
inline int64_t linear_halo_bytes(const MemoryTerms& D) {
  return D.N * (D.la_K - 1) * D.la_C * D.s;
}

// The delta rule's chunks of a piece of `rows` rows, calling each(n, first row of the chunk).
template <class Each>
void for_each_delta_chunk(int64_t rows, Each each) {
  for (int64_t s0 = 0; s0 < rows; s0 += kDeltaRuleChunk) each(std::min(kDeltaRuleChunk, rows - s0), s0);
}

// Everything the block's graph keeps over `rows` rows besides its input, its outputs (x1, the state and halo
// it leaves) and the state entering: Note [Gated DeltaNet buffers].
int64_t linear_chunk_graph(const MemoryTerms& D, int64_t rows);

// The high point of its no-grad forward over `rows` rows above its input and the state entering, the new
// halo included: Note [Gated DeltaNet buffers].
int64_t linear_chunk_forward(const MemoryTerms& D, int64_t rows);

// Its backward's transients above the graph: the larger of the delta rule's last chunk (the gradients of
// its (n, n) matrices, three a head, and of its (n, dk + dv) rows) and the widest weight gradient made before
// it is added into .grad (in_qkv's C x d or out_proj's d x Hv dv). A bound of what was measured, not an
// inventory: docs/estimate.md, "Hybrid linear attention".
int64_t linear_chunk_backward(const MemoryTerms& D, int64_t rows);

// Note [A Gated DeltaNet block over all rows]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// plain, checkpoint and mst run a linear layer's block over all T rows from the zero state with a graph
// (Model::token_mixer). Measured with the tracking allocator on tiny-qwen3.5 and small-qwen3.5, float32,
// bfloat16 and float64, N = 1 and 2, LoRA or not, T from 5 to 2100:
// - linear_whole_graph: a piece's graph (linear_chunk_graph) with one state more (the zero state entering,
//   which the first matmul keeps), less what the zero state and the discarded final state need no gradient
//   for: the first delta chunk's q e^G (n0 x dk a head) and the last one's k decay and exp(last - G)
//   (nl x (dk + 1)). To the byte at N = 1; at N = 2, 16 bytes over (32 in float64).
// - linear_whole_forward, its forward's high point above that graph: the larger of two moments. At the last
//   step (x1 = x + out_proj(...)) every local of the block is alive: the conv's input qkv (C s) and, cast,
//   SiLU's output (C s); q normed (Hv dk f); in_b's and in_a's outputs, in_a's cast and g (Hv a row each);
//   cast, the delta rule's output and the gated norm's product before their casts (Hv dv f each) and z
//   (Hv dv s); out_proj's output and x1 (d s each; with LoRA its base output and scaled update beside their
//   sum); the state and halo it leaves, and the last chunk's terms the state keeps until the block returns.
//   In a delta-rule chunk: the graph so far, a head's four (n, n) beside it as the causal mask is read (or
//   with wide heads two and the right-hand side's three (n, dk | dv) operands), the identity, the masks and
//   the outputs so far. Of that high point, small-qwen3.5 reads 2.8% under to 0.6% over, tiny-qwen3.5 1.8%
//   under to 9.8% over.
// - linear_whole_backward, its backward above the graph and x1, every .grad pre-allocated: the input's
//   gradient (N T d s) and the largest of the widest weight gradient, the delta rule's gradients of a full
//   chunk (two (n, n) and an (n, dk + dv) a head) and, a row, the input norm's backward (d s, and two float32
//   (N, T, d) in a bfloat16 model). To the byte on small-qwen3.5 at T >= 131; a bound below that and on
//   tiny-qwen3.5, whose d = 24 makes the delta rule's gradients the high point (at most 2.1x there).
// The strategies' peaks on small-qwen3.5 with these terms: within 0.13% (docs/estimate.md).
int64_t linear_whole_graph(const MemoryTerms& D, int64_t rows);
int64_t linear_whole_backward(const MemoryTerms& D, int64_t rows);
int64_t linear_whole_forward(const MemoryTerms& D, int64_t rows);

}  // namespace bpbench
