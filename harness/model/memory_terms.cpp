// memory_terms.cpp: memory_terms.h's shared phase pieces: the LM head and the attention backward.
#include "harness/model/memory_terms.h"
#include "harness/model/phase_builder.h"

#include <fmt/format.h>

namespace bpbench {

std::vector<std::pair<int64_t, int64_t>> critical_chunks(int64_t T, int64_t c) {
  const int64_t last_rows = T - ((T - 1) / c) * c;
  std::vector<std::pair<int64_t, int64_t>> out = {{last_rows, T}};
  if (last_rows < c && T > c) out.push_back({c, T - last_rows});
  return out;
}

namespace {
// CUDA: the attention backward as one kernel call of `rows` queries over `keys` keys (named R and E in the
// terms): dO coming in, the kernel's dQ, dK, dV, and its own buffers while it runs.
void add_cuda_attention_backward(PhaseBuilder& p, const MemoryTerms& D, int64_t rows, int64_t keys,
                                 int64_t window, const char* R, const char* E, bool into_sink) {
  if (D.flash && into_sink && keys > rows && !(window > 0 && window < keys)) {
    // FlashSinkAttention (attention_gpu.cpp): one backward call per key block of at most b keys, each
    // call's dK, dV added into the sink and released, its dQ added into a float32 sum (counted at every
    // call: an upper bound by the first call's, which has no sum yet).
    const int64_t widest = D.sink_widest_block(rows, keys);
    p.add(fmt::format("attention backward (flash) into dK, dV by key blocks: dO, one call's dQ, dK, dV: "
                      "N*(2*{}*Aq + 2*b*Akv)*s, b = max({}, min(8192, {} - {}))",
                      R, R, E, R),
          D.N * (2 * rows * D.Aq + 2 * widest * D.Akv) * D.s);
    p.add(fmt::format("the blocks' dQ summed in float32: N*{}*Aq*4", R), D.N * rows * D.Aq * 4);
    p.add(fmt::format("flash backward: float32 dq accumulator: N*round128({})*Hq*hd_r*4", R),
          D.flash_dq_accum(rows));
    p.add(fmt::format("flash backward: softmax_d: N*Hq*round128({})*4", R), D.flash_softmax_d(rows));
    p.add("flash backward, GQA: one block's dK, dV expanded to Hq heads: 2 x N*b*Aq*s",
          D.flash_expanded(widest));
  } else if (D.flash) {
    p.add(fmt::format("attention backward (flash): dO, dQ, dK, dV: N*({0}*2*Aq + {1}*2*Akv)*s", R, E),
          D.N * (2 * rows * D.Aq + 2 * keys * D.Akv) * D.s);
    p.add(fmt::format("flash backward: float32 dq accumulator: N*round128({})*Hq*hd_r*4", R),
          D.flash_dq_accum(rows));
    p.add(fmt::format("flash backward: softmax_d: N*Hq*round128({})*4", R), D.flash_softmax_d(rows));
    p.add(fmt::format("flash backward, GQA: dK, dV expanded to Hq heads: 2 x N*{}*Aq*s", E),
          D.flash_expanded(keys));
  } else {
    p.add(fmt::format(
              "attention backward (efficient): dO, dQ, and dK, dV per query head: N*({0}*2*Aq + {1}*2*Aq)*s",
              R, E),
          D.N * (2 * rows * D.Aq + 2 * keys * D.Aq) * D.s);
    p.add(fmt::format("efficient backward: delta and float32 dQ workspace: max(N*{0}*Aq*4 + 2 x N*Hq*{0}*4, "
                      "N*Hq*{0}*4 + workspace)",
                      R),
          D.efficient_scratch(rows));
  }
}

// The CPU attention backward of `rows` queries over `keys` keys of layer type `window` (cpu_attn_backward).
void add_cpu_attention_backward(PhaseBuilder& p, const MemoryTerms& D, int64_t rows, int64_t keys,
                                int64_t window, const char* R, bool into_sink) {
  if (into_sink && !D.windowed(keys, window) && keys > rows)
    p.add(
        "attention backward into dK, dV by key blocks: dO, dQ, one call's dQ, dK, dV: see sink_attn_backward",
        D.sink_attn_backward(rows, keys));
  else if (D.windowed(keys, window))
    p.add(
        fmt::format("attention backward, sliding window {} (banded blocks): dO, dQ, dK, dV, and one block's "
                    "mask, dQ/dK/dV and scratch",
                    window),
        D.cpu_attn_backward(rows, keys, window));
  else if (keys == rows)
    p.add(fmt::format("attention backward: dO, dQ, dK, dV: N*{}*(2*Aq + 2*Akv)*s + scratch", R),
          D.cpu_attn_backward(rows, keys, window));
  else
    p.add("attention backward, two calls: dQ, dK, dV pieces, merged: see chunk_attn_backward",
          D.cpu_attn_backward(rows, keys, window));
}

}  // namespace

void add_head_backward(PhaseBuilder& p, const MemoryTerms& D, int64_t rows, const char* R, bool chunk) {
  const int64_t softmax = 3 * rows * D.V * D.f;
  const int64_t weight = rows * D.V * D.s + (D.full ? D.V * D.d * D.s : 0) + rows * D.d * D.s;
  if (softmax >= weight)
    p.add(fmt::format("log-probs, their gradient, the logits' gradient{}: 3 x N*{}*V*f",
                      chunk ? ", one chunk" : "", R),
          softmax);
  else
    p.add(fmt::format("logits' gradient + LM-head weight gradient + dx{}: N*{}*V*s + V*d*s + N*{}*d*s",
                      chunk ? " rows" : "", R, R),
          weight);
}

void add_whole_head(PhaseBuilder& p, const MemoryTerms& D) {
  const int64_t rows = D.N * D.T;
  p.add("final norm saved (normed, rsqrt) + its output: N*T*(rms(d) + d*s)", rows * D.final_norm_row());
  add_head_backward(p, D, rows, "T", false);
}

// Streamed head: per chunk of c_l rows the same, plus dx (N, T, d) for the whole sequence.
void add_chunk_head(PhaseBuilder& p, const MemoryTerms& D, int64_t cl, bool dx_in_x) {
  const int64_t rows = D.N * cl;
  if (!dx_in_x) p.add("dx of the head: N*T*d*s", D.N * D.T * D.d * D.s);
  p.add("final norm saved + output, one chunk: N*c_l*(rms(d) + d*s)", rows * D.final_norm_row());
  add_head_backward(p, D, rows, "c_l", true);
}

// A layer's attention backward, from its output norm (Gemma 3) to the attention kernel: its high point is
// either the kernel's backward (the output norm's saved tensors already released) or, before it, the output
// norm's backward with those saved tensors still alive. Attention-backward phases count the attention half
// without the output norm (attn_row() - output_norm()) and add this.
void add_attention_backward(PhaseBuilder& p, const MemoryTerms& D, int64_t rows, int64_t keys, int64_t window,
                            const char* R, const char* E, bool into_sink) {
  PhaseBuilder kernel("kernel");
  if (D.cuda())
    add_cuda_attention_backward(kernel, D, rows, keys, window, R, E, into_sink);
  else
    add_cpu_attention_backward(kernel, D, rows, keys, window, R, into_sink);
  const PhaseEstimate k = kernel.done();
  const int64_t output_norm = D.N * rows * D.output_norm() + D.output_norm_backward(rows);
  if (output_norm > k.bytes) {
    p.add(fmt::format("the attention output norm's saved tensors and backward (above the kernel's): "
                      "N*{}*(output_norm + d*(4, LoRA 5)*f)",
                      R),
          output_norm);
    return;
  }
  for (const auto& t : k.terms) p.add(t.name, t.bytes);
}

// The larger of two estimates of one phase (the same phase at another layer or chunk).
void keep_larger(PhaseEstimate& best, PhaseEstimate candidate) {
  if (candidate.bytes > best.bytes) best = std::move(candidate);
}

void add_highest(PhaseBuilder& into, std::vector<PhaseEstimate> moments) {
  PhaseEstimate high = std::move(moments.at(0));
  for (size_t k = 1; k < moments.size(); ++k) keep_larger(high, std::move(moments[k]));
  for (auto& term : high.terms) into.add(term.name, term.bytes);
}

// "K path saved + K + V" of a whole-layer graph (kv_row_graph), named for what the efficient kernel saves.
const char* kv_graph_name(const MemoryTerms& D) {
  return D.efficient && D.gqa() ? "K path saved + K, V repeated to Hq heads (saved by the efficient kernel)"
                                : "K path saved + K + dV";
}

}  // namespace bpbench
