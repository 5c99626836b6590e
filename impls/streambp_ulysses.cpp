// streambp_ulysses.cpp: StreamBP inside each rank of Ulysses sequence parallelism: the rows of a sequence
// are split over P ranks (sequence_parallel.h), and on each rank the backward streams as StreamBP's does:
// the MLP, the head and the loss in chunks of rows, the attention by blocks of queries against the rank's
// K/V heads with dK, dV accumulated. Layer checkpoints may be offloaded. Gradient buckets: dist_common.h.
//
// Rank r, rows [r Ts, (r+1) Ts) (x: (N, Ts, d); c = partition rows, c_l = logits_partition rows):
//
//   forward (no grad): x_{i+1} = layer_i(x_i) as a. and b. below, then o_proj and the MLP in chunks of c
//                      rows; keep x_1..x_{L-1}
//                      (x_0 = embed(ids) made again for layer 0, layerwise.h: FirstInputRecomputed)
//   head: in chunks of c_l rows (layerwise.h: streamed_head_backward), dx into x_L's rows; DPO: S
//         all-reduced first; reduce_scatter(head)
//   layer i = L-1..0, with dY (N, Ts, d):
//     a. q, k, v of the rows, values, made c rows at a time       (N, Hq, Ts, hd), (N, Hkv, Ts, hd)
//        -all_to_all-> Q, K, V of the rank's heads                 (N, Hq', T', hd), (N, Hk'/P, T', hd)
//     b. O = attention(Q, K, V) in blocks of c queries, values     (N, T', Hq' hd)
//        -all_to_all-> O of the rows                               (N, Ts, Hq hd)
//     c. per chunk of c rows: x1 = x + o_proj(O), y = x1 + mlp(x1), backward with dY: the MLP's and
//        o_proj's weights accumulate; dO rows overwrite O's rows, dx rows (residual paths) dY's rows
//     d. dO -all_to_all-> the rank's heads                         (N, Hq', T', hd)
//     e. per block of c queries, from the last: attention again with grad, backward with its dO rows: dQ
//        rows overwrite Q's, dK, dV accumulate (float32 for a bfloat16 model)
//     f. dQ, dK, dV -all_to_all-> the rows (K/V copies summed)     (N, Hq, Ts, hd), (N, Hkv, Ts, hd)
//     g. per chunk of c rows: the q, k, v path again with its graph, backward with dq, dk, dv: the input
//        norm's and projections' weights accumulate, dx rows add into dY's rows, now dL/dx_i
//     reduce_scatter(layer i)
//   embedding backward; reduce_scatter(embedding)
//
// Multi-head latent attention, where the latent is the smaller to send (sequence_parallel.h, latent_travels):
// a. sends q alone and all-gathers the latent rows (N, T', r + dr), from which the rank's heads' K and V are
// expanded c rows at a time; f. backpropagates dK, dV through that expansion c key rows at a time (kv_b's
// rows of the rank's heads accumulate) into the latent rows' gradient, reduce-scattered to the rank's rows,
// and sends dq alone; g. runs the latent path (kv_a, its norm, RoPE) instead of the k and v projections.
//
// Never on a rank: a tensor of T rows of d or I, or of c x T' scores: everything is Ts rows of the
// sequence, or T' rows of 1/P of the heads. The price: the attention's forward runs three times (the
// forward, b., e.) and the q, k, v projections three times (the forward, a., g.), each once more than
// layerwise checkpointing (flop_schedule below).
// Collectives per step: 6 L all_to_alls (2 L forward, 4 L backward), L + 2 reduce_scatters, 2 all_reduces,
// DPO one more (the sequence sums).
#include <fmt/format.h>

#include "impls/machinery/dist_common.h"
#include "impls/machinery/sequence_parallel.h"
#include "impls/machinery/sequence_parallel_estimate.h"
#include "profiles/memory.h"

namespace bpbench {
namespace {

using dist::Communicator;
using dist::DistStep;
using dist::HeadShards;
using dist::SequenceLayout;
using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;

// a.-g. above for layer i. x_in (N, Ts, d) is the layer's input (a leaf requiring grad unless nothing below
// trains), dy (N, Ts, d) the gradient of its output; returns dx in dy's buffer (undefined without x_in's
// grad).
torch::Tensor layer_backward(const Model& m, int64_t i, const torch::Tensor& x_in, torch::Tensor dy,
                             const SequenceLayout& layout, Communicator& comm, int64_t rows) {
  const auto& cfg = m.config;
  const int64_t N = x_in.size(0), Ts = layout.rows, Tp = layout.padded(), pos0 = layout.first_row();
  const int64_t T = layout.seq_len, hd = cfg.head_dim;
  const bool wants_dx = x_in.requires_grad();
  auto for_chunks = [&](int64_t length, auto&& body) {
    for (int64_t s = 0; s < length; s += rows) body(s, std::min(rows, length - s));
  };

  HeadShards heads;      // a.
  torch::Tensor o_rows;  // b. (N, Ts, Hq hd)
  {
    PhaseScope phase("q, k, v to heads");
    MemoryScope scope(Category::kv);
    heads = dist::qkv_to_heads(m, i, x_in.detach(), layout, comm, rows);
  }
  {
    PhaseScope phase("attention to rows");
    MemoryScope scope(Category::activations);
    o_rows = dist::attention_rows(m, i, heads, layout, comm, rows);
  }
  {  // c.
    PhaseScope phase("mlp chunks");
    MemoryScope scope(Category::activations);
    for_chunks(Ts, [&](int64_t s, int64_t c) {
      auto x_rows = x_in.detach().narrow(1, s, c).requires_grad_(wants_dx);  // (N, c, d)
      auto o = o_rows.narrow(1, s, c).detach().requires_grad_(true);         // (N, c, Hq hd)
      m.mlp_block(i, m.attention_output(i, x_rows, o)).backward(dy.narrow(1, s, c));
      o_rows.narrow(1, s, c).copy_(o.grad());  // O's rows are read by this chunk only
      if (wants_dx) dy.narrow(1, s, c).copy_(x_rows.grad());
    });
  }
  HeadShards grads;  // d., e.
  {
    PhaseScope phase("attention backward");
    MemoryScope scope(Category::kv);
    torch::Tensor d_out;  // (N, Hq', T', hd)
    {
      torch::NoGradGuard no_grad;
      d_out = dist::seq_to_heads(o_rows.view({N, Ts, cfg.heads, hd}).transpose(1, 2), comm,
                                 fmt::format("layer {} attention output (backward)", i));
      o_rows = torch::Tensor();
    }
    // bf16: dK, dV accumulate in float32 over the blocks, as one big matmul would, rounded once.
    const auto acc = heads.k.scalar_type() == torch::kBFloat16 ? torch::kFloat : heads.k.scalar_type();
    auto dk = torch::zeros_like(heads.k, heads.k.options().dtype(acc)), dv = torch::zeros_like(dk);
    const int64_t blocks = (Tp + rows - 1) / rows;
    for (int64_t j = blocks - 1; j >= 0; --j) {
      const int64_t s = j * rows, c = std::min(rows, Tp - s), e = s + c, k0 = cfg.first_visible_key(i, s);
      auto q = heads.q.narrow(2, s, c).detach().requires_grad_(true);  // (N, Hq', c, hd)
      const KV visible{heads.k.narrow(2, k0, e - k0), heads.v.narrow(2, k0, e - k0),
                       KvGradSink{dk.narrow(2, k0, e - k0), dv.narrow(2, k0, e - k0)}};
      m.attention_heads(i, q, visible, layout.first_q_head())
          .backward(d_out.narrow(2, s, c).transpose(1, 2).reshape({N, c, layout.q_heads * hd}));
      heads.q.narrow(2, s, c).copy_(q.grad());  // Q's rows are read by this block only
    }
    grads = {heads.q, dk.to(heads.k.scalar_type()), dv.to(heads.v.scalar_type()), heads.latent};
    heads = HeadShards{};
  }
  HeadShards d_rows;       // f.
  torch::Tensor d_latent;  // MLA where the latent travels: its rows' gradient (N, Ts, r + dr)
  {
    PhaseScope phase("q, k, v gradients to rows");
    MemoryScope scope(Category::kv);
    if (grads.latent.defined()) {
      d_latent = dist::latent_grads_to_rows(m, i, grads.latent, grads.k, grads.v, layout, comm, rows);
      torch::NoGradGuard no_grad;
      d_rows.q = dist::heads_to_seq(grads.q, comm, fmt::format("layer {} q (backward)", i));
    } else {
      torch::NoGradGuard no_grad;
      d_rows = dist::heads_to_rows(grads, layout, comm, fmt::format("layer {} q, k, v (backward)", i));
    }
    grads = HeadShards{};
  }
  {  // g.
    PhaseScope phase("q, k, v chunks");
    MemoryScope scope(Category::kv);
    for_chunks(Ts, [&](int64_t s, int64_t c) {
      auto x_rows = x_in.detach().narrow(1, s, c).requires_grad_(wants_dx);
      auto h = m.attn_norm(i, x_rows);
      if (d_latent.defined()) {  // the latent path of the rows: kv_a, its norm, RoPE
        const MlaLatent latent = m.project_latent(i, h, pos0 + s, T);
        const auto d = d_latent.narrow(1, s, c);
        const int64_t r = latent.latent.size(-1);
        torch::autograd::backward(
            {m.project_q(i, h, pos0 + s, T), latent.latent, latent.k_rot},
            {d_rows.q.narrow(2, s, c), d.narrow(-1, 0, r), d.narrow(-1, r, latent.k_rot.size(-1))});
      } else {
        const KV kv = m.project_kv(i, h, pos0 + s, T);
        torch::autograd::backward(
            {m.project_q(i, h, pos0 + s, T), kv.k, kv.v},
            {d_rows.q.narrow(2, s, c), d_rows.k.narrow(2, s, c), d_rows.v.narrow(2, s, c)});
      }
      if (wants_dx) dy.narrow(1, s, c).add_(x_rows.grad());
    });
  }
  return wants_dx ? dy : torch::Tensor();
}

class StreamBPUlysses final : public dist::DistStrategy {
 public:
  explicit StreamBPUlysses(const dist::DistOptions& options)
      : DistStrategy("streambp-ulysses",
                     "StreamBP inside Ulysses sequence parallelism: rows and heads exchanged by all-to-all, "
                     "MLP, head and attention streamed in `partition` / `logits_partition` rows",
                     options) {}
  bool data_parallel() const override { return false; }
  bool sequence_parallel() const override { return true; }
  // One rank's phases (sequence_parallel_estimate.h); shard_params is not estimated.
  bool estimated() const override { return !options_.shard_params; }
  std::vector<PhaseEstimate> memory_phases(const MemoryTerms& D,
                                           const Partitioning& partition) const override {
    return streambp_ulysses_phases(D, partition);
  }
  // Besides the model's work: the no-grad forward, a.'s q, k, v and b.'s attention once more.
  FlopSchedule flop_schedule() const override {
    FlopSchedule f;
    f.attention_by_partition = true;
    f.recomputes_layers = true;
    f.streams_head = true;
    f.recomputes_kv = true;
    f.recomputes_q = true;
    f.recomputes_attention = true;
    return f;
  }
  CommSchedule comm_schedule() const override { return {CommSchedule::Exchange::ulysses}; }
  bool uses_partition() const override { return true; }
  bool uses_logits_partition() const override { return true; }
  bool uses_offload() const override { return !options_.shard_params; }
  bool keeps_first_input() const override { return false; }

  dist::RowsForward no_grad_layer(DistStep& step, const StepInputs& in) const override {
    return
        [&m = in.model, &comm = step.comm(), rows = in.partition.rows,
         layout = dist::layout_of(in.model.config, step.batch(), step.comm())](
            int64_t i, const torch::Tensor& x) { return dist::layer_in_chunks(m, i, x, layout, comm, rows); };
  }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    DistStep step(*this, in);  // global normalisers: one all_reduce
    const Model& m = in.model;
    auto& comm = step.comm();
    const SequenceLayout layout = dist::layout_of(m.config, step.batch(), comm);
    const int64_t rows = in.partition.rows;
    return dist::streamed_rows_step(
        step, in,
        [&](int64_t i, const torch::Tensor& x) { return dist::layer_in_chunks(m, i, x, layout, comm, rows); },
        [&](int64_t i, const torch::Tensor& x_in, torch::Tensor dy) {
          return layer_backward(m, i, x_in, std::move(dy), layout, comm, rows);
        });
  }
};

}  // namespace

std::unique_ptr<dist::DistStrategy> make_streambp_ulysses(const dist::DistOptions& options) {
  return std::make_unique<StreamBPUlysses>(options);
}

}  // namespace bpbench
