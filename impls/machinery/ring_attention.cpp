// ring_attention.cpp: the zigzag layout and attention round the ring (ring_attention.h for the algorithm).
#include "impls/machinery/ring_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "harness/model/attention_kernels.h"
#include "harness/model/attention_partial.h"
#include "harness/model/attention_sinks.h"
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

torch::Tensor two_ranges_rows(const torch::Tensor& whole, int64_t first, int64_t second, int64_t rows,
                              double pad) {
  auto sizes = whole.sizes().vec();
  const int64_t T = sizes.at(1);
  sizes[1] = 2 * rows;
  auto out = torch::full(sizes, pad, whole.options());
  for (const auto& [at, start] : {std::pair<int64_t, int64_t>{0, first}, {rows, second}}) {
    const int64_t real = std::clamp<int64_t>(T - start, 0, rows);
    if (real > 0) out.narrow(1, at, real).copy_(whole.narrow(1, start, real));
  }
  return out;
}

torch::Tensor zigzag_rows(const torch::Tensor& whole, const ZigzagLayout& layout, double pad) {
  return two_ranges_rows(whole, layout.first_position(0), layout.first_position(1), layout.block, pad);
}

namespace {

// One piece of a ring step: `rows` of the rank's query rows from local row `row` against `keys` of the held
// pair's rows from local row `key`, with its mask: every key visible (all), the causal square of equal
// positions (causal), or a window's band.
struct Piece {
  int64_t row, rows, key, keys;
  KeyBlockMask mask = KeyBlockMask::all;
  std::optional<KeyBand> band;
};

// One pair's pieces: query block i (b rows from position q_pos) against key block j (from k_pos), tiles of t,
// a window of W (wider than the sequence: none). Only the key tiles some row of the query tile can see are
// visited.
template <class Body>
void for_each_piece_of_pair(int64_t i, int64_t q_pos, int64_t j, int64_t k_pos, int64_t b, int64_t t,
                            int64_t W, Body&& body) {
  for (int64_t qs = 0; qs < b; qs += t) {
    const int64_t p0 = q_pos + qs, p1 = p0 + std::min(t, b - qs) - 1;  // the query tile's positions
    const int64_t lo = std::max<int64_t>(0, p0 - W + 1 - k_pos), hi = std::min(b - 1, p1 - k_pos);
    for (int64_t ks = lo / t * t; ks <= hi; ks += t) {
      const int64_t k0 = k_pos + ks, k1 = k0 + std::min(t, b - ks) - 1;
      const int64_t pa = std::max(p0, k0), pb = std::min(p1, k1 + W - 1);  // rows that see a key
      if (pa > pb) continue;
      const int64_t ka = std::max(k0, pa - W + 1), kb = std::min(k1, pb);  // keys a row sees
      Piece piece{i * b + (pa - q_pos), pb - pa + 1,       j * b + (ka - k_pos),
                  kb - ka + 1,          KeyBlockMask::all, std::nullopt};
      if (kb <= pa && ka > pb - W) {
        piece.mask = KeyBlockMask::all;
      } else if (pa == ka && pb == kb && W >= pb - pa + 1) {
        piece.mask = KeyBlockMask::causal;
      } else {
        piece.band = KeyBand{pa, ka, W};
      }
      body(piece);
    }
  }
}

int64_t window_or_none(const ZigzagLayout& layout, int64_t window) {
  return window > 0 ? window : layout.padded() + 1;
}

// The pieces of one ring step: the rank's query blocks i against the key blocks j of the pair it holds (rank
// `src`'s), each pair of b x b in tiles of at most `tile` x `tile` (tile 0: whole), each tile cut to the rows
// that see one of its keys at least and to the keys one of those rows sees. Without a window this is a key
// block after the query block dropped, one before it whole (all), the diagonal causal (tiles below its
// diagonal all, above it none). Under a window (Gemma 3's local layers) a tile wholly outside every row's
// window is dropped, one wholly inside is all, the rest banded. The pieces' backward with the merged output
// and logsumexp adds up to the pair's: each piece's dQ is its keys' term, its dK, dV its rows'.
template <class Body>
void for_each_piece(const ZigzagLayout& layout, int64_t src, int64_t window, int64_t tile, Body&& body) {
  const ZigzagLayout holder = zigzag_layout(layout.seq_len, layout.ranks, src);
  const int64_t b = layout.block, t = tile > 0 ? std::min(tile, b) : b;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      const int64_t q_pos = layout.first_position(i), k_pos = holder.first_position(j);
      if (k_pos <= q_pos)
        for_each_piece_of_pair(i, q_pos, j, k_pos, b, t, window_or_none(layout, window), body);
    }
}

// The steps s of 1..P-1 at which some rank holds a pair it has a piece with (rank r - s's). Without a
// window every step; under one, a window shorter than a block leaves each query block with its own and the
// block before: on the zigzag layout steps 1 and P - 1.
std::vector<int64_t> needed_steps(const ZigzagLayout& layout, int64_t window) {
  std::vector<int64_t> steps;
  for (int64_t s = 1; s < layout.ranks; ++s) {
    bool needed = false;
    for (int64_t r = 0; r < layout.ranks && !needed; ++r)
      for_each_piece(zigzag_layout(layout.seq_len, layout.ranks, r), (r - s + layout.ranks) % layout.ranks,
                     window, 0, [&](const Piece&) { needed = true; });
    if (needed) steps.push_back(s);
  }
  return steps;
}

int64_t rank_at(const ZigzagLayout& l, int64_t offset) {
  return ((l.rank + offset) % l.ranks + l.ranks) % l.ranks;
}

// `t` to rank r + `offset`, rank r - offset's in its place (counted as communication memory): one hop round
// the ring at offset 1.
torch::Tensor exchange(const torch::Tensor& t, const ZigzagLayout& l, int64_t offset, Communicator& comm,
                       const std::string& what) {
  MemoryScope scope(Category::comm);
  return comm.send_recv(t, static_cast<int>(rank_at(l, offset)), static_cast<int>(rank_at(l, -offset)), what);
}

// How the K/V pairs reach the ranks: round the ring, one hop a step, when every step is needed; else (a
// window) each needed step's pair straight from its owner, rank r - s, and its dK/dV straight back.
// The forward finds the steps; its backward reuses them (saved with the node).
struct Schedule {
  std::vector<int64_t> steps;  // the needed steps, ascending
  bool hops = true;
  Schedule(std::vector<int64_t> needed, const ZigzagLayout& layout)
      : steps(std::move(needed)), hops(static_cast<int64_t>(steps.size()) == layout.ranks - 1) {}
};

// The communicator the backward exchanges over, in autograd's saved data as what that data can hold: a
// capsule of a custom-class holder (not the pointer's bits as an integer). The Communicator outlives the
// step.
struct SavedCommunicator final : torch::CustomClassHolder {
  explicit SavedCommunicator(Communicator* c) : comm(c) {}
  Communicator* comm;
};

struct RingAttention : public torch::autograd::Function<RingAttention> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const SinkLogitsInput& sink_input, double scale,
                               ZigzagLayout layout, Communicator* comm, std::string what, int64_t tile,
                               int64_t window) {
    const torch::Tensor sink_logits = logits_of(sink_input);
    PhaseScope phase("ring attention");  // the timeline's view of the ring within a layer
    // The output and logsumexp of the rank's rows, each query row's merged into in place piece by piece.
    auto out = torch::empty_like(q);  // (N, Hq, 2b, hd)
    auto lse = torch::empty(q.sizes().slice(0, 3), q.options().dtype(compute_dtype(q.scalar_type())));
    std::vector<char> filled(layout.rows(), 0);
    auto run_pieces = [&](const torch::Tensor& kv, int64_t src) {
      for_each_piece(layout, src, window, tile, [&](const Piece& p) {
        const auto q_rows = q.narrow(2, p.row, p.rows);
        const auto k_rows = kv[0].narrow(2, p.key, p.keys), v_rows = kv[1].narrow(2, p.key, p.keys);
        const PartialAttention piece = p.band ? partial_attention(q_rows, k_rows, v_rows, scale, *p.band)
                                              : partial_attention(q_rows, k_rows, v_rows, scale, p.mask);
        const PartialAttention merged{out.narrow(2, p.row, p.rows), lse.narrow(2, p.row, p.rows)};
        const auto first = filled.begin() + p.row, last = first + p.rows;
        const auto done = std::count(first, last, 1);
        if (done == 0) {  // the rows' first piece: copied in
          merged.out.copy_(piece.out);
          merged.lse.copy_(piece.lse);
        } else {
          // Under a window a piece may cover rows no piece has reached yet: an empty softmax for them (out
          // 0, lse -inf), which the merge turns into this piece's exactly.
          for (int64_t r = 0; r < p.rows; ++r)
            if (!first[r]) {
              int64_t n = 1;
              while (r + n < p.rows && !first[r + n]) ++n;
              merged.out.narrow(2, r, n).zero_();
              merged.lse.narrow(2, r, n).fill_(-std::numeric_limits<double>::infinity());
              r += n;
            }
          merge_partial(merged, piece);
        }
        std::fill(first, last, 1);
      });
    };
    const Schedule schedule(needed_steps(layout, window), layout);
    torch::Tensor kv = torch::stack({k, v});  // (2, N, Hkv, 2b, hd): the pair that travels
    run_pieces(kv, layout.rank);
    torch::Tensor own = schedule.hops ? torch::Tensor() : kv;  // straight to each needed step's rank
    for (const int64_t s : schedule.steps) {
      kv = schedule.hops ? exchange(kv, layout, 1, *comm, what + " K/V")
                         : exchange(own, layout, s, *comm, what + " K/V");
      run_pieces(kv, rank_at(layout, -s));
    }
    kv.reset();
    own.reset();
    // Every row has merged all its pieces (its own diagonal at least): the sinks are one more, last.
    if (sink_logits.defined()) merge_attention_sinks(out, lse, sink_logits);
    save_sink_logits(ctx, sink_logits);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["tile"] = tile;
    ctx->saved_data["window"] = window;
    ctx->saved_data["steps"] = schedule.steps;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["seq_len"] = layout.seq_len;
    ctx->saved_data["ranks"] = layout.ranks;
    ctx->saved_data["rank"] = layout.rank;
    ctx->saved_data["comm"] = c10::IValue::make_capsule(c10::make_intrusive<SavedCommunicator>(comm));
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
    Communicator* comm =
        c10::static_intrusive_pointer_cast<SavedCommunicator>(ctx->saved_data["comm"].toCapsule())->comm;
    const std::string what = ctx->saved_data["what"].toStringRef();
    const int64_t tile = ctx->saved_data["tile"].toInt(), window = ctx->saved_data["window"].toInt();
    const auto grad_out = grads[0].contiguous();
    auto d_sinks = sinks_grad_if_needed(ctx, grad_out, out, lse);  // the rank's rows' share: summed later
    // dQ and the dK/dV accumulators in the accumulation dtype (float32 for bfloat16), rounded once at the
    // end.
    const auto acc = compute_dtype(q.scalar_type());
    auto dq = torch::zeros(q.sizes(), q.options().dtype(acc));
    // The pieces with the pair `kv` of rank `src`: dQ into dq, the pair's dK, dV into `dkv`.
    auto run_pieces = [&](const torch::Tensor& kv, const torch::Tensor& dkv, int64_t src) {
      for_each_piece(layout, src, window, tile, [&](const Piece& p) {
        const auto g_rows = grad_out.narrow(2, p.row, p.rows), q_rows = q.narrow(2, p.row, p.rows);
        const auto k_rows = kv[0].narrow(2, p.key, p.keys), v_rows = kv[1].narrow(2, p.key, p.keys);
        const auto o_rows = out.narrow(2, p.row, p.rows), lse_rows = lse.narrow(2, p.row, p.rows);
        auto [dq_piece, dk_piece, dv_piece] =
            p.band
                ? partial_attention_backward(g_rows, q_rows, k_rows, v_rows, o_rows, lse_rows, scale, *p.band)
                : partial_attention_backward(g_rows, q_rows, k_rows, v_rows, o_rows, lse_rows, scale, p.mask);
        dq.narrow(2, p.row, p.rows).add_(dq_piece);
        dkv[0].narrow(2, p.key, p.keys).add_(dk_piece);
        dkv[1].narrow(2, p.key, p.keys).add_(dv_piece);
      });
    };
    const Schedule schedule(ctx->saved_data["steps"].toIntVector(), layout);
    torch::Tensor kv = torch::stack({k, v});
    auto dkv = torch::zeros(kv.sizes(), kv.options().dtype(acc));  // the accumulator of the pair held
    run_pieces(kv, dkv, layout.rank);
    if (schedule.hops) {
      // Each pair travels with its accumulator; after the last step the accumulator held is rank r+1's,
      // every rank's share in it: one hop home.
      for (const int64_t s : schedule.steps) {
        kv = exchange(kv, layout, 1, *comm, what + " K/V (backward)");
        dkv = exchange(dkv, layout, 1, *comm, what + " dK/dV");
        run_pieces(kv, dkv, rank_at(layout, -s));
      }
      kv.reset();
      if (layout.ranks > 1) dkv = exchange(dkv, layout, 1, *comm, what + " dK/dV (home)");
    } else {
      // Each needed step's pair straight from rank r - s, its share of dK/dV straight back; this rank's own
      // share from rank r + s added to its accumulator.
      for (const int64_t s : schedule.steps) {
        const auto held = exchange(kv, layout, s, *comm, what + " K/V (backward)");
        auto d_held = torch::zeros(held.sizes(), held.options().dtype(acc));
        run_pieces(held, d_held, rank_at(layout, -s));
        dkv.add_(exchange(d_held, layout, -s, *comm, what + " dK/dV (home)"));
      }
      kv.reset();
    }
    return {dq.to(q.scalar_type()),
            dkv[0].to(k.scalar_type()),
            dkv[1].to(v.scalar_type()),
            d_sinks,
            {},
            {},
            {},
            {},
            {},
            {}};
  }
};

}  // namespace

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             double scale, const ZigzagLayout& layout, Communicator& comm,
                             const std::string& what, int64_t tile, int64_t window,
                             const torch::Tensor& sink_logits) {
  TORCH_CHECK(
      q.dim() == 4 && q.size(2) == layout.rows() && k.size(2) == layout.rows() && v.size(2) == layout.rows(),
      "ring attention: q, k, v need the rank's ", layout.rows(), " rows, got ", q.sizes(), ", ", k.sizes(),
      ", ", v.sizes());
  TORCH_CHECK(comm.world_size() == layout.ranks && comm.rank() == layout.rank,
              "ring attention: a layout of rank ", layout.rank, " of ", layout.ranks, " on rank ",
              comm.rank(), " of ", comm.world_size());
  TORCH_CHECK(!sink_logits.defined() || sink_logits.numel() == q.size(1), "ring attention: ", q.size(1),
              " query heads need as many sink logits, got ", sink_logits.sizes());
  auto out = RingAttention::apply(q, k, v, node_input(sink_logits), scale, layout, &comm, what, tile, window);
  // The FLOP counter's seam (flop_count.h), once for the rank's pieces: the counts are linear in the pairs,
  // so one call with their sums tallies what the pieces ran.
  const AttentionPairs pairs =
      ring_attention_pairs(layout, q.device(), q.scalar_type(), q.size(3), tile, window);
  count_attention(q.size(0), q.size(1), q.size(3), pairs, out);
  return out;
}

RingSends ring_sends(const ZigzagLayout& layout, int64_t window) {
  const Schedule schedule(needed_steps(layout, window), layout);
  const auto steps = static_cast<int64_t>(schedule.steps.size());
  if (!schedule.hops) return {steps, steps, steps};
  return {steps, steps, layout.ranks > 1 ? steps + 1 : 0};
}

AttentionPairs ring_attention_pairs(const ZigzagLayout& layout, const torch::Device& device,
                                    at::ScalarType dtype, int64_t head_dim, int64_t tile, int64_t window) {
  const PartialKernel kernel = partial_kernel_for(device, dtype, head_dim);
  const AttentionKernel as = kernel == PartialKernel::cpu_fused    ? AttentionKernel::cpu_fused
                             : kernel == PartialKernel::cuda_flash ? AttentionKernel::flash
                                                                   : AttentionKernel::math;
  AttentionPairs pairs;
  auto add = [&](int64_t visible, int64_t executed, int64_t all) {
    pairs.visible += visible;
    pairs.executed += executed;
    pairs.all += all;
  };
  auto count = [&](const Piece& p) {
    const int64_t all = p.rows * p.keys;
    if (p.band) {  // every score computed under the band's mask; the visible ones counted row by row
      int64_t visible = 0;
      for (int64_t r = 0; r < p.rows; ++r) {
        const int64_t pos = p.band->query0 + r;
        const int64_t first = std::max(p.band->key0, pos - p.band->window + 1);
        const int64_t last = std::min(p.band->key0 + p.keys - 1, pos);
        visible += std::max<int64_t>(0, last - first + 1);
      }
      add(visible, all, all);
    } else if (p.mask == KeyBlockMask::causal) {
      const AttentionPairs diagonal = attention_pairs(as, p.rows, p.keys, 0);
      add(diagonal.visible, diagonal.executed, diagonal.all);
    } else {
      add(all, all, all);
    }
  };
  // The same pieces the forward and backward run, every holder's pair in turn.
  for (int64_t src = 0; src < layout.ranks; ++src) for_each_piece(layout, src, window, tile, count);
  pairs.rescored = true;  // the math form too: partial_attention_backward scores the pair again
  return pairs;
}

Batch two_ranges_batch(const Batch& global, int64_t first, int64_t second, int64_t rows) {
  auto rows_of = [&](const torch::Tensor& t, double pad) {
    return t.defined() ? two_ranges_rows(t, first, second, rows, pad) : torch::Tensor();
  };
  Batch b = global;
  b.input_ids = rows_of(global.input_ids, 0);
  b.targets = rows_of(global.targets, static_cast<double>(kIgnoreIndex));
  b.ref_logps = rows_of(global.ref_logps, 0);
  b.old_logps = rows_of(global.old_logps, 0);
  b.loss_tokens = b.targets.ne(kIgnoreIndex).sum().item<int64_t>();
  b.first_position = 0;
  b.whole_seq_len = global.whole_seq_len > 0 ? global.whole_seq_len : global.seq_len();
  return b;
}

Batch zigzag_batch(const Batch& global, int64_t rank, int64_t ranks) {
  const int64_t T = global.whole_seq_len > 0 ? global.whole_seq_len : global.seq_len();
  const ZigzagLayout layout = zigzag_layout(T, ranks, rank);
  return two_ranges_batch(global, layout.first_position(0), layout.first_position(1), layout.block);
}

}  // namespace bpbench::dist
