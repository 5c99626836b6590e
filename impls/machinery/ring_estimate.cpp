// ring_estimate.cpp: ring_estimate.h. Each phase names the tensors alive at its high point, in the order the
// code (ring.cpp, ring_attention.cpp, sequence_parallel.cpp's checkpointed_rows_step) makes them. A
// send_recv holds the tensor sent and the one received (comm.cpp: the receive buffer is new).
#include "impls/machinery/ring_estimate.h"

#include <fmt/format.h>

#include <algorithm>

#include "impls/machinery/layerwise_estimate.h"

namespace bpbench {

MemoryTerms ring_rows(const MemoryTerms& D) {
  MemoryTerms R = D;
  const int64_t block = (D.T + 2 * D.ranks - 1) / (2 * D.ranks);
  R.T = 2 * block;
  return R;
}

namespace {

// The tensors of the rank's rows: one (N, 2b, d); q (N, Hq, 2b, hd); k (N, Hkv, 2b, hd); the K/V pair that
// travels (2, N, Hkv, 2b, hd); the logsumexp of the rows (N, Hq, 2b) in f.
struct RingTensors {
  int64_t x, q, k, pair, lse;
  explicit RingTensors(const MemoryTerms& R)
      : x(R.N * R.T * R.d * R.s),
        q(R.N * R.T * R.Aq * R.s),
        k(R.N * R.T * R.Akv * R.s),
        pair(2 * k),
        lse(R.N * R.T * R.Hq * R.f) {}
};

// The forward round the ring (RingAttention::forward) beside q, k, v: the output and logsumexp being merged
// into, the travelling pair, and at its high point either an exchange (the pair received beside the one
// sent) or one piece of n queries by n keys (a b x b pair whole, n = b, or a tile of it): its partial output
// and logsumexp with the kernel's scratch, then the merge's (N, Hq, n, hd) and two (N, Hq, n) in f (the new
// logsumexp and one weight at a time; for bfloat16 also the piece's output upcast).
void add_ring_forward(PhaseBuilder& p, const MemoryTerms& R, const RingTensors& t, int64_t n) {
  p.add("q, k, v of the rows: N*2b*(Aq + 2*Akv)*s", t.q + 2 * t.k);
  p.add("output and logsumexp being merged into: N*2b*(Aq*s + Hq*f)", t.q + t.lse);
  p.add("the K/V pair travelling: 2 x N*2b*Akv*s", t.pair);
  const int64_t exchange = t.pair;
  const int64_t kernel = R.attn_forward(n, n);  // CPU: output, logsumexp, scratch; flash: output, logsumexp
  const int64_t piece_out = R.N * n * R.Aq * R.s, piece_lse = R.N * n * R.Hq * R.f;
  const int64_t upcast = R.up ? R.N * n * R.Aq * R.f : 0;  // next's output in f beside the sum
  const int64_t merge = piece_out + piece_lse + R.N * n * R.Aq * R.f + upcast + 2 * piece_lse;
  if (exchange >= std::max(kernel, merge))
    p.add("the pair received (send_recv): 2 x N*2b*Akv*s", exchange);
  else if (kernel >= merge)
    p.add(n == R.T / 2 ? "one b x b pair: its output, logsumexp and the kernel's scratch"
                       : "one c x c tile: its output, logsumexp and the kernel's scratch",
          kernel);
  else
    p.add(n == R.T / 2 ? "one pair's output and logsumexp, merged: + N*b*Aq*f + 2 x N*Hq*b*f"
                       : "one tile's output and logsumexp, merged: + N*c*Aq*f + 2 x N*Hq*c*f",
          merge);
}

// The ring's backward (RingAttention::backward) beside what the caller holds: dQ and the travelling dK/dV
// accumulator in the accumulation dtype, the K/V pair; at its high point an exchange (the accumulator's copy
// received) or one piece's backward (n = b: a pair whole; else a c x c tile): the kernel's (the piece's dO,
// a strided view, copied in, and its dQ, dK, dV and scratch: memory_terms.h's attn_backward over n rows).
void add_ring_backward(PhaseBuilder& p, const MemoryTerms& R, const RingTensors& t, int64_t n) {
  const bool whole = n == R.T / 2;
  p.add("dQ: N*2b*Aq*acc", R.N * R.T * R.Aq * R.acc());
  p.add("the K/V pair travelling: 2 x N*2b*Akv*s", t.pair);
  p.add("its dK/dV accumulator: 2 x N*2b*Akv*acc", 2 * R.N * R.T * R.Akv * R.acc());
  const int64_t exchange = 2 * R.N * R.T * R.Akv * R.acc();
  // Flash's backward (attention_backward.cu, flash_api.cpp's mha_bwd), from PyTorch 2.11's source, not
  // measured on a GPU: contiguous copies of the piece's dO and output (both strided views here), dQ, dK,
  // dV, and its float32 dq accumulator, softmax_d and, with GQA, dK/dV expanded to Hq heads.
  const int64_t kernel = R.cuda() ? R.N * n * (3 * R.Aq + 2 * R.Akv) * R.s + R.flash_dq_accum(n) +
                                        R.flash_softmax_d(n) + R.flash_expanded(n)
                                  : R.attn_backward(n);
  if (exchange >= kernel)
    p.add("the accumulator received (send_recv): 2 x N*2b*Akv*acc", exchange);
  else if (R.cuda())
    p.add(
        fmt::format("one {}'s flash backward: N*{}*(3*Aq + 2*Akv)*s (dO and output copied, dQ, dK, dV) + dq "
                    "accumulator, softmax_d, GQA expansion",
                    whole ? "b x b pair" : "c x c tile", whole ? "b" : "c"),
        kernel);
  else
    p.add(fmt::format("one {}'s backward: N*{}*(2*Aq + 2*Akv)*s + the kernel's scratch",
                      whole ? "b x b pair" : "c x c tile", whole ? "b" : "c"),
          kernel);
}

}  // namespace

std::vector<PhaseEstimate> ring_phases(const MemoryTerms& D) {
  const MemoryTerms R = ring_rows(D);
  const RingTensors t(R);
  const int64_t top = D.L - 1, n = R.N * R.T;
  const std::string inputs = fmt::format("layer inputs x_0..x_{} (2b rows each)", top);
  std::vector<PhaseEstimate> out;
  {
    // The whole layer under no grad at the top layer: the stored inputs and the output being built with the
    // MLP over every row, or q, k, v being made, or the ring.
    PhaseBuilder f("forward");
    add_checkpoints(f, R, inputs, top + 1);
    PhaseBuilder a("a"), r("r"), m("m");
    a.add("normed rows: N*2b*d*s", t.x);
    // Each projection over the rows, its blocks RoPE'd apart, then concatenated: three q-sized tensors at
    // q's concatenation; q and three k-sized at k's.
    a.add("q or k being made: max(3 x N*2b*Aq*s, N*2b*(Aq + 3*Akv)*s)", std::max(3 * t.q, t.q + 3 * t.k));
    add_ring_forward(r, R, t, R.T / 2);
    m.add("attention output of the rows: N*2b*Aq*s", t.q);
    m.add("o_proj output, x1, its norm, and the MLP's temporaries: N*2b*2*d*s + mlp_forward(N*2b)",
          n * 2 * R.d * R.s + R.mlp_forward(n));
    add_highest(f, {a.done(), r.done(), m.done()});
    out.push_back(f.done());
  }
  // The head over the rank's rows whole (full logits): checkpoint's, on the rows view.
  for (auto& phase : checkpoint_phases(R, Partitioning{R.T, R.T}, /*chunked_head=*/false))
    if (phase.name.rfind("head", 0) == 0) out.push_back(phase);
  // The top layer again with grad: its graph on the rows (as ulysses' without the exchanges: q, k, v are
  // what the ring saves), then the MLP's backward or the ring's. The attention output of the rows, o_proj's
  // input, is alive until o_proj's backward, after the MLP's and before the ring's.
  auto layer_graph = [&](PhaseBuilder& p, bool with_mlp) {
    add_checkpoints(p, R, inputs, top + 1);
    p.add("the attention half below q, k, v: N*2b*(attn_row - Aq*s + kv_row - 2*Akv*s - output_norm)",
          n * (R.attn_row() - R.Aq * R.s + R.kv_row() - 2 * R.Akv * R.s - R.output_norm()));
    if (with_mlp) {
      p.add("the attention output of the rows (o_proj's input): N*2b*Aq*s", t.q);
      p.add("the MLP half below its output norm: N*2b*(mlp_row - output_norm)",
            n * (R.mlp_row() - R.output_norm()));
    }
    p.add("rope tables of q and k, each block's: 4*2b*hd*s", 2 * R.rope(R.T));
    p.add("saved by the ring: q, k, v, output, logsumexp: N*2b*(Aq + 2*Akv + attn_out_row)",
          t.q + 2 * t.k + n * R.attn_out_row());
  };
  {
    PhaseBuilder p("layer mlp backward");
    layer_graph(p, true);
    p.add("dy and the layer output: 2 x N*2b*d*s", 2 * t.x);
    p.add(mlp_backward_name(R, "MLP backward: max(N*2b*I*s + d*I*s, 2 x N*2b*I*s)"),
          R.mlp_backward(R.T, false));
    out.push_back(p.done());
  }
  {
    // RingAttention::backward: dO (a strided view of the rows' gradient) made contiguous, then the ring's.
    PhaseBuilder p("layer attention backward");
    layer_graph(p, false);
    p.add("dy, the layer output, and the gradient of x1: 3 x N*2b*d*s", 3 * t.x);
    p.add("dO of the rows, and made contiguous for the kernel: 2 x N*2b*Aq*s", 2 * t.q);
    add_ring_backward(p, R, t, R.T / 2);
    out.push_back(p.done());
  }
  return data_parallel_phases(R, std::move(out), FirstInput::kept);
}

std::vector<PhaseEstimate> streambp_ring_phases(const MemoryTerms& D, const Partitioning& partition) {
  const MemoryTerms R = ring_rows(D);
  const RingTensors t(R);
  const int64_t b = R.T / 2, c = std::min(partition.rows, R.T), c_qkv = std::min(c, b);
  const int64_t tile = c_qkv;  // the ring's pieces: c x c tiles of its b x b pairs
  const int64_t top = D.L - 1;
  const std::string inputs = layer_inputs_label(top, FirstInput::recomputed) + " (2b rows each)";
  const int64_t inputs_alive = layer_inputs_alive(top, FirstInput::recomputed);
  // q, k, v made c rows at a time (never across the two blocks) into their buffers; beside them at the
  // chunk's high point, q's RoPE (rope.cpp: x, rotate_half's concatenation, x cos, rotated sin, their sum)
  // with the chunk's normed rows and the cos and sin tables (k's is the same on Akv <= Aq).
  auto add_qkv_values = [&](PhaseBuilder& p) {
    p.add("q, k, v of the rows: N*2b*(Aq + 2*Akv)*s", t.q + 2 * t.k);
    p.add("one chunk's normed rows and q's RoPE: N*c*(d + 5*Aq)*s + rope tables",
          R.N * c_qkv * (R.d + 5 * R.Aq) * R.s + R.rope(c_qkv));
  };
  std::vector<PhaseEstimate> out;
  {
    // ring_layer_in_chunks at the top layer: the stored inputs and the one read, then q, k, v being made,
    // or the ring, or the output being built with one chunk's o_proj and MLP.
    PhaseBuilder f("forward");
    add_checkpoints(f, R, inputs, inputs_alive);
    PhaseBuilder a("a"), r("r"), m("m");
    add_qkv_values(a);
    add_ring_forward(r, R, t, tile);
    m.add("attention output of the rows: N*2b*Aq*s", t.q);
    m.add("the layer's output being built: N*2b*d*s", t.x);
    m.add(
        "one chunk's attention rows, o_proj output, x1, its norm, and its MLP's temporaries: N*c*(Aq + "
        "2*d)*s "
        "+ mlp_forward(N*c)",
        R.N * c * (R.Aq + 2 * R.d) * R.s + R.mlp_forward(R.N * c));
    add_highest(f, {a.done(), r.done(), m.done()});
    out.push_back(f.done());
  }
  out.push_back(rows_head_chunk(R, partition));  // the head in chunks of c_l of the rank's rows

  // Layer backward at the top layer: the inputs below and its own, dY (its rows becoming dx's).
  auto layer_base = [&](PhaseBuilder& p) {
    add_checkpoints(p, R, inputs, inputs_alive);
    p.add("dy, its rows becoming dx's: N*2b*d*s", t.x);
  };
  // What the ring's node keeps from b. to d.: q, k, v (leaves), the output and its logsumexp.
  auto add_ring_saved = [&](PhaseBuilder& p) {
    p.add("saved by the ring: q, k, v, output, logsumexp: N*2b*(2*Aq + 2*Akv)*s + N*2b*Hq*f",
          2 * t.q + 2 * t.k + t.lse);
  };
  {
    PhaseBuilder p("layer q, k, v values");
    layer_base(p);
    add_qkv_values(p);
    out.push_back(p.done());
  }
  {
    PhaseBuilder p("layer ring attention");
    layer_base(p);
    add_ring_forward(p, R, t, tile);
    out.push_back(p.done());
  }
  {
    PhaseBuilder p("layer mlp chunks");
    layer_base(p);
    add_ring_saved(p);
    p.add("dO of the rows being filled: N*2b*Aq*s", t.q);
    p.add("one chunk's attention rows (a copy) and its graph below the MLP output norm: N*c*(Aq*s + mlp_row)",
          R.N * c * (R.Aq * R.s + R.mlp_row()));
    p.add("chunk gradient in flight: N*c*d*s", R.N * c * R.d * R.s);
    p.add(mlp_backward_name(R, "MLP backward: max(N*c*I*s + d*I*s [+ N*c*d*s], 2 x N*c*I*s)"),
          R.mlp_backward(c, true));
    out.push_back(p.done());
  }
  {
    // The ring's backward with dO given whole and contiguous (no copy of it), in c x c tiles.
    PhaseBuilder p("layer ring attention backward");
    layer_base(p);
    add_ring_saved(p);
    p.add("dO of the rows: N*2b*Aq*s", t.q);
    add_ring_backward(p, R, t, tile);
    out.push_back(p.done());
  }
  {
    PhaseBuilder p("layer q, k, v chunks");
    layer_base(p);
    p.add("dq, dk, dv of the rows: N*2b*(Aq + 2*Akv)*s", t.q + 2 * t.k);
    p.add("chunk graph of the q, k, v path: N*c*(attn_row + kv_row)",
          R.N * c_qkv * (R.attn_row() + R.kv_row()));
    p.add("q and k rope tables, the chunk's rows", 2 * R.rope(c_qkv));
    p.add("its backward: N*c*(2*Aq + 2*Akv + d)*s", R.N * c_qkv * (2 * R.Aq + 2 * R.Akv + R.d) * R.s);
    out.push_back(p.done());
  }
  return data_parallel_phases(R, std::move(out), FirstInput::recomputed);
}

}  // namespace bpbench
