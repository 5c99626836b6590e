// ring_attention.cpp: the zigzag layout and attention round the ring (ring_attention.h for the algorithm).
#include "impls/machinery/ring_attention.h"

#include <fmt/format.h>

#include <stdexcept>

#include "harness/model/attention_kernels.h"
#include "harness/model/attention_partial.h"
#include "harness/model/flop_count.h"
#include "harness/model/ops.h"
#include "profiles/memory.h"
#include "profiles/phase_log.h"

namespace bpbench::dist {

using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

ZigzagLayout zigzag_layout(int64_t seq_len, int64_t ranks, int64_t rank) {
  if (seq_len < 1 || ranks < 1 || rank < 0 || rank >= ranks)
    throw std::invalid_argument(
        fmt::format("zigzag layout: T = {} over {} ranks has no rank {}", seq_len, ranks, rank));
  ZigzagLayout l;
  l.ranks = ranks;
  l.rank = rank;
  l.seq_len = seq_len;
  l.block = (seq_len + 2 * ranks - 1) / (2 * ranks);
  return l;
}

torch::Tensor zigzag_rows(const torch::Tensor& whole, const ZigzagLayout& layout, double pad) {
  auto sizes = whole.sizes().vec();
  const int64_t T = sizes.at(1), b = layout.block;
  sizes[1] = layout.rows();
  auto out = torch::full(sizes, pad, whole.options());
  for (int64_t i = 0; i < 2; ++i) {
    const int64_t start = layout.first_position(i), real = std::clamp<int64_t>(T - start, 0, b);
    if (real > 0) out.narrow(1, i * b, real).copy_(whole.narrow(1, start, real));
  }
  return out;
}

namespace {

// The pairs of one ring step: the rank's query blocks i against the key blocks j of the pair it holds
// (rank `src`'s), with the mask each needs; a key block after the query block is no pair.
template <class Pair>
void for_each_pair(const ZigzagLayout& layout, int64_t src, Pair&& pair) {
  const ZigzagLayout holder = zigzag_layout(layout.seq_len, layout.ranks, src);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      const int64_t query_block = layout.block_index(i), key_block = holder.block_index(j);
      if (key_block > query_block) continue;
      pair(i, j, key_block == query_block ? KeyBlockMask::causal : KeyBlockMask::all);
    }
}

// The tiles of one pair of blocks (b rows of queries, b of keys): pieces of at most `tile` queries by `tile`
// keys, or the whole pair (tile 0). A causal pair's tiles are causal on its diagonal (square: both sides cut
// alike), see every key below it, and are none above it. The pieces' backward with the merged output and
// logsumexp adds up to the pair's: each piece's dQ is its keys' term, its dK, dV its queries'.
template <class Tile>
void for_each_tile(int64_t b, int64_t tile, KeyBlockMask mask, Tile&& body) {
  const int64_t t = tile > 0 ? std::min(tile, b) : b;
  for (int64_t qs = 0; qs < b; qs += t)
    for (int64_t ks = 0; ks < b; ks += t) {
      if (mask == KeyBlockMask::causal && ks > qs) break;
      const bool diagonal = mask == KeyBlockMask::causal && ks == qs;
      body(qs, std::min(t, b - qs), ks, std::min(t, b - ks),
           diagonal ? KeyBlockMask::causal : KeyBlockMask::all);
    }
}

int64_t next_rank(const ZigzagLayout& l) {
  return (l.rank + 1) % l.ranks;
}
int64_t previous_rank(const ZigzagLayout& l) {
  return (l.rank + l.ranks - 1) % l.ranks;
}

// One hop round the ring: `t` to rank r+1, rank r-1's in its place (counted as communication memory).
torch::Tensor pass_on(const torch::Tensor& t, const ZigzagLayout& l, Communicator& comm,
                      const std::string& what) {
  MemoryScope scope(Category::comm);
  return comm.send_recv(t, static_cast<int>(next_rank(l)), static_cast<int>(previous_rank(l)), what);
}

struct RingAttention : public torch::autograd::Function<RingAttention> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale, ZigzagLayout layout, Communicator* comm,
                               std::string what, int64_t tile) {
    PhaseScope phase("ring attention");  // the timeline's view of the ring within a layer
    const int64_t b = layout.block;
    // The output and logsumexp of the rank's rows, each query tile's merged into in place piece by piece.
    auto out = torch::empty_like(q);  // (N, Hq, 2b, hd)
    auto lse = torch::empty(q.sizes().slice(0, 3), q.options().dtype(compute_dtype(q.scalar_type())));
    std::vector<bool> filled(2 * b, false);   // by the query tile's first row
    torch::Tensor kv = torch::stack({k, v});  // (2, N, Hkv, 2b, hd): the pair that travels
    for (int64_t s = 0; s < layout.ranks; ++s) {
      if (s > 0) kv = pass_on(kv, layout, *comm, what + " K/V");
      const int64_t src = (layout.rank - s + layout.ranks) % layout.ranks;
      for_each_pair(layout, src, [&](int64_t i, int64_t j, KeyBlockMask pair_mask) {
        for_each_tile(
            b, tile, pair_mask, [&](int64_t qs, int64_t nq, int64_t ks, int64_t nk, KeyBlockMask mask) {
              const int64_t row = i * b + qs, key = j * b + ks;
              const PartialAttention piece = partial_attention(q.narrow(2, row, nq), kv[0].narrow(2, key, nk),
                                                               kv[1].narrow(2, key, nk), scale, mask);
              const PartialAttention merged{out.narrow(2, row, nq), lse.narrow(2, row, nq)};
              if (filled[row]) {
                merge_partial(merged, piece);
              } else {
                merged.out.copy_(piece.out);
                merged.lse.copy_(piece.lse);
                filled[row] = true;
              }
            });
      });
    }
    kv.reset();
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["tile"] = tile;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["seq_len"] = layout.seq_len;
    ctx->saved_data["ranks"] = layout.ranks;
    ctx->saved_data["rank"] = layout.rank;
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    ctx->saved_data["what"] = what;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    PhaseScope phase("ring attention backward");
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const double scale = ctx->saved_data["scale"].toDouble();
    const ZigzagLayout layout =
        zigzag_layout(ctx->saved_data["seq_len"].toInt(), ctx->saved_data["ranks"].toInt(),
                      ctx->saved_data["rank"].toInt());
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    const std::string what = ctx->saved_data["what"].toStringRef();
    const int64_t b = layout.block, tile = ctx->saved_data["tile"].toInt();
    const auto grad_out = grads[0].contiguous();
    // dQ and the travelling dK/dV in the accumulation dtype (float32 for bfloat16), rounded once at the end.
    const auto acc = compute_dtype(q.scalar_type());
    auto dq = torch::zeros(q.sizes(), q.options().dtype(acc));
    torch::Tensor kv = torch::stack({k, v});
    auto dkv = torch::zeros(kv.sizes(), kv.options().dtype(acc));  // the accumulator of the pair held
    for (int64_t s = 0; s < layout.ranks; ++s) {
      if (s > 0) {
        kv = pass_on(kv, layout, *comm, what + " K/V (backward)");
        dkv = pass_on(dkv, layout, *comm, what + " dK/dV");
      }
      const int64_t src = (layout.rank - s + layout.ranks) % layout.ranks;
      for_each_pair(layout, src, [&](int64_t i, int64_t j, KeyBlockMask pair_mask) {
        for_each_tile(
            b, tile, pair_mask, [&](int64_t qs, int64_t nq, int64_t ks, int64_t nk, KeyBlockMask mask) {
              const int64_t row = i * b + qs, key = j * b + ks;
              auto [dq_piece, dk_piece, dv_piece] = partial_attention_backward(
                  grad_out.narrow(2, row, nq), q.narrow(2, row, nq), kv[0].narrow(2, key, nk),
                  kv[1].narrow(2, key, nk), out.narrow(2, row, nq), lse.narrow(2, row, nq), scale, mask);
              dq.narrow(2, row, nq).add_(dq_piece);
              dkv[0].narrow(2, key, nk).add_(dk_piece);
              dkv[1].narrow(2, key, nk).add_(dv_piece);
            });
      });
    }
    kv.reset();
    // The accumulator held now is rank r+1's pair, every rank's share in it: one hop home.
    if (layout.ranks > 1) dkv = pass_on(dkv, layout, *comm, what + " dK/dV (home)");
    return {
        dq.to(q.scalar_type()), dkv[0].to(k.scalar_type()), dkv[1].to(v.scalar_type()), {}, {}, {}, {}, {}};
  }
};

}  // namespace

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             double scale, const ZigzagLayout& layout, Communicator& comm,
                             const std::string& what, int64_t tile) {
  TORCH_CHECK(
      q.dim() == 4 && q.size(2) == layout.rows() && k.size(2) == layout.rows() && v.size(2) == layout.rows(),
      "ring attention: q, k, v need the rank's ", layout.rows(), " rows, got ", q.sizes(), ", ", k.sizes(),
      ", ", v.sizes());
  TORCH_CHECK(comm.world_size() == layout.ranks && comm.rank() == layout.rank,
              "ring attention: a layout of rank ", layout.rank, " of ", layout.ranks, " on rank ",
              comm.rank(), " of ", comm.world_size());
  auto out = RingAttention::apply(q, k, v, scale, layout, &comm, what, tile);
  // The FLOP counter's seam (flop_count.h), once for the rank's pairs: the counts are linear in the pairs,
  // so one call with their sums tallies what the pairs ran.
  const AttentionPairs pairs = ring_attention_pairs(layout, q.device(), q.scalar_type(), q.size(3), tile);
  count_attention(q.size(0), q.size(1), q.size(3), pairs, out);
  return out;
}

AttentionPairs ring_attention_pairs(const ZigzagLayout& layout, const torch::Device& device,
                                    at::ScalarType dtype, int64_t head_dim, int64_t tile) {
  const int64_t b = layout.block, whole = (2 * layout.ranks - 1) * b * b;
  const PartialKernel kernel = partial_kernel_for(device, dtype, head_dim);
  const AttentionKernel as = kernel == PartialKernel::cpu_fused    ? AttentionKernel::cpu_fused
                             : kernel == PartialKernel::cuda_flash ? AttentionKernel::flash
                                                                   : AttentionKernel::math;
  AttentionPairs diagonal;  // one causal b x b pair, as its tiles run it
  for_each_tile(
      b, tile, KeyBlockMask::causal, [&](int64_t, int64_t nq, int64_t, int64_t nk, KeyBlockMask mask) {
        const AttentionPairs piece = mask == KeyBlockMask::causal ? attention_pairs(as, nq, nk, 0)
                                                                  : AttentionPairs{nq * nk, nq * nk, nq * nk};
        diagonal.visible += piece.visible;
        diagonal.executed += piece.executed;
        diagonal.all += piece.all;
      });
  AttentionPairs pairs;
  pairs.visible = 2 * diagonal.visible + whole;
  pairs.executed = 2 * diagonal.executed + whole;
  pairs.all = 2 * diagonal.all + whole;
  pairs.rescored = true;  // the math form too: partial_attention_backward scores the pair again
  return pairs;
}

Batch zigzag_batch(const Batch& global, int64_t rank, int64_t ranks) {
  const int64_t T = global.whole_seq_len > 0 ? global.whole_seq_len : global.seq_len();
  const ZigzagLayout layout = zigzag_layout(T, ranks, rank);
  auto rows = [&](const torch::Tensor& t, double pad) {
    return t.defined() ? zigzag_rows(t, layout, pad) : torch::Tensor();
  };
  Batch b = global;
  b.input_ids = rows(global.input_ids, 0);
  b.targets = rows(global.targets, static_cast<double>(kIgnoreIndex));
  b.ref_logps = rows(global.ref_logps, 0);
  b.old_logps = rows(global.old_logps, 0);
  b.loss_tokens = b.targets.ne(kIgnoreIndex).sum().item<int64_t>();
  b.first_position = 0;
  b.whole_seq_len = T;
  return b;
}

torch::Tensor ring_layer(const Model& m, int64_t i, const torch::Tensor& x, const ZigzagLayout& layout,
                         Communicator& comm) {
  const int64_t b = layout.block, N = x.size(0);
  torch::Tensor o;  // (N, 2b, Hq hd)
  {
    // q (N, Hq, 2b, hd), k and v (N, Hkv, 2b, hd): each block at its own positions.
    const std::vector<Model::PositionBlock> blocks{{b, layout.first_position(0)},
                                                   {b, layout.first_position(1)}};
    torch::Tensor q;
    KV kv;
    {
      const auto h = m.attn_norm(i, x);  // released before the attention (its graph keeps what it needs)
      q = m.project_q(i, h, blocks, layout.seq_len);
      kv = m.project_kv(i, h, blocks, layout.seq_len);
    }
    auto heads = ring_attention(q, kv.k, kv.v, m.config.attention_scale(), layout, comm,
                                fmt::format("layer {} attention", i));  // (N, Hq, 2b, hd)
    o = heads.transpose(1, 2).reshape({N, layout.rows(), -1});
  }
  return m.mlp_block(i, m.attention_output(i, x, o));
}

RowsQkv ring_qkv_in_chunks(const Model& m, int64_t i, const torch::Tensor& x, const ZigzagLayout& layout,
                           int64_t rows) {
  torch::NoGradGuard no_grad;
  const auto& c = m.config;
  const int64_t N = x.size(0), R = layout.rows();
  RowsQkv out{torch::empty({N, c.heads, R, c.head_dim}, x.options()),
              torch::empty({N, c.kv_heads, R, c.head_dim}, x.options()),
              torch::empty({N, c.kv_heads, R, c.head_dim}, x.options())};
  for_block_chunks(layout, rows, [&](int64_t s, int64_t n, int64_t position) {
    const auto h = m.attn_norm(i, x.narrow(1, s, n));
    out.q.narrow(2, s, n).copy_(m.project_q(i, h, position, layout.seq_len));
    const KV kv = m.project_kv(i, h, position, layout.seq_len);
    out.k.narrow(2, s, n).copy_(kv.k);
    out.v.narrow(2, s, n).copy_(kv.v);
  });
  return out;
}

torch::Tensor output_rows(const torch::Tensor& heads, int64_t s, int64_t n) {
  return heads.narrow(2, s, n).transpose(1, 2).reshape({heads.size(0), n, -1});
}

torch::Tensor ring_layer_in_chunks(const Model& m, int64_t i, const torch::Tensor& x,
                                   const ZigzagLayout& layout, Communicator& comm, int64_t rows) {
  torch::NoGradGuard no_grad;
  torch::Tensor heads;  // (N, Hq, 2b, hd)
  {
    RowsQkv qkv = ring_qkv_in_chunks(m, i, x, layout, rows);
    heads = ring_attention(qkv.q, qkv.k, qkv.v, m.config.attention_scale(), layout, comm,
                           fmt::format("layer {} attention", i), rows);
  }
  auto y = torch::empty_like(x);
  for (int64_t s = 0; s < layout.rows(); s += rows) {
    const int64_t n = std::min(rows, layout.rows() - s);
    y.narrow(1, s, n).copy_(
        m.mlp_block(i, m.attention_output(i, x.narrow(1, s, n), output_rows(heads, s, n))));
  }
  return y;
}

}  // namespace bpbench::dist
