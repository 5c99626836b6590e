// ring_estimate.cpp: ring_estimate.h. Each phase names the tensors alive at its high point, in the order the
// code (ring.cpp, ring_attention.cpp, sequence_parallel.cpp's checkpointed_rows_step) makes them. A
// send_recv holds the tensor sent and the one received (comm.cpp: the receive buffer is new).
#include "impls/machinery/ring_estimate.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "harness/model/phase_builder.h"
#include "impls/machinery/layerwise_estimate.h"
#include "impls/machinery/sequence_parallel.h"

namespace bpbench {

MeshViews mesh_views(const MemoryTerms& D) {
  const int64_t P = D.ranks, U = D.ulysses;
  if (U < 1 || P % U != 0 || !dist::heads_split(D.Hq, D.Hkv, U))
    throw std::invalid_argument(
        fmt::format("estimate: ulysses_degree {} cannot split {} ranks and {} query heads, {} K/V heads (it "
                    "must divide the ranks and the query heads, and divide the K/V heads or be a multiple "
                    "of them)",
                    U, P, D.Hq, D.Hkv));
  const int64_t half = (D.T + 2 * P - 1) / (2 * P);  // h = b / U: every block's rows on the rank
  MeshViews v;
  v.ulysses = U;
  v.kv_repeat = dist::kv_copies(D.Hkv, U);
  v.rows = D;
  v.rows.T = 2 * half;
  v.ring = D;
  v.ring.T = 2 * U * half;
  v.ring.Hq = D.Hq / U;
  v.ring.Hkv = D.Hkv * v.kv_repeat / U;
  v.ring.Aq = v.ring.Hq * D.hd;
  v.ring.Akv = v.ring.Hkv * D.hd;
  return v;
}

namespace {

// The tensors of the rank's rows: one (N, 2h, d); q (N, Hq, 2h, hd); k (N, Hkv, 2h, hd); the ring's K
// (N, Hk'/U, 2b, hd: k itself on the plain ring), the K/V pair that travels (2 of those) and the ring's Q,
// K, V together; the logsumexp of the rows (N, Hq, 2h) in f. q, the output and the logsumexp have the same
// bytes in both views.
struct RingTensors {
  int64_t x, q, k, k_ring, pair, qkv_ring, lse;
  explicit RingTensors(const MeshViews& v)
      : x(v.rows.N * v.rows.T * v.rows.d * v.rows.s),
        q(v.rows.N * v.rows.T * v.rows.Aq * v.rows.s),
        k(v.rows.N * v.rows.T * v.rows.Akv * v.rows.s),
        k_ring(v.ring.N * v.ring.T * v.ring.Akv * v.ring.s),
        pair(2 * k_ring),
        qkv_ring(q + 2 * k_ring),
        lse(v.rows.N * v.rows.T * v.rows.Hq * v.rows.f) {}
};

// One pass of streambp-ring's ring (streambp_ring.cpp: ring_passes): G passes split the ring's heads, so
// that its pair, accumulators and kernels are a pass's; the rows' view is unchanged.
MeshViews pass_views(const MeshViews& v, int64_t passes) {
  MeshViews p = v;
  p.ring.Hq /= passes;
  p.ring.Hkv /= passes;
  p.ring.Aq /= passes;
  p.ring.Akv /= passes;
  return p;
}

// The forward round the ring (RingAttention::forward) beside q, k, v: the output and logsumexp being merged
// into, the travelling pair, and at its high point either an exchange (the pair received beside the one
// sent) or one piece of n queries by n keys (a b x b pair whole, n = b, or a tile of it): its partial output
// and logsumexp with the kernel's scratch, then the merge's (N, Hq, n, hd) and two (N, Hq, n) in f (the new
// logsumexp and one weight at a time; for bfloat16 also the piece's output upcast).
void add_ring_forward(PhaseBuilder& p, const MeshViews& v, const RingTensors& t, int64_t n) {
  const MemoryTerms& R = v.ring;
  p.add("q, k, v of the rows: N*2h*(Aq + 2*Akv)*s", t.q + 2 * t.k);
  if (v.ulysses > 1) p.add("the ring's Q, K, V (exchanged, reordered): N*2b*(Aq' + 2*Ak')*s", t.qkv_ring);
  p.add("output and logsumexp being merged into: N*2h*(Aq*s + Hq*f)", t.q + t.lse);
  p.add("the K/V pair travelling: 2 x N*2b*Ak'*s", t.pair);
  const int64_t exchange = t.pair;
  const int64_t kernel = R.attn_forward(n, n);  // CPU: output, logsumexp, scratch; flash: output, logsumexp
  const int64_t piece_out = R.N * n * R.Aq * R.s, piece_lse = R.N * n * R.Hq * R.f;
  const int64_t upcast = R.up ? R.N * n * R.Aq * R.f : 0;  // next's output in f beside the sum
  const int64_t merge = piece_out + piece_lse + R.N * n * R.Aq * R.f + upcast + 2 * piece_lse;
  if (exchange >= std::max(kernel, merge))
    p.add("the pair received (send_recv): 2 x N*2b*Ak'*s", exchange);
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
void add_ring_backward(PhaseBuilder& p, const MeshViews& v, const RingTensors& t, int64_t n) {
  const MemoryTerms& R = v.ring;
  const bool whole = n == R.T / 2;
  p.add("dQ: N*2b*Aq'*acc", R.N * R.T * R.Aq * R.acc());
  p.add("the K/V pair travelling: 2 x N*2b*Ak'*s", t.pair);
  p.add("its dK/dV accumulator: 2 x N*2b*Ak'*acc", 2 * R.N * R.T * R.Akv * R.acc());
  const int64_t exchange = 2 * R.N * R.T * R.Akv * R.acc();
  // Flash's backward (attention_backward.cu, flash_api.cpp's mha_bwd), from PyTorch 2.11's source, not
  // measured on a GPU: contiguous copies of the piece's dO and output (both strided views here), dQ, dK,
  // dV, and its float32 dq accumulator, softmax_d and, with GQA, dK/dV expanded to Hq heads.
  const int64_t kernel = R.cuda() ? R.N * n * (3 * R.Aq + 2 * R.Akv) * R.s + R.flash_dq_accum(n) +
                                        R.flash_softmax_d(n) + R.flash_expanded(n)
                                  : R.attn_backward(n);
  if (exchange >= kernel)
    p.add("the accumulator received (send_recv): 2 x N*2b*Ak'*acc", exchange);
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

// The 2-D mesh's exchanges around the ring (mesh_attention.cpp), as moments beside what the caller holds:
// q, k, v of the rows going out (K/V repeated where Hkv < U; the all-to-all's send and receive buffers, then
// the receive buffer and the ring's Q, K, V made from it), and the output coming back (the ring's output
// reordered beside it, then the send and receive buffers).
void add_mesh_exchange_in(PhaseBuilder& p, const MeshViews& v, const RingTensors& t) {
  p.add("q, k, v of the rows: N*2h*(Aq + 2*Akv)*s", t.q + 2 * t.k);
  if (v.kv_repeat > 1) p.add("k, v repeated to Hk' heads: 2 x N*2h*Hk'*hd*s", 2 * t.k_ring);
  p.add("all-to-all send and receive buffers: 2 x N*2b*(Aq' + 2*Ak')*s", 2 * t.qkv_ring);
}
void add_mesh_exchange_out(PhaseBuilder& p, const RingTensors& t) {
  p.add("q, k, v of the rows: N*2h*(Aq + 2*Akv)*s", t.q + 2 * t.k);
  p.add("the ring's output reordered, the all-to-all's send and receive buffers: 3 x N*2h*Aq*s", 3 * t.q);
}

// The no-grad forward's moments at the top layer: q, k, v being made, the ring, the MLP, and on the mesh
// its two exchanges.
std::vector<PhaseEstimate> forward_moments(const MeshViews& v, const RingTensors& t, PhaseEstimate qkv,
                                           PhaseEstimate ring, PhaseEstimate mlp) {
  std::vector<PhaseEstimate> moments{std::move(qkv), std::move(ring), std::move(mlp)};
  if (v.ulysses > 1) {
    PhaseBuilder in("exchange in"), back("exchange out");
    add_mesh_exchange_in(in, v, t);
    add_mesh_exchange_out(back, t);
    moments.push_back(in.done());
    moments.push_back(back.done());
  }
  return moments;
}

}  // namespace

std::vector<PhaseEstimate> ring_phases(const MemoryTerms& D) {
  const MeshViews v = mesh_views(D);
  const MemoryTerms& R = v.rows;
  const RingTensors t(v);
  const int64_t top = D.L - 1, n = R.N * R.T;
  const std::string inputs = fmt::format("layer inputs x_0..x_{} (2h rows each)", top);
  std::vector<PhaseEstimate> out;
  {
    // The whole layer under no grad at the top layer: the stored inputs and the output being built with the
    // MLP over every row, or q, k, v being made, or the ring.
    PhaseBuilder f("forward");
    add_checkpoints(f, R, inputs, top + 1);
    PhaseBuilder a("a"), r("r"), m("m");
    a.add("normed rows: N*2h*d*s", t.x);
    // Each projection over the rows, its blocks RoPE'd apart, then concatenated: three q-sized tensors at
    // q's concatenation; q and three k-sized at k's.
    a.add("q or k being made: max(3 x N*2h*Aq*s, N*2h*(Aq + 3*Akv)*s)", std::max(3 * t.q, t.q + 3 * t.k));
    add_ring_forward(r, v, t, v.ring.T / 2);
    m.add("attention output of the rows: N*2h*Aq*s", t.q);
    m.add("o_proj output, x1, its norm, and the MLP's temporaries: N*2h*2*d*s + mlp_forward(N*2h)",
          n * 2 * R.d * R.s + R.mlp_forward(n));
    add_highest(f, forward_moments(v, t, a.done(), r.done(), m.done()));
    out.push_back(f.done());
  }
  // The head over the rank's rows whole (full logits): checkpoint's, on the rows view.
  for (auto& phase : checkpoint_phases(R, Partitioning{R.T, R.T}, /*chunked_head=*/false))
    if (phase.name.rfind("head", 0) == 0) out.push_back(phase);
  // The top layer again with grad: its graph on the rows (as ulysses' without the exchanges: q, k, v are
  // what the ring saves), then the MLP's backward or the ring's. The attention output of the rows, o_proj's
  // input, is alive until o_proj's backward, after the MLP's and before the ring's.
  // ring_saved false: after the ring's backward, its saved tensors released (the mesh's exchange back).
  auto layer_graph = [&](PhaseBuilder& p, bool with_mlp, bool ring_saved = true) {
    add_checkpoints(p, R, inputs, top + 1);
    p.add("the attention half below q, k, v: N*2h*(attn_row - Aq*s + kv_row - 2*Akv*s - output_norm)",
          n * (R.attn_row() - R.Aq * R.s + R.kv_row() - 2 * R.Akv * R.s - R.output_norm()));
    if (with_mlp) {
      p.add("the attention output of the rows (o_proj's input): N*2h*Aq*s", t.q);
      p.add("the MLP half below its output norm: N*2h*(mlp_row - output_norm)",
            n * (R.mlp_row() - R.output_norm()));
    }
    p.add("rope tables of q and k, each block's: 4*2h*hd*s", 2 * R.rope(R.T));
    if (ring_saved)
      p.add("saved by the ring: its q, k, v, output, logsumexp: N*2b*(Aq' + 2*Ak' + attn_out_row')",
            t.qkv_ring + n * R.attn_out_row());
  };
  {
    PhaseBuilder p("layer mlp backward");
    layer_graph(p, true);
    p.add("dy and the layer output: 2 x N*2h*d*s", 2 * t.x);
    p.add(mlp_backward_name(R, "MLP backward: max(N*2h*I*s + d*I*s, 2 x N*2h*I*s)"),
          R.mlp_backward(R.T, false));
    out.push_back(p.done());
  }
  if (v.ulysses == 1) {
    // RingAttention::backward: dO (a strided view of the rows' gradient) made contiguous, then the ring's.
    PhaseBuilder p("layer attention backward");
    layer_graph(p, false);
    p.add("dy, the layer output, and the gradient of x1: 3 x N*2h*d*s", 3 * t.x);
    p.add("dO of the rows, and made contiguous for the kernel: 2 x N*2h*Aq*s", 2 * t.q);
    add_ring_backward(p, v, t, v.ring.T / 2);
    out.push_back(p.done());
  } else {
    // On the mesh: dO of the rows exchanged to the ring's heads (the all-to-all's buffers beside it), then
    // reordered (contiguous: the ring takes it as it is); the ring's backward; then its dQ, dK, dV (the
    // ring's saved tensors released) exchanged back to the rows.
    PhaseBuilder p("layer attention backward");
    layer_graph(p, false);
    p.add("dy, the layer output, and the gradient of x1: 3 x N*2h*d*s", 3 * t.x);
    p.add("dO, exchanged and reordered: N*2b*Aq'*s", t.q);
    add_ring_backward(p, v, t, v.ring.T / 2);
    PhaseEstimate high = p.done();
    PhaseBuilder d_out("layer attention backward");
    layer_graph(d_out, false);
    d_out.add("dy, the layer output, and the gradient of x1: 3 x N*2h*d*s", 3 * t.x);
    d_out.add("dO of the rows, the all-to-all's send and receive buffers: 3 x N*2h*Aq*s", 3 * t.q);
    keep_larger(high, d_out.done());
    PhaseBuilder grads("layer attention backward");
    layer_graph(grads, false, /*ring_saved=*/false);
    grads.add("dy, the layer output, and the gradient of x1: 3 x N*2h*d*s", 3 * t.x);
    grads.add("dQ, dK, dV of the ring, the all-to-all's send and receive buffers: 3 x N*2b*(Aq' + 2*Ak')*s",
              3 * t.qkv_ring);
    keep_larger(high, grads.done());
    out.push_back(high);
  }
  return data_parallel_phases(R, std::move(out), FirstInput::kept);
}

std::vector<PhaseEstimate> streambp_ring_phases(const MemoryTerms& D, const Partitioning& partition) {
  const MeshViews v = mesh_views(D);
  const MemoryTerms& R = v.rows;
  const RingTensors t(v);
  // The layer's ring with grad and its backward in passes of one K/V head on the plain ring (vp, tp: a
  // pass's ring terms; the rows' stay whole).
  const int64_t passes = v.ulysses == 1 ? D.Hkv : 1;
  const MeshViews vp = pass_views(v, passes);
  const RingTensors tp(vp);
  const int64_t h = R.T / 2, c = std::min(partition.rows, R.T), c_qkv = std::min(c, h);
  const int64_t tile = std::min(c, v.ring.T / 2);  // the ring's pieces: c x c tiles of its b x b pairs
  const int64_t top = D.L - 1;
  const std::string inputs = layer_inputs_label(top, FirstInput::recomputed) + " (2h rows each)";
  const int64_t inputs_alive = layer_inputs_alive(top, FirstInput::recomputed);
  // q, k, v made c rows at a time (never across the two blocks) into their buffers; beside them at the
  // chunk's high point, q's RoPE (rope.cpp: x, rotate_half's concatenation, x cos, rotated sin, their sum)
  // with the chunk's normed rows and the cos and sin tables (k's is the same on Akv <= Aq).
  auto add_qkv_values = [&](PhaseBuilder& p) {
    p.add("q, k, v of the rows: N*2h*(Aq + 2*Akv)*s", t.q + 2 * t.k);
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
    add_ring_forward(r, v, t, tile);
    m.add("attention output of the rows: N*2h*Aq*s", t.q);
    m.add("the layer's output being built: N*2h*d*s", t.x);
    m.add(
        "one chunk's attention rows, o_proj output, x1, its norm, and its MLP's temporaries: N*c*(Aq + "
        "2*d)*s "
        "+ mlp_forward(N*c)",
        R.N * c * (R.Aq + 2 * R.d) * R.s + R.mlp_forward(R.N * c));
    add_highest(f, forward_moments(v, t, a.done(), r.done(), m.done()));
    out.push_back(f.done());
  }
  out.push_back(rows_head_chunk(R, partition));  // the head in chunks of c_l of the rank's rows

  // Layer backward at the top layer: the inputs below and its own, dY (its rows becoming dx's).
  auto layer_base = [&](PhaseBuilder& p) {
    add_checkpoints(p, R, inputs, inputs_alive);
    p.add("dy, its rows becoming dx's: N*2h*d*s", t.x);
  };
  // What lives from b. to d.: q, k, v (leaves), the attention output and the ring's logsumexp; what the
  // ring's node keeps is the same tensors on the plain ring, on the mesh its own Q, K, V and output.
  auto add_ring_saved = [&](PhaseBuilder& p) {
    p.add("q, k, v (leaves), the attention output, the logsumexp: N*2h*(2*Aq + 2*Akv)*s + N*2h*Hq*f",
          2 * t.q + 2 * t.k + t.lse);
    if (v.ulysses > 1)
      p.add("saved by the ring: its Q, K, V and output: N*2b*(2*Aq' + 2*Ak')*s", t.qkv_ring + t.q);
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
    add_ring_forward(p, vp, tp, tile);  // the last pass: the others' outputs done beside its own
    PhaseEstimate high = p.done();
    if (v.ulysses > 1) {  // the exchanges around it, with grad: the ring's node keeps Q, K, V, output, lse
      PhaseBuilder in("layer ring attention");
      layer_base(in);
      add_mesh_exchange_in(in, v, t);
      keep_larger(high, in.done());
      PhaseBuilder back("layer ring attention");
      layer_base(back);
      back.add("saved by the ring: its Q, K, V, output, logsumexp: N*2b*(2*Aq' + 2*Ak')*s + N*2h*Hq*f",
               t.qkv_ring + t.q + t.lse);
      add_mesh_exchange_out(back, t);
      keep_larger(high, back.done());
    }
    out.push_back(high);
  }
  {
    PhaseBuilder p("layer mlp chunks");
    layer_base(p);
    add_ring_saved(p);
    p.add("dO of the rows being filled: N*2h*Aq*s", t.q);
    p.add("one chunk's attention rows (a copy) and its graph below the MLP output norm: N*c*(Aq*s + mlp_row)",
          R.N * c * (R.Aq * R.s + R.mlp_row()));
    p.add("chunk gradient in flight: N*c*d*s", R.N * c * R.d * R.s);
    p.add(mlp_backward_name(R, "MLP backward: max(N*c*I*s + d*I*s [+ N*c*d*s], 2 x N*c*I*s)"),
          R.mlp_backward(c, true));
    out.push_back(p.done());
  }
  {
    // The ring's backward with dO given whole and contiguous (no copy of it), in c x c tiles. On the mesh dO
    // goes to the ring's heads first (the all-to-all's buffers beside it) and arrives reordered; after the
    // ring's backward (its saved tensors released) its dQ, dK, dV go back to the rows.
    PhaseBuilder p("layer ring attention backward");
    layer_base(p);
    add_ring_saved(p);
    p.add("dO of the rows: N*2h*Aq*s", t.q);
    if (v.ulysses > 1) p.add("dO, exchanged and reordered: N*2b*Aq'*s", t.q);
    add_ring_backward(p, vp, tp, tile);  // the first pass: every pass's saved tensors still alive
    PhaseEstimate high = p.done();
    if (v.ulysses > 1) {
      PhaseBuilder d_out("layer ring attention backward");
      layer_base(d_out);
      add_ring_saved(d_out);
      d_out.add("dO of the rows, the all-to-all's send and receive buffers: 3 x N*2h*Aq*s", 3 * t.q);
      keep_larger(high, d_out.done());
      PhaseBuilder grads("layer ring attention backward");
      layer_base(grads);
      grads.add("q, k, v (leaves), the attention output and dO of the rows: N*2h*(3*Aq + 2*Akv)*s",
                3 * t.q + 2 * t.k);
      grads.add("dQ, dK, dV of the ring, the all-to-all's send and receive buffers: 3 x N*2b*(Aq' + 2*Ak')*s",
                3 * t.qkv_ring);
      keep_larger(high, grads.done());
    }
    out.push_back(high);
  }
  {
    PhaseBuilder p("layer q, k, v chunks");
    layer_base(p);
    p.add("dq, dk, dv of the rows: N*2h*(Aq + 2*Akv)*s", t.q + 2 * t.k);
    p.add("chunk graph of the q, k, v path: N*c*(attn_row + kv_row)",
          R.N * c_qkv * (R.attn_row() + R.kv_row()));
    p.add("q and k rope tables, the chunk's rows", 2 * R.rope(c_qkv));
    p.add("its backward: N*c*(2*Aq + 2*Akv + d)*s", R.N * c_qkv * (2 * R.Aq + 2 * R.Akv + R.d) * R.s);
    if (passes > 1)
      p.add("the chunk's dq, dk, dv gathered from the passes: N*c*(Aq + 2*Akv)*s",
            R.N * c_qkv * (R.Aq + 2 * R.Akv) * R.s);
    out.push_back(p.done());
  }
  return data_parallel_phases(R, std::move(out), FirstInput::recomputed);
}

}  // namespace bpbench
