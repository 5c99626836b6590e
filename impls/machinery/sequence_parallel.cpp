// sequence_parallel.cpp: layout, batch slices, the differentiable all-to-all exchanges and a layer on a
// rank's rows (see sequence_parallel.h).
#include "impls/machinery/sequence_parallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <utility>

#include "impls/machinery/layerwise.h"
#include "profiles/memory.h"

namespace bpbench::dist {

using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool heads_split(int64_t heads, int64_t kv_heads, int64_t P) {
  return P >= 1 && heads % P == 0 && (kv_heads % P == 0 || P % kv_heads == 0);
}

int64_t kv_copies(int64_t kv_heads, int64_t P) {
  return kv_heads >= P ? 1 : P / kv_heads;
}

std::optional<std::string> sequence_parallel_refusal(const ModelConfig& c, int64_t P) {
  if (P < 1) return fmt::format("sequence parallelism needs at least 1 rank, got {}", P);
  if (heads_split(c.heads, c.kv_heads, P)) return std::nullopt;
  std::vector<int64_t> valid;
  for (int64_t r = 1; r <= c.heads; ++r)
    if (heads_split(c.heads, c.kv_heads, r)) valid.push_back(r);
  return fmt::format(
      "{} ranks cannot split {}'s attention by heads ({} query heads, {} K/V heads: the ranks must divide "
      "the query heads, and divide the K/V heads or be a multiple of them); valid rank counts: {}",
      P, c.name, c.heads, c.kv_heads, fmt::join(valid, ", "));
}

SequenceLayout sequence_layout(const ModelConfig& c, int64_t T, int64_t P, int64_t rank) {
  if (auto why = sequence_parallel_refusal(c, P)) throw std::invalid_argument(*why);
  SequenceLayout l;
  l.ranks = P;
  l.rank = rank;
  l.seq_len = T;
  l.rows = (T + P - 1) / P;
  l.q_heads = c.heads / P;
  l.kv_repeat = kv_copies(c.kv_heads, P);
  l.kv_heads = c.kv_heads * l.kv_repeat / P;
  return l;
}

Batch shard_batch(const Batch& global, int64_t rank, int64_t P) {
  TORCH_CHECK(P >= 1 && rank >= 0 && rank < P, "shard_batch: rank ", rank, " of ", P);
  const int64_t T = global.seq_len(), Ts = (T + P - 1) / P, s = rank * Ts;
  const int64_t real = std::max<int64_t>(0, std::min(Ts, T - s));  // rows of real tokens in the slice
  // Rows [s, s + Ts) of a per-position tensor (N, T); past T, `pad`.
  auto slice = [&](const torch::Tensor& t, double pad) {
    if (!t.defined()) return torch::Tensor();
    auto out = torch::full({t.size(0), Ts}, pad, t.options());
    if (real > 0) out.narrow(1, 0, real).copy_(t.narrow(1, s, real));
    return out;
  };
  Batch b = global;
  b.input_ids = slice(global.input_ids, 0);
  b.targets = slice(global.targets, static_cast<double>(kIgnoreIndex));
  b.ref_logps = slice(global.ref_logps, 0);
  b.old_logps = slice(global.old_logps, 0);
  b.loss_tokens = b.targets.ne(kIgnoreIndex).sum().item<int64_t>();
  b.first_position = s;
  b.whole_seq_len = T;
  return b;
}

SequenceLayout layout_of(const ModelConfig& c, const Batch& slice, const Communicator& comm) {
  const int64_t T = slice.whole_seq_len > 0 ? slice.whole_seq_len : slice.seq_len();
  SequenceLayout l = sequence_layout(c, T, comm.world_size(), comm.rank());
  if (slice.seq_len() != l.rows || slice.first_position != l.first_row())
    throw std::logic_error(fmt::format(
        "rank {} of {}: the batch holds rows {}..{}, the layout wants {}..{}", l.rank, l.ranks,
        slice.first_position, slice.first_position + slice.seq_len(), l.first_row(), l.first_row() + l.rows));
  return l;
}

namespace {

// The raw exchanges of several tensors in one all-to-all. Each x (N, H_a, Ts, hd) goes out as P blocks of
// H_a / P heads, block j to rank j; what comes back from rank j is its rows of this rank's heads. The send
// and receive buffers are counted as "comm"; the results, made from the receive buffer, under the caller's
// category.
variable_list seq_to_heads_raw(at::TensorList xs, Communicator& comm, const std::string& what) {
  const int64_t P = comm.world_size();
  torch::Tensor recv;
  std::vector<int64_t> heads;
  {
    MemoryScope scope(Category::comm);
    std::vector<torch::Tensor> parts;
    for (const auto& x : xs) {
      TORCH_CHECK(x.dim() == 4 && x.size(1) % P == 0, "seq_to_heads: ", x.sizes(), " over ", P, " ranks");
      heads.push_back(x.size(1) / P);
      parts.push_back(x.reshape({x.size(0), P, heads.back(), x.size(2), x.size(3)}).transpose(0, 1));
    }
    recv = comm.all_to_all(torch::cat(parts, 2), what);  // (P, N, sum H_a/P, Ts, hd): block j from rank j
  }
  const int64_t N = recv.size(1), Ts = recv.size(3), hd = recv.size(4);
  variable_list out;
  for (int64_t a = 0, h0 = 0; a < static_cast<int64_t>(heads.size()); h0 += heads[a], ++a)
    out.push_back(recv.narrow(2, h0, heads[a]).permute({1, 2, 0, 3, 4}).reshape({N, heads[a], P * Ts, hd}));
  return out;
}

// The inverse: each y (N, h_a, T', hd) goes out as P blocks of Ts rows, block j to rank j; what comes back
// from rank j is this rank's rows of its heads, in head order.
variable_list heads_to_seq_raw(at::TensorList ys, Communicator& comm, const std::string& what) {
  const int64_t P = comm.world_size();
  torch::Tensor recv;
  std::vector<int64_t> heads;
  {
    MemoryScope scope(Category::comm);
    std::vector<torch::Tensor> parts;
    for (const auto& y : ys) {
      TORCH_CHECK(y.dim() == 4 && y.size(2) % P == 0, "heads_to_seq: ", y.sizes(), " over ", P, " ranks");
      heads.push_back(y.size(1));
      parts.push_back(
          y.reshape({y.size(0), y.size(1), P, y.size(2) / P, y.size(3)}).permute({2, 0, 1, 3, 4}));
    }
    recv = comm.all_to_all(torch::cat(parts, 2), what);  // (P, N, sum h_a, Ts, hd): block j from rank j
  }
  const int64_t N = recv.size(1), Ts = recv.size(3), hd = recv.size(4);
  variable_list out;
  for (int64_t a = 0, h0 = 0; a < static_cast<int64_t>(heads.size()); h0 += heads[a], ++a)
    // A copy, always: with one head per rank and N = 1 reshape would return a view that keeps the whole
    // receive buffer alive.
    out.push_back(
        recv.narrow(2, h0, heads[a]).transpose(0, 1).reshape({N, P * heads[a], Ts, hd}).contiguous());
  return out;
}

// One exchange as an autograd function: rows to heads (kToHeads) or heads to rows; its backward is the other
// way, applied to the gradients.
template <bool kToHeads>
struct Exchange : public torch::autograd::Function<Exchange<kToHeads>> {
  static variable_list run(at::TensorList xs, Communicator& comm, const std::string& what, bool to_heads) {
    return to_heads ? seq_to_heads_raw(xs, comm, what) : heads_to_seq_raw(xs, comm, what);
  }
  static variable_list forward(AutogradContext* ctx, at::TensorList xs, Communicator* comm,
                               std::string what) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    ctx->saved_data["what"] = what;
    return run(xs, *comm, what, kToHeads);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    auto out = run(grads, *comm, ctx->saved_data["what"].toStringRef() + " (backward)", !kToHeads);
    out.emplace_back();  // no gradient for comm
    out.emplace_back();  // nor for what
    return out;
  }
};
using SeqToHeads = Exchange<true>;
using HeadsToSeq = Exchange<false>;

// The gradient of every rank's rows g (N, T', w) -> this rank's rows (N, Ts, w), summed over the ranks.
torch::Tensor reduce_scatter_rows(const torch::Tensor& g, Communicator& comm, const std::string& what) {
  const int64_t P = comm.world_size(), N = g.size(0), w = g.size(2), Ts = g.size(1) / P;
  MemoryScope scope(Category::comm);
  auto blocks = g.reshape({N, P, Ts, w}).permute({1, 0, 2, 3}).contiguous().view(-1);  // block r: rank r's
  return comm.reduce_scatter(blocks, ReduceOp::sum, what).view({N, Ts, w});
}

// Every rank's rows of a per-row tensor, gathered: x (N, Ts, w) -> (N, T', w), differentiable: its backward
// reduce-scatters (sums) the gradient of all T' rows, each rank getting its own rows' sum over the ranks.
struct GatherRows : public torch::autograd::Function<GatherRows> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator* comm,
                               std::string what) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    ctx->saved_data["what"] = what;
    const int64_t P = comm->world_size(), N = x.size(0), Ts = x.size(1), w = x.size(2);
    torch::Tensor all;
    {
      MemoryScope scope(Category::comm);
      all = comm->all_gather(x.contiguous().view(-1), what);  // (P N Ts w): rank r's rows at block r
    }
    return all.view({P, N, Ts, w}).permute({1, 0, 2, 3}).reshape({N, P * Ts, w});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    return {reduce_scatter_rows(grads[0], *comm, ctx->saved_data["what"].toStringRef() + " (backward)"),
            torch::Tensor(), torch::Tensor()};
  }
};

// kv_b's rows of query heads [h0, h0 + heads), each head's nope key and value (`per_head` rows): LoRA's B
// likewise, its A shared by every head.
Linear kv_b_of_heads(const Linear& kv_b, int64_t h0, int64_t heads, int64_t per_head) {
  Linear rows = kv_b;
  auto narrow = [&](const torch::Tensor& t) {
    return t.defined() ? t.narrow(0, h0 * per_head, heads * per_head) : t;
  };
  rows.weight = narrow(kv_b.weight);
  rows.bias = narrow(kv_b.bias);
  rows.lora_b = narrow(kv_b.lora_b);
  return rows;
}

// The gathered latent rows (N, n, r + dr) as expand_mla_latent takes them.
MlaLatent split_latent(const ModelConfig& c, const torch::Tensor& rows) {
  const int64_t r = c.mla->kv_lora_rank, dr = c.mla->qk_rope_head_dim;
  return {rows.narrow(-1, 0, r), rows.narrow(-1, r, dr)};
}

// K and V (N, Hq', n, hd) of the rank's heads from latent rows (N, n, r + dr).
KV expand_heads(const Model& m, int64_t i, const torch::Tensor& rows, const SequenceLayout& layout) {
  const auto& c = m.config;
  const int64_t dn = c.qk_nope_head_dim(), dv = c.value_head_dim();
  return expand_mla_latent(
      kv_b_of_heads(m.layers[static_cast<size_t>(i)].kv_b, layout.first_q_head(), layout.q_heads, dn + dv),
      m.lora_enabled, split_latent(c, rows), layout.q_heads, dn, dv, c.head_dim);
}

}  // namespace

bool latent_travels(const ModelConfig& c, const SequenceLayout& layout) {
  return c.mla && c.mla->kv_lora_rank + c.mla->qk_rope_head_dim < 2 * layout.q_heads * c.head_dim;
}

KV latent_heads_values(const Model& m, int64_t i, const torch::Tensor& latent, const SequenceLayout& layout,
                       int64_t rows) {
  torch::NoGradGuard no_grad;
  const int64_t N = latent.size(0), Tp = latent.size(1);
  auto k = torch::empty({N, layout.q_heads, Tp, m.config.head_dim}, latent.options()),
       v = torch::empty_like(k);
  for (int64_t s = 0; s < Tp; s += rows) {
    const int64_t n = std::min(rows, Tp - s);
    const KV part = expand_heads(m, i, latent.narrow(1, s, n), layout);
    k.narrow(2, s, n).copy_(part.k);
    v.narrow(2, s, n).copy_(part.v);
  }
  return {k, v};
}

torch::Tensor latent_grads_to_rows(const Model& m, int64_t i, const torch::Tensor& latent,
                                   const torch::Tensor& dk, const torch::Tensor& dv,
                                   const SequenceLayout& layout, Communicator& comm, int64_t rows) {
  const int64_t Tp = latent.size(1);
  auto d_latent = torch::empty_like(latent);  // (N, T', r + dr): every row's, from the rank's heads
  for (int64_t s = 0; s < Tp; s += rows) {
    const int64_t n = std::min(rows, Tp - s);
    auto leaf = latent.narrow(1, s, n).detach().requires_grad_(true);
    const KV kv = expand_heads(m, i, leaf, layout);
    torch::autograd::backward({kv.k, kv.v}, {dk.narrow(2, s, n), dv.narrow(2, s, n)});
    d_latent.narrow(1, s, n).copy_(leaf.grad());
  }
  torch::NoGradGuard no_grad;
  return reduce_scatter_rows(d_latent, comm, fmt::format("layer {} latent (backward)", i));
}

KV latent_keys_of_heads(const Model& m, int64_t i, const torch::Tensor& h, const SequenceLayout& layout,
                        Communicator& comm) {
  const MlaLatent rows =
      m.project_latent(i, h, layout.first_row(), layout.seq_len);  // (N, Ts, r), (N, Ts, dr)
  const auto all = GatherRows::apply(torch::cat({rows.latent, rows.k_rot}, -1), &comm,
                                     fmt::format("layer {} latent", i));  // (N, T', r + dr)
  return expand_heads(m, i, all, layout);
}

torch::Tensor seq_to_heads(const torch::Tensor& x, Communicator& comm, const std::string& what) {
  return SeqToHeads::apply(at::TensorList(x), &comm, what)[0];
}

torch::Tensor heads_to_seq(const torch::Tensor& y, Communicator& comm, const std::string& what) {
  return HeadsToSeq::apply(at::TensorList(y), &comm, what)[0];
}

HeadShards exchange_qkv(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        int64_t kv_repeat, Communicator& comm, const std::string& what) {
  auto repeated = [&](const torch::Tensor& t) {  // (N, Hkv, Ts, hd) -> (N, Hk', Ts, hd)
    return kv_repeat > 1 ? t.repeat_interleave(kv_repeat, 1) : t;
  };
  const std::vector<torch::Tensor> xs{q, repeated(k), repeated(v)};
  auto heads = SeqToHeads::apply(at::TensorList(xs), &comm, what);
  return {heads[0], heads[1], heads[2], {}};
}

HeadShards heads_to_rows(const HeadShards& grads, const SequenceLayout& layout, Communicator& comm,
                         const std::string& what) {
  const std::vector<torch::Tensor> ys{grads.q, grads.k, grads.v};
  auto rows = heads_to_seq_raw(at::TensorList(ys), comm, what);  // dk, dv: (N, Hk', Ts, hd)
  auto copies_summed = [&](const torch::Tensor& g) {
    if (layout.kv_repeat == 1) return g;
    return g.view({g.size(0), g.size(1) / layout.kv_repeat, layout.kv_repeat, g.size(2), g.size(3)}).sum(2);
  };
  return {rows[0], copies_summed(rows[1]), copies_summed(rows[2]), {}};
}

torch::Tensor all_sequence_sums(const torch::Tensor& rank_sums, Communicator& comm) {
  MemoryScope scope(Category::comm);
  auto sums = rank_sums.detach().clone();
  comm.all_reduce(sums, ReduceOp::sum, "sequence sums");
  return sums;
}

torch::Tensor attention_to_rows(const torch::Tensor& o, const SequenceLayout& layout, Communicator& comm,
                                const std::string& what) {
  const int64_t N = o.size(0), Tp = o.size(1), hd = o.size(2) / layout.q_heads;
  auto heads = o.view({N, Tp, layout.q_heads, hd}).transpose(1, 2);  // (N, Hq', T', hd)
  auto rows = heads_to_seq(heads, comm, what);                       // (N, Hq, Ts, hd)
  return rows.transpose(1, 2).reshape({N, layout.rows, -1});         // (N, Ts, Hq hd)
}

torch::Tensor sequence_parallel_layer(const Model& m, int64_t i, const torch::Tensor& x,
                                      const SequenceLayout& layout, Communicator& comm) {
  HeadShards heads;
  if (latent_travels(m.config, layout)) {
    // q to heads; the latent rows gathered, the rank's heads expanded from them.
    auto h = m.attn_norm(i, x);                                                          // (N, Ts, d)
    heads.q = seq_to_heads(m.project_q(i, h, layout.first_row(), layout.seq_len), comm,  // (N, Hq', T', hd)
                           fmt::format("layer {} q", i));
    const KV kv = latent_keys_of_heads(m, i, h, layout, comm);  // (N, Hq', T', hd)
    heads.k = kv.k;
    heads.v = kv.v;
  } else {
    auto h = m.attn_norm(i, x);                                      // (N, Ts, d)
    auto q = m.project_q(i, h, layout.first_row(), layout.seq_len);  // (N, Hq, Ts, hd)
    KV kv = m.project_kv(i, h, layout.first_row(), layout.seq_len);  // (N, Hkv, Ts, hd)
    heads = exchange_qkv(q, kv.k, kv.v, layout.kv_repeat, comm, fmt::format("layer {} q, k, v", i));
  }
  auto o = m.attention_heads(i, heads.q, KV{heads.k, heads.v}, layout.first_q_head());  // (N, T', Hq' hd)
  heads = HeadShards{};
  auto o_rows = attention_to_rows(o, layout, comm, fmt::format("layer {} attention output", i));
  o = torch::Tensor();
  return m.mlp_block(i, m.attention_output(i, x, o_rows));
}

HeadShards qkv_to_heads(const Model& m, int64_t i, const torch::Tensor& x, const SequenceLayout& layout,
                        Communicator& comm, int64_t rows) {
  torch::NoGradGuard no_grad;
  const auto& c = m.config;
  const int64_t N = x.size(0), Ts = layout.rows, pos0 = layout.first_row();
  // MLA where the latent is the smaller to send: q and the latent rows (N, Ts, r + dr), not k and v.
  const bool latent = latent_travels(c, layout);
  auto q = torch::empty({N, c.heads, Ts, c.head_dim}, x.options());
  torch::Tensor k, v, latent_rows;
  if (latent) {
    latent_rows = torch::empty({N, Ts, c.mla->kv_lora_rank + c.mla->qk_rope_head_dim}, x.options());
  } else {
    k = torch::empty({N, c.kv_heads, Ts, c.head_dim}, x.options());
    v = torch::empty_like(k);
  }
  for (int64_t s = 0; s < Ts; s += rows) {
    const int64_t n = std::min(rows, Ts - s);
    auto h = m.attn_norm(i, x.narrow(1, s, n));
    q.narrow(2, s, n).copy_(m.project_q(i, h, pos0 + s, layout.seq_len));
    if (latent) {
      const MlaLatent part = m.project_latent(i, h, pos0 + s, layout.seq_len);
      const MlaLatent into = split_latent(c, latent_rows.narrow(1, s, n));
      into.latent.copy_(part.latent);
      into.k_rot.copy_(part.k_rot);
    } else {
      const KV kv = m.project_kv(i, h, pos0 + s, layout.seq_len);
      k.narrow(2, s, n).copy_(kv.k);
      v.narrow(2, s, n).copy_(kv.v);
    }
  }
  if (!latent) return exchange_qkv(q, k, v, layout.kv_repeat, comm, fmt::format("layer {} q, k, v", i));
  HeadShards heads;
  heads.q = seq_to_heads(q, comm, fmt::format("layer {} q", i));
  q = torch::Tensor();
  heads.latent = GatherRows::apply(latent_rows, &comm, fmt::format("layer {} latent", i));  // (N, T', r + dr)
  const KV kv = latent_heads_values(m, i, heads.latent, layout, rows);
  heads.k = kv.k;
  heads.v = kv.v;
  return heads;
}

torch::Tensor attention_rows(const Model& m, int64_t i, const HeadShards& heads, const SequenceLayout& layout,
                             Communicator& comm, int64_t rows) {
  torch::NoGradGuard no_grad;
  const int64_t N = heads.q.size(0), Tp = layout.padded();
  auto o = torch::empty({N, Tp, heads.q.size(1) * heads.q.size(3)}, heads.q.options());
  for (int64_t s = 0; s < Tp; s += rows) {
    const int64_t n = std::min(rows, Tp - s), e = s + n, k0 = m.config.first_visible_key(i, s);
    o.narrow(1, s, n).copy_(m.attention_heads(
        i, heads.q.narrow(2, s, n), KV{heads.k.narrow(2, k0, e - k0), heads.v.narrow(2, k0, e - k0)},
        layout.first_q_head()));
  }
  return attention_to_rows(o, layout, comm, fmt::format("layer {} attention output", i));
}

torch::Tensor layer_in_chunks(const Model& m, int64_t i, const torch::Tensor& x, const SequenceLayout& layout,
                              Communicator& comm, int64_t rows) {
  torch::NoGradGuard no_grad;
  torch::Tensor o_rows;  // (N, Ts, Hq hd)
  {
    const HeadShards heads = qkv_to_heads(m, i, x, layout, comm, rows);
    o_rows = attention_rows(m, i, heads, layout, comm, rows);
  }
  auto y = torch::empty_like(x);
  for (int64_t s = 0; s < layout.rows; s += rows) {
    const int64_t n = std::min(rows, layout.rows - s);
    y.narrow(1, s, n).copy_(m.mlp_block(i, m.attention_output(i, x.narrow(1, s, n), o_rows.narrow(1, s, n))));
  }
  return y;
}

torch::Tensor checkpointed_rows_step(DistStep& step, const StepInputs& in, const RowsLayer& layer) {
  const Model& m = in.model;
  std::vector<torch::Tensor> xs;  // x_0..x_L (N, rows, d)
  {
    PhaseScope phase("forward");
    MemoryScope scope(Category::checkpoints);
    torch::NoGradGuard no_grad;
    xs.push_back(m.embed(step.batch().input_ids));
    for (int64_t i = 0; i < m.config.layers; ++i) {
      step.gather_layer(i);
      xs.push_back(layer(i, xs.back()));
      step.release_layer(i);
    }
  }

  torch::Tensor loss, dy;
  step.open_head();
  {
    PhaseScope phase("head");
    MemoryScope scope(Category::logits);
    auto x_last = xs.back().detach().requires_grad_(true);
    auto sums = in.objective.token_sums(m.head_logits(x_last), step.batch(), 0);  // (N), via (N, rows, V)
    if (!in.objective.outer_is_linear())  // f'(S) at the whole sequences' S
      sums = sums + (all_sequence_sums(sums, step.comm()) - sums.detach());
    auto rank_loss = in.objective.outer(sums, step.batch());
    rank_loss.backward();
    loss = rank_loss.detach();
    dy = x_last.grad();  // (N, rows, d)
  }
  step.reduce_and_close(step.head());
  xs.pop_back();

  step.embedding_backward(step.layers_backward(xs, std::move(dy), layer));
  return step.finish(loss);
}

torch::Tensor streamed_rows_step(DistStep& step, const StepInputs& in, const RowsLayer& forward_layer,
                                 const RowsLayerBackward& layer_backward) {
  const Model& m = in.model;
  const auto& ids = step.batch().input_ids;  // (N, rows)
  std::unique_ptr<CheckpointStore> owned;
  FirstInputRecomputed store(checkpoint_store(in, owned), m, ids);  // x_1..x_{L-1} kept
  torch::Tensor x;
  {
    PhaseScope phase("forward");
    MemoryScope scope(Category::checkpoints);
    torch::NoGradGuard no_grad;
    x = first_layer_input(m, ids);
    for (int64_t i = 0; i < m.config.layers; ++i) {
      step.gather_layer(i);
      torch::Tensor next = forward_layer(i, x);
      step.release_layer(i);
      store.put(i, std::move(x));
      x = std::move(next);
    }
  }

  torch::Tensor sums;  // DPO: S of the whole sequences before f'(S)
  if (!in.objective.outer_is_linear())
    sums = all_sequence_sums(
        streamed_sequence_sums(m, x, step.batch(), in.objective, in.partition.logits_rows), step.comm());
  step.open_head();
  auto head = streamed_head_backward(m, x, step.batch(), in.objective, in.partition.logits_rows, sums,
                                     HeadDx::into_x);  // x_L becomes dL/dx_L
  x = torch::Tensor();
  step.reduce_and_close(step.head());

  auto dx = layers_backward(m, store, std::move(head.dx),
                            [&](int64_t i, const torch::Tensor& x_in, torch::Tensor dy) {
                              step.gather_layer(i);
                              step.open(step.layer(i));
                              dy = layer_backward(i, x_in, std::move(dy));
                              step.reduce_and_close(step.layer(i));
                              step.release_layer(i);
                              return dy;
                            });
  step.embedding_backward(dx);
  return step.finish(head.loss);
}

}  // namespace bpbench::dist
