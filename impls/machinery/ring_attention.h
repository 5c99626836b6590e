// ring_attention.h: context parallelism's attention (torchtitan's context_parallel, Megatron's CP) over P
// ranks in a ring, on the load-balanced layout the ring strategies run on. Legend: model_config.h, plus
//   P   ranks      b = ceil(T / 2P) rows of a block      T' = 2 P b   the padded sequence
//
// Layout ("zigzag"). The sequence is 2P blocks of b rows; rank r holds blocks r and 2P-1-r, its 2b rows in
// that order. Under a causal mask a late block costs more than an early one; each rank holding one of each
// evens the work out (rank r's query blocks see r + 1 and 2P - r key blocks: 2P + 1 in all, on every rank).
// T not a multiple of 2P is padded at its end, as shard_batch pads (sequence_parallel.h): padded keys come
// after every real query, which the causal mask hides them from, and padded queries get a zero gradient.
//
// Forward. The rank's queries attend to its own K/V, then P - 1 times the K/V pair moves one hop round the
// ring (send_recv to rank r+1, from rank r-1): at step s the rank holds the pair of rank (r - s) mod P.
// Query block a against key block j: j < a every key visible, j = a causal, j > a nothing (not computed).
// The pairs' partial outputs merge by logsumexp (harness/model/attention_partial.h) into o and lse.
//
// Backward. The same walk with the merged o and lse: dQ accumulates on the rank; each K/V pair travels with
// an accumulator of its dK, dV, which every rank it visits adds its pairs' share into. After P steps the
// accumulator of rank r's pair has visited every rank and sits one hop short of r: one more send_recv
// returns it. Exchanges a layer: forward P - 1 (K/V), backward P - 1 (K/V) and P (dK/dV).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <string>

#include "harness/model/flop_count.h"
#include "harness/model/model.h"
#include "harness/objectives/batch.h"
#include "impls/machinery/comm.h"

namespace bpbench::dist {

struct ZigzagLayout {
  int64_t ranks = 1, rank = 0;
  int64_t seq_len = 0;  // T, the real tokens of a sequence
  int64_t block = 0;    // b = ceil(T / 2P)

  int64_t padded() const { return 2 * ranks * block; }  // T'
  int64_t rows() const { return 2 * block; }            // the rank's rows
  // The global block index of the rank's local block i (0 or 1), and its first position.
  int64_t block_index(int64_t i) const { return i == 0 ? rank : 2 * ranks - 1 - rank; }
  int64_t first_position(int64_t i) const { return block_index(i) * block; }
};

ZigzagLayout zigzag_layout(int64_t seq_len, int64_t ranks, int64_t rank);

// Rank `layout.rank`'s rows of a (N, T, ...) per-position tensor (its two blocks, in order), the positions
// past T filled with `pad`; and the inverse on whole sequences: every rank's rows back in position order,
// (N, T', ...) from the P ranks' (N, 2b, ...) parts in rank order (tests and the gathered reference).
torch::Tensor zigzag_rows(const torch::Tensor& whole, const ZigzagLayout& layout, double pad);
// The same for any two ranges of `rows` positions each, from `first` and `second` (the 2-D mesh's U-th of
// each block: mesh_attention.h).
torch::Tensor two_ranges_rows(const torch::Tensor& whole, int64_t first, int64_t second, int64_t rows,
                              double pad);

// Causal attention of the rank's queries over the whole sequence's keys, round the ring: q (N, Hq, 2b, hd),
// k and v (N, Hkv, 2b, hd), the rank's rows in zigzag order -> (N, Hq, 2b, hd). Differentiable in q, k and v;
// its forward and backward exchange K/V (and dK/dV) with the ring neighbours on `comm`, counted as send_recv
// calls named after `what`. Every rank of `comm` calls it with the same shapes. Each pair of blocks runs
// whole (tile 0: ring), or in tiles of at most `tile` queries by `tile` keys (streambp-ring: a kernel's
// buffers then grow with the tile, not with b). Under a sliding `window` (> 0: a query sees its last
// `window` keys) the pieces outside every window are not run, and where some step's pair is needed by no
// rank the pairs go straight to the ranks that need them instead of round the ring (each needed step s: one
// send_recv forward, two backward, against P - 1 and 2P - 1 round the ring): no send that cannot matter.
// sink_logits (Hq), gpt-oss's attention sinks of q's heads: merged into each row once all its pieces are
// (harness/model/attention_sinks.h); their gradient is the rank's rows' share, summed over the ranks with
// the other parameters' gradients. Undefined: none.
torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             double scale, const ZigzagLayout& layout, Communicator& comm,
                             const std::string& what, int64_t tile = 0, int64_t window = 0,
                             const torch::Tensor& sink_logits = {});

// The (query, key) pairs per (sequence, query head) of one rank's ring attention, as it counts them
// (flop_count.h): its two diagonal blocks (causal, executed as the pair's kernel runs one, or its `tile`
// tiles: the fused kernels skip the masked half of a causal call, the math form does not) and the 2P - 1
// key blocks before its query blocks (all keys), b x b each; under a window only the pieces it runs, a
// banded piece executed whole (its mask skips nothing). Every kernel scores a pair again in its backward.
AttentionPairs ring_attention_pairs(const ZigzagLayout& layout, const torch::Device& device,
                                    at::ScalarType dtype, int64_t head_dim, int64_t tile = 0,
                                    int64_t window = 0);

// The sends of one ring_attention call on a rank, as its schedule picks them under `window` (0: none):
// the forward's K/V pairs, and its backward's K/V pairs and dK/dV accumulators. Round the ring P - 1, then
// P - 1 and P (the last one home); where a window leaves steps that no rank needs, 1, 1 and 1 per needed
// step. The collective estimate's (harness/estimate/estimate_comm.h).
struct RingSends {
  int64_t forward = 0, backward_pairs = 0, backward_grads = 0;
};
RingSends ring_sends(const ZigzagLayout& layout, int64_t window = 0);

// Rank `rank`'s zigzag rows of `global` (whole sequences of T tokens), as shard_batch slices them for
// Ulysses: each per-position tensor's two blocks (past T: token 0, ignored targets, zero log-probs), the
// per-sequence tensors whole, loss_tokens its own rows' targets, whole_seq_len T. first_position stays 0: the
// rows are not one range (the layout says where each block starts).
Batch zigzag_batch(const Batch& global, int64_t rank, int64_t ranks);
// The same for any two ranges of `rows` positions each (two_ranges_rows; the 2-D mesh's: ring_layer.h).
Batch two_ranges_batch(const Batch& global, int64_t first, int64_t second, int64_t rows);

}  // namespace bpbench::dist
