// streambp_ring.cpp: StreamBP inside each rank of ring context parallelism: the zigzag layout and the
// attention round the ring of ring.cpp (impls/machinery/ring_attention.h; on the 2-D mesh ring_layer.h's),
// and on each rank the backward streamed as StreamBP's: the MLP, the head and the loss in chunks of rows, the
// q, k, v projections in chunks, the attention's graph nothing but the ring's own saved q, k, v, output and
// logsumexp, and the ring itself in passes of one K/V head. Layer checkpoints may be offloaded. Gradient
// buckets: dist_common.h.
//
// Rank r holds blocks r and 2P-1-r of every sequence (b = ceil(T / 2P) rows each, x: (N, 2b, d); c =
// partition rows, never across the two blocks for q, k, v; c_l = logits_partition rows; G = Hkv passes on
// the plain ring, 1 on the mesh, whose Ulysses exchange splits the heads already):
//
//   forward (no grad): x_{i+1} = layer_i(x_i) as a. and b. below (b. in one pass), then o_proj and the MLP in
//                      chunks of c rows; keep x_1..x_{L-1}
//                      (x_0 = embed(ids) made again for layer 0, layerwise.h: FirstInputRecomputed)
//   head: in chunks of c_l rows (layerwise.h: streamed_head_backward), dx into x_L's rows; DPO: S
//         all-reduced first; reduce_scatter(head)
//   layer i = L-1..0, with dY (N, 2b, d):
//     a. q, k, v of the rows, values, made c rows at a time, one tensor a pass g:
//        (N, Hq/G, 2b, hd), (N, Hkv/G, 2b, hd) (RoPE at each chunk's own positions); leaves that take a
//        gradient
//     b. per pass: O_g = attention round the ring (P - 1 send_recvs), with grad, each b x b pair of blocks in
//        c x c tiles: its node saves q_g, k_g, v_g, O_g and the logsumexp, nothing else
//     c. per chunk of c rows: x1 = x + o_proj(O rows), y = x1 + mlp(x1), backward with dY: the MLP's and
//        o_proj's weights accumulate; dO rows into each pass's dO_g, dx rows (residual paths) into dY's
//     d. per pass: the ring's backward with dO_g (P - 1 K/V and P dK/dV send_recvs): dQ, dK, dV of its
//        heads, its q, k, v, O and dO released; what the ring holds beyond them (the travelling pair, its
//        dK/dV accumulator and the copy being received, dQ in the accumulation dtype) is one pass's
//     e. per chunk of c rows: the q, k, v path again with its graph, backward with dq, dk, dv (the passes'
//        rows gathered): the input norm's and projections' weights accumulate, dx rows add into dY's rows,
//        now dL/dx_i
//     reduce_scatter(layer i)
//   embedding backward; reduce_scatter(embedding)
//
// Never on a rank: a tensor of T rows, nor one of the rank's 2b rows of I or V. The price against ring:
// the q, k, v projections run three times (the forward, a., e.), once more than layerwise checkpointing
// (flop_schedule below), and G times the ring's calls in b. and d. for the same bytes. Collectives per step:
// L (P - 1 + G (3P - 2)) send_recvs (fewer on sliding-window layers that need only some steps:
// ring_attention.h); L + 2 reduce_scatters, 2 all_reduces, DPO one more (the sequence sums).
#include <fmt/format.h>

#include <vector>

#include "impls/machinery/ring_estimate.h"
#include "impls/machinery/ring_strategy.h"
#include "impls/machinery/sequence_parallel.h"
#include "profiles/memory.h"

namespace bpbench {
namespace {

using dist::DistStep;
using dist::RingPlace;
using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;

// The ring's passes of a layer: on the plain ring one K/V head at a time (with its Hq / Hkv query heads), so
// that what a pass adds (the travelling pair, the dK/dV accumulator and its received copy, dQ in the
// accumulation dtype) is a head's, not the rank's; on the mesh every head in one pass (its Ulysses exchange
// splits the heads already).
int64_t ring_passes(const ModelConfig& c, const RingPlace& place) {
  return place.layout().ulysses == 1 ? c.kv_heads : 1;
}

// a.-e. above for layer i, the ring's attention (b. and d.) in `ring_passes` head groups g, each its own
// tensors: q_g (N, Hq/G, 2h, hd), k_g and v_g (N, Hkv/G, 2h, hd), O_g and dO_g (N, Hq/G, 2h, hd). x_in
// (N, 2h, d) is the layer's input (a leaf requiring grad unless nothing below trains), dy (N, 2h, d) the
// gradient of its output; returns dx in dy's buffer (undefined without x_in's grad).
torch::Tensor layer_backward(const Model& m, int64_t i, const torch::Tensor& x_in, torch::Tensor dy,
                             const RingPlace& place, int64_t rows) {
  const bool wants_dx = x_in.requires_grad();
  const int64_t R = place.rows(), T = place.seq_len(), G = ring_passes(m.config, place);
  const int64_t N = x_in.size(0), Hq = m.config.heads, hq = Hq / G, hd = m.config.head_dim;
  std::vector<dist::RowsQkv> qkv;  // a.
  {
    PhaseScope phase("q, k, v values");
    MemoryScope scope(Category::kv);
    qkv = dist::ring_qkv_groups_in_chunks(m, i, x_in.detach(), place, rows, G);
    for (auto& group : qkv) {
      group.q.requires_grad_(true);
      group.k.requires_grad_(true);
      group.v.requires_grad_(true);
    }
  }
  std::vector<torch::Tensor> out(G), d_out(G);  // b. O_g (N, Hq/G, 2h, hd)
  {
    MemoryScope scope(Category::kv);
    for (int64_t g = 0; g < G; ++g)
      out[g] = place.attention(qkv[g].q, qkv[g].k, qkv[g].v, m.config.attention_scale(),
                               fmt::format("layer {} attention", i), rows, m.config.window_of(i),
                               m.sink_logits(i, g * hq, hq));
  }
  {  // c.
    PhaseScope phase("mlp chunks");
    MemoryScope scope(Category::activations);
    for (int64_t g = 0; g < G; ++g) d_out[g] = torch::empty_like(out[g]);
    for (int64_t s = 0; s < R; s += rows) {
      const int64_t c = std::min(rows, R - s);
      auto x_rows = x_in.detach().narrow(1, s, c).requires_grad_(wants_dx);  // (N, c, d)
      auto o = torch::empty({N, c, Hq * hd}, x_in.options());                // the rows' O, heads in order
      for (int64_t g = 0; g < G; ++g)
        o.view({N, c, Hq, hd}).narrow(2, g * hq, hq).copy_(out[g].detach().narrow(2, s, c).transpose(1, 2));
      o.requires_grad_(true);
      m.mlp_block(i, m.attention_output(i, x_rows, o)).backward(dy.narrow(1, s, c));
      const auto d_o = o.grad().view({N, c, Hq, hd});
      for (int64_t g = 0; g < G; ++g)
        d_out[g].narrow(2, s, c).copy_(d_o.narrow(2, g * hq, hq).transpose(1, 2));
      if (wants_dx) dy.narrow(1, s, c).copy_(x_rows.grad());
    }
  }
  // d.: the ring's backward ("ring attention backward") pass by pass, each releasing its group's q, k, v,
  // output and dO as its gradients arrive.
  std::vector<torch::Tensor> dq(G), dk(G), dv(G);  // (N, Hq/G or Hkv/G, 2h, hd)
  for (int64_t g = 0; g < G; ++g) {
    MemoryScope scope(Category::kv);
    torch::autograd::backward({out[g]}, {d_out[g]});
    out[g] = d_out[g] = torch::Tensor();
    dq[g] = qkv[g].q.grad();
    dk[g] = qkv[g].k.grad();
    dv[g] = qkv[g].v.grad();
    qkv[g] = dist::RowsQkv{};
  }
  // Rows [s, s + c) of the groups' gradients, heads in order: a view with one group, else a copy.
  auto rows_of = [&](const std::vector<torch::Tensor>& grads, int64_t s, int64_t c) {
    if (G == 1) return grads[0].narrow(2, s, c);
    std::vector<torch::Tensor> parts;
    for (const auto& grad : grads) parts.push_back(grad.narrow(2, s, c));
    return torch::cat(parts, 1);
  };
  {  // e.
    PhaseScope phase("q, k, v chunks");
    MemoryScope scope(Category::kv);
    dist::for_block_chunks(place, rows, [&](int64_t s, int64_t c, int64_t position) {
      auto x_rows = x_in.detach().narrow(1, s, c).requires_grad_(wants_dx);
      auto h = m.attn_norm(i, x_rows);
      const KV kv = m.project_kv(i, h, position, T);
      torch::autograd::backward({m.project_q(i, h, position, T), kv.k, kv.v},
                                {rows_of(dq, s, c), rows_of(dk, s, c), rows_of(dv, s, c)});
      if (wants_dx) dy.narrow(1, s, c).add_(x_rows.grad());
    });
  }
  return wants_dx ? dy : torch::Tensor();
}

class StreamBPRing final : public dist::RingStrategy {
 public:
  explicit StreamBPRing(const dist::DistOptions& options)
      : RingStrategy(
            "streambp-ring",
            "StreamBP inside ring context parallelism: K/V passed round the ranks on a zigzag layout, "
            "MLP, head and projections streamed in `partition` / `logits_partition` rows",
            options) {}
  // Besides the model's work: the no-grad forward, and a.'s q, k, v once more.
  FlopSchedule flop_schedule() const override {
    FlopSchedule f;
    f.attention_by_partition = true;  // the ring's pairs in tiles of `partition`
    f.recomputes_layers = true;
    f.streams_head = true;
    f.recomputes_kv = true;
    f.recomputes_q = true;
    f.ring_attention = true;
    return f;
  }
  // b. and d. in passes of one K/V head (G = Hkv on the plain ring).
  CommSchedule comm_schedule() const override { return {CommSchedule::Exchange::ring, true}; }
  // One rank's phases (ring_estimate.h).
  std::vector<PhaseEstimate> memory_phases(const MemoryTerms& D,
                                           const Partitioning& partition) const override {
    return streambp_ring_phases(D, partition);
  }
  bool uses_partition() const override { return true; }
  bool uses_logits_partition() const override { return true; }
  bool uses_offload() const override { return !options_.shard_params; }
  bool keeps_first_input() const override { return false; }

  dist::RowsForward no_grad_layer(DistStep& step, const StepInputs& in) const override {
    return
        [&m = in.model, rows = in.partition.rows, place = place_of(step)](int64_t i, const torch::Tensor& x) {
          return dist::ring_layer_in_chunks(m, i, x, place, rows);
        };
  }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    DistStep step(*this, in);  // global normalisers: one all_reduce
    const Model& m = in.model;
    const RingPlace place = place_of(step);
    const int64_t rows = in.partition.rows;
    return dist::streamed_rows_step(
        step, in,
        [&](int64_t i, const torch::Tensor& x) { return dist::ring_layer_in_chunks(m, i, x, place, rows); },
        [&](int64_t i, const torch::Tensor& x_in, torch::Tensor dy) {
          return layer_backward(m, i, x_in, std::move(dy), place, rows);
        });
  }
};

}  // namespace

std::unique_ptr<dist::DistStrategy> make_streambp_ring(const dist::DistOptions& options) {
  return std::make_unique<StreamBPRing>(options);
}

}  // namespace bpbench
