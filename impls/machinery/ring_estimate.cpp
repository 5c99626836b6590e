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
  int64_t x, q, k, pair, lse, half_q, half_lse;
  explicit RingTensors(const MemoryTerms& R)
      : x(R.N * R.T * R.d * R.s),
        q(R.N * R.T * R.Aq * R.s),
        k(R.N * R.T * R.Akv * R.s),
        pair(2 * k),
        lse(R.N * R.T * R.Hq * R.f),
        half_q(q / 2),
        half_lse(lse / 2) {}
};

// The forward round the ring (RingAttention::forward) beside q, k, v: the output and logsumexp being merged
// into, the travelling pair, and at its high point either an exchange (the pair received beside the one
// sent) or one pair of blocks (its partial output and logsumexp with the kernel's scratch, then the merge's
// (N, Hq, b, hd) and two (N, Hq, b) in f: the new logsumexp and one weight at a time; for bfloat16 also
// the pair's output upcast).
void add_ring_forward(PhaseBuilder& p, const MemoryTerms& R, const RingTensors& t) {
  const int64_t b = R.T / 2;
  p.add("q, k, v of the rows: N*2b*(Aq + 2*Akv)*s", t.q + 2 * t.k);
  p.add("output and logsumexp being merged into: N*2b*(Aq*s + Hq*f)", t.q + t.lse);
  p.add("the K/V pair travelling: 2 x N*2b*Akv*s", t.pair);
  const int64_t exchange = t.pair;
  const int64_t kernel = R.attn_forward(b, b);  // CPU: output, logsumexp, scratch; flash: output, logsumexp
  const int64_t upcast = R.up ? R.N * b * R.Aq * R.f : 0;  // next's output in f beside the sum
  const int64_t merge = t.half_q + t.half_lse + R.N * b * R.Aq * R.f + upcast + 2 * t.half_lse;
  if (exchange >= std::max(kernel, merge))
    p.add("the pair received (send_recv): 2 x N*2b*Akv*s", exchange);
  else if (kernel >= merge)
    p.add("one b x b pair: its output, logsumexp and the kernel's scratch", kernel);
  else
    p.add("one pair's output and logsumexp, merged: + N*b*Aq*f + 2 x N*Hq*b*f", merge);
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
    add_ring_forward(r, R, t);
    m.add("attention output of the rows: N*2b*Aq*s", t.q);
    m.add("o_proj output, x1, its norm, and the MLP's temporaries: N*2b*2*d*s + mlp_forward(N*2b)",
          n * 2 * R.d * R.s + R.mlp_forward(n));
    PhaseEstimate high = a.done();
    keep_larger(high, r.done());
    keep_larger(high, m.done());
    for (auto& term : high.terms) f.add(term.name, term.bytes);
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
    // RingAttention::backward: dO (a strided view of the rows' gradient) made contiguous, dQ and the
    // travelling dK/dV accumulator in the accumulation dtype, the K/V pair; at its high point an exchange
    // (the accumulator's copy received) or one pair's backward: the kernel's as on whole blocks (the
    // block's dO, a strided view, copied in, and its dQ, dK, dV and scratch: memory_terms.h's
    // attn_backward over b rows).
    const int64_t b = R.T / 2;
    PhaseBuilder p("layer attention backward");
    layer_graph(p, false);
    p.add("dy, the layer output, and the gradient of x1: 3 x N*2b*d*s", 3 * t.x);
    p.add("dO of the rows, and made contiguous for the kernel: 2 x N*2b*Aq*s", 2 * t.q);
    p.add("dQ: N*2b*Aq*acc", n * R.Aq * R.acc());
    p.add("the K/V pair travelling: 2 x N*2b*Akv*s", t.pair);
    p.add("its dK/dV accumulator: 2 x N*2b*Akv*acc", 2 * n * R.Akv * R.acc());
    const int64_t exchange = 2 * n * R.Akv * R.acc();
    // Flash's backward (attention_backward.cu, flash_api.cpp's mha_bwd), from PyTorch 2.11's source, not
    // measured on a GPU: contiguous copies of the block's dO and output (both strided views here), dQ, dK,
    // dV, and its float32 dq accumulator, softmax_d and, with GQA, dK/dV expanded to Hq heads.
    const int64_t kernel = R.cuda() ? R.N * b * (3 * R.Aq + 2 * R.Akv) * R.s + R.flash_dq_accum(b) +
                                          R.flash_softmax_d(b) + R.flash_expanded(b)
                                    : R.attn_backward(b);
    if (exchange >= kernel)
      p.add("the accumulator received (send_recv): 2 x N*2b*Akv*acc", exchange);
    else if (R.cuda())
      p.add(
          "one b x b pair's flash backward: N*b*(3*Aq + 2*Akv)*s (dO and output copied, dQ, dK, dV) + dq "
          "accumulator, softmax_d, GQA expansion",
          kernel);
    else
      p.add("one b x b pair's backward: N*b*(2*Aq + 2*Akv)*s + the kernel's scratch", kernel);
    out.push_back(p.done());
  }
  return data_parallel_phases(R, std::move(out), FirstInput::kept);
}

}  // namespace bpbench
