// sequence_parallel.h: what the sequence-parallel strategies (ulysses.cpp, streambp_ulysses.cpp) share: the
// layout of a sequence over P ranks, a rank's slice of a batch, the all-to-all that turns sequence shards
// into head shards and back (differentiable), and one layer run on a rank's rows. Legend: model_config.h,
// plus
//   P   ranks     Ts  rows of a rank (ceil(T / P))     T' = P Ts   the padded sequence
//   Hq' = Hq / P  query heads of a rank after the exchange      Hk' = max(Hkv, P)  K/V heads as exchanged
//
// Layout (DeepSpeed-Ulysses). Rank r holds rows [r Ts, (r+1) Ts) of every sequence through the whole step:
// embeddings, norms, projections, MLP, LM head and loss run on those rows only. Attention needs every row of
// a head, so around it one all-to-all turns the rank's rows of all heads into all rows of the rank's heads:
//
//   q (N, Hq, Ts, hd), k, v (N, Hkv, Ts, hd)  --all_to_all-->  q (N, Hq', T', hd), k, v (N, Hk'/P, T', hd)
//   attention over all T' rows of the rank's heads            o (N, T', Hq' hd)
//   o (N, Hq', T', hd)                         --all_to_all-->  o (N, Hq, Ts, hd), then o_proj on the rows
//
// q, k and v travel in one all-to-all (packed per destination rank). Rank r attends with query heads
// [r Hq', (r+1) Hq'). Where Hkv < P the K/V heads are repeated to P before the exchange (as DeepSpeed does),
// so each rank receives the one K/V head its query heads read; the repeat's backward sums the copies. Valid
// P: P divides Hq, and P divides Hkv or Hkv divides P (sequence_parallel_refusal says so in one line).
//
// T not divisible by P: the sequence is padded at its end to T' = P Ts with token 0, ignored targets and zero
// extras (shard_batch). Exact: causal attention keeps every real query from the padded keys (they come after
// it), an ignored target puts exactly zero gradient into its row, and a zero row adds exactly zero to every
// weight gradient and to dK, dV. RoPE takes the real T (its dynamic scalings depend on it) and the padded
// rows' positions past it. Padding wastes at most P - 1 rows; refusing such lengths instead would confine
// every length, the longest-length search's included, to multiples of P.
//
// Loss and gradients. Every rank holds all N sequences' slices. SFT and GRPO (linear f): rank r's loss is f
// of its own token sums with the global normalisers, its share; the shares add up. DPO (f not linear): the
// sequence sums S are all-reduced first, every rank computes f(S) and backpropagates f'(S) into its rows.
// Either way every weight gradient is the sum over ranks of each rank's rows' part: reduce-scattered (ZeRO-2)
// as the data-parallel strategies do (dist_common.h), with SUM.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>

#include "harness/model/model.h"
#include "harness/objectives/batch.h"
#include "impls/machinery/comm.h"
#include "impls/machinery/dist_common.h"

namespace bpbench::dist {

struct SequenceLayout {
  int64_t ranks = 1, rank = 0;
  int64_t seq_len = 0;    // T, the real tokens of a sequence
  int64_t rows = 0;       // Ts = ceil(T / P): every rank's rows
  int64_t q_heads = 0;    // Hq' = Hq / P: the rank's query heads in attention
  int64_t kv_heads = 0;   // Hk' / P: the rank's K/V heads in attention
  int64_t kv_repeat = 1;  // Hk' / Hkv: copies of each K/V head exchanged (P / Hkv where Hkv < P)

  int64_t padded() const { return ranks * rows; }          // T'
  int64_t first_row() const { return rank * rows; }        // the position of the rank's first row
  int64_t first_q_head() const { return rank * q_heads; }  // the first of the rank's query heads
};

// Whether P ranks split Hq query and Hkv K/V heads (P divides Hq, and divides Hkv or is a multiple of it),
// and how many copies of each K/V head the exchange sends (P / Hkv where Hkv < P, else 1).
bool heads_split(int64_t heads, int64_t kv_heads, int64_t ranks);
int64_t kv_copies(int64_t kv_heads, int64_t ranks);
// Why `config` cannot be split over P ranks by heads, in one line naming the valid rank counts; nullopt
// when it can.
std::optional<std::string> sequence_parallel_refusal(const ModelConfig& config, int64_t ranks);
// Throws std::invalid_argument with sequence_parallel_refusal's reason.
SequenceLayout sequence_layout(const ModelConfig& config, int64_t seq_len, int64_t ranks, int64_t rank);

// Rank `rank`'s slice of `global` (whole sequences of T tokens) over P ranks: positions [r Ts, (r+1) Ts) of
// every per-position tensor, padded past T (token 0, ignored target, zero log-probs); per-sequence tensors
// whole; loss_tokens its own rows' targets; first_position and whole_seq_len set.
Batch shard_batch(const Batch& global, int64_t rank, int64_t ranks);
// The layout of a slice made by shard_batch, on this communicator.
SequenceLayout layout_of(const ModelConfig& config, const Batch& slice, const Communicator& comm);

// The exchanges (counted as all_to_all calls named `what`), differentiable: each one's backward is the other
// applied to the gradient.
//   seq_to_heads: x (N, H, Ts, hd), the rank's rows of H heads   -> (N, H/P, T', hd), all rows of its heads
//   heads_to_seq: y (N, H/P, T', hd)                              -> (N, H, Ts, hd)
torch::Tensor seq_to_heads(const torch::Tensor& x, Communicator& comm, const std::string& what);
torch::Tensor heads_to_seq(const torch::Tensor& y, Communicator& comm, const std::string& what);

// q (N, Hq, Ts, hd), k, v (N, Hkv, Ts, hd) of the rank's rows -> its heads over every row: q (N, Hq', T',
// hd), k, v (N, Hk'/P, T', hd); one all-to-all (each K/V head sent `kv_repeat` times, kv_copies(Hkv, P), so
// that Hk' = Hkv kv_repeat splits over the P ranks).
struct HeadShards {
  torch::Tensor q, k, v;
  torch::Tensor
      latent;  // MLA where latent_travels: the gathered latent rows K and V came from (N, T', r + dr)
};
HeadShards exchange_qkv(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        int64_t kv_repeat, Communicator& comm, const std::string& what);
// exchange_qkv's way back for gradients, one all-to-all: dQ (N, Hq', T', hd), dK, dV (N, Hk'/P, T', hd) of
// the rank's heads -> dq (N, Hq, Ts, hd), dk, dv (N, Hkv, Ts, hd) of its rows, repeated K/V copies summed.
HeadShards heads_to_rows(const HeadShards& grads, const SequenceLayout& layout, Communicator& comm,
                         const std::string& what);

// The sequence sums S (N) of an objective whose f is not linear (DPO), from every rank's part: all-reduced.
torch::Tensor all_sequence_sums(const torch::Tensor& rank_sums, Communicator& comm);

// Layer i on the rank's rows, differentiable: sequence_parallel_layer (ulysses), ring_layer (ring).
using RowsLayer = DistStep::Layer;
// The layerwise-checkpointed step of a rank's rows, whatever carries its attention across ranks: the no-grad
// forward keeping every layer's input x_i (N, rows, d); the head on the rank's rows with full logits (DPO:
// the sequence sums all-reduced first), reduce-scattered; then each layer again from x_i with grad and its
// backward, reduce-scattered; the embedding's backward. Returns step.finish(loss).
torch::Tensor checkpointed_rows_step(DistStep& step, const StepInputs& in, const RowsLayer& layer);
// The StreamBP step of a rank's rows (streambp-ulysses, streambp-ring): the no-grad forward, each layer by
// `forward_layer` (its values in chunks), keeping x_1..x_{L-1} in the step's checkpoint store (x_0 made again
// from the ids, layerwise.h: FirstInputRecomputed); the head streamed in logits_partition rows (DPO: the
// sequence sums all-reduced first), reduce-scattered; each layer's backward by `layer_backward` (x_i, dY) ->
// dL/dx_i, between the gather and the reduce-scatter of its parameters; the embedding's backward.
using RowsLayerBackward = std::function<torch::Tensor(int64_t, const torch::Tensor&, torch::Tensor)>;
torch::Tensor streamed_rows_step(DistStep& step, const StepInputs& in, const RowsLayer& forward_layer,
                                 const RowsLayerBackward& layer_backward);

// The attention output o (N, T', Hq' hd) of the rank's heads -> (N, Ts, Hq hd) on its rows: one all-to-all.
torch::Tensor attention_to_rows(const torch::Tensor& o, const SequenceLayout& layout, Communicator& comm,
                                const std::string& what);

// Multi-head latent attention: K and V (N, Hq', T', hd) of the rank's query heads from its rows' normed input
// h (N, Ts, d), differentiable. Only the latent and the RoPE key travel, all-gathered: r + dr values a token
// (576 for DeepSeek) where the expanded K and V of the rank's heads would be Hq' x 2 hd (6,144 for
// DeepSeek-V3 on 8 ranks); each rank then expands its heads from all T' rows with its rows of kv_b (the same
// FLOPs as every head of its Ts rows). The backward reduce-scatters the latent rows' gradient, summed over
// the ranks' heads; kv_b's rows of each rank's heads get their gradient on that rank, summed with the others'
// (zero there) by the gradient reduction.
KV latent_keys_of_heads(const Model& m, int64_t i, const torch::Tensor& h, const SequenceLayout& layout,
                        Communicator& comm);
// StreamBP's pieces of the same (streambp_ulysses.cpp; qkv_to_heads gathers the latent rows), values and
// their gradients `rows` rows at a time:
//   latent_heads_values:    K, V of the rank's heads expanded from the gathered latent rows (N, Hq', T', hd)
//   latent_grads_to_rows:   dK, dV of the rank's heads back through the expansion (kv_b's rows of those heads
//                           accumulate their .grad): the latent rows' gradient of all T', reduce-scattered
//                           (summed over the ranks' heads) to the rank's rows             (N, Ts, r + dr)
KV latent_heads_values(const Model& m, int64_t i, const torch::Tensor& latent, const SequenceLayout& layout,
                       int64_t rows);
torch::Tensor latent_grads_to_rows(const Model& m, int64_t i, const torch::Tensor& latent,
                                   const torch::Tensor& dk, const torch::Tensor& dv,
                                   const SequenceLayout& layout, Communicator& comm, int64_t rows);

// Whether the latent is what travels: r + dr values a token fewer than the 2 Hq' hd of the rank's expanded
// K and V (DeepSeek-V3, Hq = 128: up to 85 ranks; DeepSeek-V2-Lite, Hq = 16: up to 10). Else the expanded K
// and V travel, as for every other model.
bool latent_travels(const ModelConfig& c, const SequenceLayout& layout);

// Layer i on the rank's rows x (N, Ts, d) -> (N, Ts, d), differentiable (autograd runs the exchanges
// backwards): norms and projections on the rows, attention of the rank's heads over all T' rows in one call,
// o_proj and the MLP on the rows. DeepSpeed-Ulysses' layer. MLA, where latent_travels: q exchanged, the
// latent gathered (latent_keys_of_heads).
torch::Tensor sequence_parallel_layer(const Model& model, int64_t i, const torch::Tensor& x,
                                      const SequenceLayout& layout, Communicator& comm);

// The same layer as values (no grad), `rows` at a time wherever a piece has rows (StreamBP's forward):
//   qkv_to_heads:    q, k, v of the rows, made `rows` rows at a time into (N, H, Ts, hd) buffers, exchanged
//   attention_rows:  the attention of the rank's heads in blocks of `rows` queries into (N, T', Hq' hd),
//                    exchanged back to the rows: (N, Ts, Hq hd)
//   layer_in_chunks: both, then o_proj, the residual and the MLP `rows` rows at a time into (N, Ts, d)
HeadShards qkv_to_heads(const Model& model, int64_t i, const torch::Tensor& x, const SequenceLayout& layout,
                        Communicator& comm, int64_t rows);
torch::Tensor attention_rows(const Model& model, int64_t i, const HeadShards& heads,
                             const SequenceLayout& layout, Communicator& comm, int64_t rows);
torch::Tensor layer_in_chunks(const Model& model, int64_t i, const torch::Tensor& x,
                              const SequenceLayout& layout, Communicator& comm, int64_t rows);

}  // namespace bpbench::dist
