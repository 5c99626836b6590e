// sequence_parallel_estimate.cpp: sequence_parallel_estimate.h. Each phase names the tensors alive at its
// high point, in the order the code (streambp_ulysses.cpp, ulysses.cpp, sequence_parallel.cpp) makes them.
// An all-to-all holds its send buffer (the inputs packed per destination rank) and its receive buffer, then
// the receive buffer and the results made from it: twice what it carries, above its inputs.
#include "impls/machinery/sequence_parallel_estimate.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "harness/model/phase_builder.h"
#include "impls/machinery/layerwise_estimate.h"
#include "impls/machinery/sequence_parallel.h"

namespace bpbench {

RankViews rank_views(const MemoryTerms& D) {
  const int64_t P = D.ranks;
  if (!dist::heads_split(D.Hq, D.Hkv, P))
    throw std::invalid_argument(fmt::format(
        "estimate: {} ranks cannot split {} query heads and {} K/V heads (the ranks must divide the query "
        "heads, and divide the K/V heads or be a multiple of them)",
        P, D.Hq, D.Hkv));
  RankViews v;
  v.kv_repeat = dist::kv_copies(D.Hkv, P);
  v.rows = D;
  v.rows.T = (D.T + P - 1) / P;
  v.heads = D;
  v.heads.T = P * v.rows.T;
  v.heads.Hq = D.Hq / P;
  v.heads.Hkv = D.Hkv * v.kv_repeat / P;
  v.heads.Aq = v.heads.Hq * D.hd;
  v.heads.Akv = v.heads.Hkv * D.hd;
  return v;
}

namespace {

// qkv_to_heads (sequence_parallel.cpp): q, k, v of the rows in buffers, K/V repeated where Hkv < P, then
// the all-to-all.
void add_qkv_to_heads(PhaseBuilder& p, const RankViews& v) {
  p.add("q, k, v of the rows: N*Ts*(Aq + 2*Akv)*s", v.q() + 2 * v.k_rows());
  if (v.kv_repeat > 1) p.add("k, v repeated to Hk' = P heads: 2 x N*Ts*Hk'*hd*s", 2 * v.k_heads());
  p.add("all-to-all send and receive buffers (then receive + Q, K, V of the heads): 2 x N*T'*(Aq' + 2*Ak')*s",
        2 * v.qkv());
}

// attention_rows: Q, K, V of the heads, the output (N, T', Aq') being filled block by block (a block's
// attention with its kernel's buffers), then its all-to-all back and the two copies that reorder the rows.
void add_attention_rows(PhaseBuilder& p, const RankViews& v, int64_t rows, int64_t window) {
  const MemoryTerms& H = v.heads;
  p.add("Q, K, V of the rank's heads: N*T'*(Aq' + 2*Ak')*s", v.qkv());
  p.add("attention output of the heads: N*T'*Aq'*s", v.q());
  const int64_t block = H.attn_forward(rows, H.T, window);
  if (block > 2 * v.q())
    p.add("the last query block's attention (output, logsumexp, merge, scratch)", block);
  else
    p.add("all-to-all back (send + receive, then receive + the rows' copies): 2 x N*Ts*Aq*s", 2 * v.q());
}

}  // namespace

std::vector<PhaseEstimate> streambp_ulysses_phases(const MemoryTerms& D, const Partitioning& partition) {
  const RankViews v = rank_views(D);
  const MemoryTerms& R = v.rows;
  const MemoryTerms& H = v.heads;
  const int64_t c = std::min(partition.rows, R.T);
  const int64_t top = D.L - 1, window = D.attention_layers.front().window;
  std::vector<PhaseEstimate> out;
  {
    // layer_in_chunks at the top layer: the stored inputs and the one read, then a. and b., or the output
    // being built with one chunk's o_proj and MLP.
    PhaseBuilder f("forward");
    add_checkpoints(f, R, layer_inputs_label(top, FirstInput::recomputed) + " (Ts rows each)",
                    layer_inputs_alive(top, FirstInput::recomputed));
    PhaseBuilder a("a"), b("b"), m("m");
    add_qkv_to_heads(a, v);
    add_attention_rows(b, v, c, window);
    m.add("attention output of the rows: N*Ts*Aq*s", v.q());
    m.add("the layer's output being built: N*Ts*d*s", v.x());
    m.add("one chunk's o_proj output, x1, its norm, and its MLP's temporaries: N*c*2*d*s + mlp_forward(N*c)",
          R.N * c * 2 * R.d * R.s + R.mlp_forward(R.N * c));
    add_highest(f, {a.done(), b.done(), m.done()});
    out.push_back(f.done());
  }
  out.push_back(rows_head_chunk(R, partition));  // the head in chunks of c_l of the rank's rows

  // Layer backward at the top layer: the inputs below and its own, dY (its rows becoming dx's).
  auto layer_base = [&](PhaseBuilder& p) {
    add_checkpoints(p, R, layer_inputs_label(top, FirstInput::recomputed) + " (Ts rows each)",
                    layer_inputs_alive(top, FirstInput::recomputed));
    p.add("dy, its rows becoming dx's: N*Ts*d*s", v.x());
  };
  {
    PhaseBuilder p("layer q, k, v to heads");
    layer_base(p);
    add_qkv_to_heads(p, v);
    out.push_back(p.done());
  }
  {
    PhaseBuilder p("layer attention to rows");
    layer_base(p);
    add_attention_rows(p, v, c, window);
    out.push_back(p.done());
  }
  {
    PhaseBuilder p("layer mlp chunks");
    layer_base(p);
    p.add("Q, K, V of the rank's heads: N*T'*(Aq' + 2*Ak')*s", v.qkv());
    p.add("attention output of the rows (its rows becoming dO's): N*Ts*Aq*s", v.q());
    p.add("chunk graph below the MLP output norm: N*c*(mlp_row - output_norm) + the attention output norm",
          R.N * c * (R.mlp_row() - R.output_norm() + R.output_norm()));
    p.add("chunk gradient in flight: N*c*d*s", R.N * c * R.d * R.s);
    p.add(mlp_backward_name(R, "MLP backward: max(N*c*I*s + d*I*s [+ N*c*d*s], 2 x N*c*I*s)"),
          R.mlp_backward(c, true));
    out.push_back(p.done());
  }
  {
    PhaseBuilder p("layer attention backward");
    layer_base(p);
    p.add("Q (its rows becoming dQ's), K, V of the rank's heads: N*T'*(Aq' + 2*Ak')*s", v.qkv());
    p.add("dO of the heads: N*T'*Aq'*s", v.q());
    p.add("dK, dV accumulators: 2 x N*T'*Ak'*acc", 2 * H.N * H.T * H.Akv * H.acc());
    const int64_t keys = MemoryTerms::visible_keys(c, H.T, window);
    p.add("the last block's saved output and logsumexp: N*c*attn_out_row", H.N * c * H.attn_out_row());
    add_attention_backward(p, H, c, keys, window, "c", "T'", /*into_sink=*/true);
    // The kernel's incoming dO is the block's rows of dO reordered: a copy, unless one head per rank makes
    // it a view.
    if (H.Hq == 1)
      p.add("the block's dO, a view of dO (one head per rank): -N*c*Aq'*s", -H.N * c * H.Aq * H.s);
    PhaseBuilder exchange("layer attention backward");  // dO to the heads, before the blocks
    layer_base(exchange);
    exchange.add("Q, K, V of the rank's heads: N*T'*(Aq' + 2*Ak')*s", v.qkv());
    exchange.add("dO of the rows, then the all-to-all's buffers: 3 x N*Ts*Aq*s", 3 * v.q());
    PhaseEstimate high = p.done();
    keep_larger(high, exchange.done());
    if (H.acc() != H.s) {  // after the blocks, the accumulators rounded to the model dtype beside them
      PhaseBuilder rounding("layer attention backward");
      layer_base(rounding);
      rounding.add("dQ, K, V of the rank's heads, and dO: N*T'*(2*Aq' + 2*Ak')*s", v.qkv() + v.q());
      rounding.add("dK, dV accumulators and their rounded copies: 2 x N*T'*Ak'*(acc + s)",
                   2 * H.N * H.T * H.Akv * (H.acc() + H.s));
      keep_larger(high, rounding.done());
    }
    out.push_back(high);
  }
  {
    PhaseBuilder p("layer q, k, v gradients to rows");
    layer_base(p);
    // The accumulators are gone by then (rounded and released as the attention backward ends).
    p.add("dQ, dK, dV of the heads, then the all-to-all's buffers: 3 x N*T'*(Aq' + 2*Ak')*s", 3 * v.qkv());
    out.push_back(p.done());
  }
  {
    PhaseBuilder p("layer q, k, v chunks");
    layer_base(p);
    p.add("dq, dk, dv of the rows: N*Ts*(Aq + 2*Akv)*s", v.q() + 2 * v.k_rows());
    p.add("chunk graph of the q, k, v path: N*c*(attn_row + kv_row)", R.N * c * (R.attn_row() + R.kv_row()));
    p.add("q and k rope tables, the chunk's rows", 2 * R.rope(c));
    p.add("its backward: N*c*(2*Aq + 2*Akv + 2*d)*s", R.N * c * (2 * R.Aq + 2 * R.Akv + 2 * R.d) * R.s);
    out.push_back(p.done());
  }
  return data_parallel_phases(R, std::move(out), FirstInput::recomputed);
}

std::vector<PhaseEstimate> ulysses_phases(const MemoryTerms& D) {
  const RankViews v = rank_views(D);
  const MemoryTerms& R = v.rows;
  const MemoryTerms& H = v.heads;
  const int64_t top = D.L - 1, window = D.attention_layers.front().window;
  const int64_t n = R.N * R.T;
  std::vector<PhaseEstimate> out;
  {
    // The whole layer under no grad at the top layer: the stored inputs and the output being built with the
    // MLP over every row, or the exchanges with the attention over every row.
    PhaseBuilder f("forward");
    add_checkpoints(f, R, fmt::format("layer inputs x_0..x_{} (Ts rows each)", top), top + 1);
    PhaseBuilder a("a"), b("b"), m("m");
    a.add("normed rows: N*Ts*d*s", v.x());
    add_qkv_to_heads(a, v);
    b.add("Q, K, V of the rank's heads: N*T'*(Aq' + 2*Ak')*s", v.qkv());
    b.add("attention over every row (output, logsumexp, scratch)", H.attn_forward(H.T, H.T, window));
    m.add("attention output of the rows: N*Ts*Aq*s", v.q());
    m.add("o_proj output, x1, its norm, and the MLP's temporaries: N*Ts*2*d*s + mlp_forward(N*Ts)",
          n * 2 * R.d * R.s + R.mlp_forward(n));
    add_highest(f, {a.done(), b.done(), m.done()});
    out.push_back(f.done());
  }
  // The head over the rank's rows whole (full logits): checkpoint's, on the rows view.
  for (auto& phase : checkpoint_phases(R, Partitioning{R.T, R.T}, /*chunked_head=*/false))
    if (phase.name.rfind("head", 0) == 0) out.push_back(phase);
  // The top layer again with grad (as checkpoint's whole_mlp_backward and whole_attention_backward, on the
  // two views): on the rows its graph without q, k and v themselves (the exchange saves nothing; the
  // attention saves what it received), the attention output of the rows (o_proj's input, in the MLP's
  // backward only), the rope tables;
  // on the heads what the attention saved: Q, K, V, output, logsumexp.
  auto layer_graph = [&](PhaseBuilder& p, bool with_mlp) {
    add_checkpoints(p, R, fmt::format("layer inputs x_0..x_{} (Ts rows each)", top), top + 1);
    p.add("the rows' attention half below q, k, v: N*Ts*(attn_row - Aq*s + kv_row - 2*Akv*s - output_norm)",
          n * (R.attn_row() - R.Aq * R.s + R.kv_row() - 2 * R.Akv * R.s - R.output_norm()));
    if (with_mlp) {  // o_proj's input is released by o_proj's backward, which comes after the MLP's
      p.add("the attention output of the rows (o_proj's input): N*Ts*Aq*s", v.q());
      p.add("the MLP half below its output norm: N*Ts*(mlp_row - output_norm)",
            n * (R.mlp_row() - R.output_norm()));
    }
    p.add("rope tables of q and k: 4*Ts*hd*s", 2 * R.rope(R.T));
    p.add(
        "saved by the attention: Q, K, V of the heads, output, logsumexp: N*T'*(Aq' + 2*Ak' + attn_out_row)",
        v.qkv() + H.N * H.T * H.attn_out_row());
  };
  {
    PhaseBuilder p("layer mlp backward");
    layer_graph(p, true);
    p.add("dy and the layer output: 2 x N*Ts*d*s", 2 * v.x());
    p.add(mlp_backward_name(R, "MLP backward: max(N*Ts*I*s + d*I*s, 2 x N*Ts*I*s)"),
          R.mlp_backward(R.T, false));
    out.push_back(p.done());
  }
  {
    PhaseBuilder p("layer attention backward");
    layer_graph(p, false);
    p.add("dy, the layer output, and the gradient of x1: 3 x N*Ts*d*s", 3 * v.x());
    p.add("dO of the rows, then the all-to-all's buffers: 3 x N*Ts*Aq*s", 3 * v.q());
    PhaseBuilder kernel("layer attention backward");
    layer_graph(kernel, false);
    kernel.add("dy, the layer output, and the gradient of x1: 3 x N*Ts*d*s", 3 * v.x());
    add_attention_backward(kernel, H, H.T, H.T, window, "T'", "T'");
    PhaseEstimate high = p.done();
    keep_larger(high, kernel.done());
    out.push_back(high);
  }
  return data_parallel_phases(R, std::move(out), FirstInput::kept);
}

}  // namespace bpbench
