// estimate.cpp: the analytic peak memory of each strategy (formulas and their derivation:
// reports/ESTIMATE.md).
//
// Conventions (legend in model_config.h): s bytes per element of the model dtype, f of the compute dtype
// (float32 for float32/bfloat16 models, float64 for float64), "up" when they differ (bfloat16: every norm and
// softmax input is upcast into a new float32 tensor). Aq = Hq*hd, Akv = Hkv*hd. A "row" term is bytes per
// (sequence, token) and is multiplied by N and the rows it covers; rope tables, the c x c mask and weight
// gradients do not scale with N.
//
// What autograd keeps (LibTorch 2.x, as measured by the tracking allocator):
//   rms_norm(x, w) over width w keeps the normalised x (w s; only when w is trainable), the rsqrt (f per
//     row), and its input: x itself when s == f, else the float32 copy (w f). pow(x, 2) saves that same
//     input, not its result (1.13 kept the square too);
//   rope keeps only its cos/sin tables (x * cos saves cos, not x): the pre-rope q/k are freed;
//   causal_attention (the fused CPU kernel) keeps q after RoPE (Aq s), K, V, its output (Aq s: also
//     o_proj's input, a view of it) and the logsumexp (Hq f); no scores, no mask. Its forward and backward
//     allocate a scratch block per thread (attn_forward_scratch, attn_backward_scratch); the backward
//     allocates dQ, dK and dV. A StreamBP chunk runs it twice (prefix keys, diagonal block) and merges;
//   the MLP keeps gate, silu(gate), up and their product (4 I s); LoRA keeps x A^T (r s) per adapted linear.
//
// On CUDA (device "cuda") only the attention terms change, to the kernel causal_attention runs there
// (attention_kernels.h), as PyTorch 2.11 allocates them (not yet checked against a GPU measurement):
//   flash (bfloat16): saves what the CPU kernel saves (q, K, V as views, output, float32 logsumexp); one call
//     per chunk (bottom-right causal: no prefix/diagonal split, no merge); no per-thread scratch. Its
//     backward (flash_attn/flash_api.cpp, mha_bwd) allocates dQ, dK, dV and, while the kernel runs, a float32
//     dq accumulator (N, round128(c), Hq, hd_r), softmax_d (N, Hq, round128(c)) float32 and, with GQA, dK/dV
//     expanded to Hq heads (N, e, Hq, hd) each, summed per kv head before it returns;
//   efficient (float32): K and V are repeated to Hq heads (attention_gpu.cpp; a copy when g > 1), and those
//     copies are what the graph saves (K and V themselves are freed, except where StreamBP holds them). Its
//     backward (attention_backward.cu, _efficient_attention_backward) returns dK/dV per query head (the
//     repeat's backward sums them) and allocates delta (N, Hq, c) float32, computed for float32 from a
//     float32 (N, c, Hq, hd) product, and a workspace of float32 dQ tiles (kernel_backward.h,
//     workspace_size). Under no grad it computes no logsumexp.
#include "harness/run/estimate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness/model/attention_kernels.h"

namespace bpbench {

namespace {

// The topmost layer of one attention type (full, or sliding over `window` keys): the layer whose attention
// backward is that type's high point, with every lower checkpoint alive.
struct AttentionLayer {
  int64_t index;
  int64_t window;  // 0: full causal attention
};

struct Dims {
  int64_t N, T, d, I, V, L, Hq, Hkv, hd, Aq, Akv;
  int64_t s, f;              // element bytes: model dtype, compute dtype
  int64_t P;                 // CPU threads (the attention kernel's scratch is per thread)
  bool up;                   // s != f: norms and softmax copy their input to float32
  bool qk;                   // q/k RMSNorm
  int64_t r;                 // LoRA rank (0: full fine-tuning)
  bool full;                 // base weights (norms, LM head, embedding included) are trainable
  bool offload;              // layer checkpoints in host memory (impls/offload.h)
  bool gemma_norms = false;  // Gemma 3's (1 + w) norms: the normalised x is saved in f, not s
  bool sandwich = false;     // Gemma 3's norms on the attention and MLP outputs
  std::vector<AttentionLayer> attention_layers;  // one per attention type present, topmost first
  // The CUDA kernel the attention terms model (both false: the fused CPU kernel, every term as measured).
  bool flash = false;      // FlashAttention-2: bfloat16
  bool efficient = false;  // the memory-efficient kernel: float32
  bool cuda() const { return flash || efficient; }
  bool gqa() const { return Hq != Hkv; }

  // dK/dV accumulators of streambp: float32 for a bfloat16 model, else the model dtype.
  int64_t acc() const { return s == 2 ? 4 : s; }
  // The input of an rms_norm stays alive as the saved tensor when no upcast copy replaces it.
  int64_t kept(int64_t w) const { return up ? 0 : w * s; }
  // rms_norm over `w` (with `heads` rsqrt values per row) keeps, besides its input and output: the normalised
  // x (when the weight is trainable), the float32 copy of x (bfloat16), the rsqrt.
  int64_t rms(int64_t w, int64_t heads) const {
    return (full ? w * (gemma_norms ? f : s) : 0) + (up ? w * f : 0) + heads * f;
  }
  // Gemma 3's norm on a block's output (its input is the o_proj or down projection's output, kept by it).
  int64_t output_norm() const { return sandwich ? kept(d) + rms(d, 1) : 0; }
  // Its backward, the first step of a block's backward while the whole block graph is alive: four (N, rows,
  // d) tensors in f above what it holds, five when its weight is frozen (LoRA), for float32 and bfloat16
  // alike (measured with the tracking allocator: 16 and 20 bytes per element).
  int64_t output_norm_backward(int64_t rows) const {
    return sandwich ? N * rows * d * (full ? 4 : 5) * f : 0;
  }
  // Attention half of a layer, per query row: attn_norm (+ its output h), the q path (q_norm), qg. LoRA: x
  // A^T of q, k, v, o.
  int64_t attn_row() const {
    return rms(d, 1) + d * s + (qk ? kept(Aq) + rms(Aq, Hq) : 0) + Aq * s + 4 * r * s + output_norm();
  }
  // K/V path, per key row: k_norm's saved tensors, then K (after RoPE) and V.
  int64_t kv_row() const { return (qk ? kept(Akv) + rms(Akv, Hkv) : 0) + 2 * Akv * s; }
  // The same as a layer's graph keeps it. The efficient CUDA kernel saves K and V repeated to Hq heads (a
  // copy when g > 1), and nothing else holds K and V in a whole-layer graph, so they are Aq wide there;
  // everywhere else kv_row().
  int64_t kv_row_graph() const { return efficient && gqa() ? kv_row() + 2 * (Aq - Akv) * s : kv_row(); }
  // MLP half, per row: x1 (as mlp_norm's input), mlp_norm, its output n, gate, silu, up, product; LoRA x
  // A^T.
  int64_t mlp_row() const { return kept(d) + rms(d, 1) + d * s + 4 * I * s + 3 * r * s + output_norm(); }
  // Saved by the attention kernel beyond q, K and V, per query row: its output (also o_proj's input) and
  // the logsumexp.
  int64_t attn_out_row() const { return Aq * s + Hq * f; }
  // Everything one layer's autograd graph keeps per row: attention, its output, K/V, MLP, and the layer's
  // input (when rms_norm keeps it).
  int64_t layer_row() const { return attn_row() + attn_out_row() + kv_row_graph() + mlp_row() + kept(d); }
  // The final norm's saved tensors and its output h (kept by the LM head only when W_lm is trainable: with
  // LoRA the frozen head saves nothing of its input).
  int64_t final_norm_row() const { return rms(d, 1) + (full ? d * s : 0); }
  // Not scaled by N: the cos and sin tables of RoPE over `rows` positions (float32 computed, cast to s).
  int64_t rope(int64_t rows) const { return 2 * rows * hd * s; }
  // The fused CPU kernel (PyTorch's flash-style attention) works in blocks of q_block query rows (32, 64 or
  // 256 by the query count) by up to 512 keys, with one scratch block per thread: scores, row max and sum
  // and an output tile in f (plus a bfloat16 copy of the scores) forward; scores and their gradient in f
  // (plus bfloat16 copies) and a row sum backward.
  static int64_t q_block(int64_t rows) {
    return std::min<int64_t>(rows, rows >= 768 ? 256 : rows >= 192 ? 64 : 32);
  }
  static int64_t kv_block(int64_t keys) { return std::min<int64_t>(keys, 512); }
  int64_t attn_forward_scratch(int64_t rows, int64_t keys) const {
    const int64_t qb = q_block(rows), kb = kv_block(keys);
    return P * ((qb * kb + 2 * qb + qb * hd) * f + (up ? qb * kb * s : 0));
  }
  int64_t attn_backward_scratch(int64_t rows, int64_t keys) const {
    const int64_t qb = q_block(rows), kb = kv_block(keys);
    return P * (2 * qb * kb * (f + (up ? s : 0)) + qb * f);
  }
  // The whole-sequence attention backward: the output's gradient dO coming in, dQ, dK, dV and the scratch.
  int64_t attn_backward(int64_t rows) const {
    return N * rows * (2 * Aq + 2 * Akv) * s + attn_backward_scratch(rows, rows);
  }
  // A chunk's (`rows` queries over `keys` keys, keys > rows), dO coming in and: the prefix call's dQ, dK, dV,
  // then the diagonal call's with its scratch, or (after dQ's merge) dK's and dV's pieces with the
  // concatenated dK or dV.
  int64_t chunk_attn_backward(int64_t rows, int64_t keys) const {
    if (keys == rows) return attn_backward(rows);
    const int64_t prefix_call =
        N * (2 * rows * Aq + 2 * (keys - rows) * Akv) * s + attn_backward_scratch(rows, keys - rows);
    const int64_t diagonal_call =
        N * (3 * rows * Aq + 2 * keys * Akv) * s + attn_backward_scratch(rows, rows);
    const int64_t concatenation = N * (2 * rows * Aq + 3 * keys * Akv) * s;
    return std::max({prefix_call, diagonal_call, concatenation});
  }
  // Backward through the MLP of `rows` rows (its 4 I saved tensors counted elsewhere): either the down
  // projection's (the product's gradient, N*rows*I, its weight gradient d*I, and a contiguous copy of the
  // incoming gradient when its rows are a strided slice: N > 1 for a chunk) or, a step later, silu*up's (act
  // and that copy released; the product's gradient plus the two factors' gradients: one more N*rows*I).
  int64_t mlp_backward(int64_t rows, bool strided_dy) const {
    const int64_t dy_copy = strided_dy && N > 1 ? N * rows * d * s : 0;
    // Gemma 3: the MLP output norm's backward comes first, with its saved tensors still alive (MLP phases
    // count them here, not in the graph: mlp_row() - output_norm()); they are released before the
    // projections' backward, whose incoming gradient is then the norm's input gradient, a new (N, rows, d)
    // tensor (not the residual's dy), released once the down projection's backward is done.
    const int64_t dy_below_norm = sandwich ? N * rows * d * s : 0;
    return std::max({N * rows * I * s + (full ? d * I * s : 0) + dy_copy + dy_below_norm,
                     2 * N * rows * I * s, N * rows * output_norm() + output_norm_backward(rows)});
  }
  // ---- sliding windows (attention_cpu.cpp, WindowedAttention) ----
  // The keys a call of `rows` queries over the `keys` ending with them gets: a sliding layer's StreamBP chunk
  // takes K/V from its window start (ModelConfig::first_visible_key) only.
  static int64_t visible_keys(int64_t rows, int64_t keys, int64_t window) {
    return window > 0 ? std::min(keys, rows + window - 1) : keys;
  }
  // The CPU kernel runs banded blocks of at most 256 query rows over the keys they see, when the window is
  // shorter than the keys; the largest block has min(256, rows) rows and up to rows + window - 1 keys.
  bool windowed(int64_t keys, int64_t window) const { return !cuda() && window > 0 && window < keys; }
  static int64_t window_block_rows(int64_t rows) { return std::min<int64_t>(rows, 256); }
  static int64_t window_block_keys(int64_t rows, int64_t keys, int64_t window) {
    return std::min(keys, window_block_rows(rows) + window - 1);
  }
  // One block's call besides what the whole call keeps: its additive mask (rb x kb in f) and, forward, its
  // output and logsumexp before they are copied into the call's; backward its dQ rows and dK/dV over its
  // keys.
  int64_t window_block_forward(int64_t rows, int64_t keys, int64_t window) const {
    const int64_t rb = window_block_rows(rows), kb = window_block_keys(rows, keys, window);
    return rb * kb * f + N * rb * attn_out_row() + attn_forward_scratch(rb, kb);
  }
  int64_t window_block_backward(int64_t rows, int64_t keys, int64_t window) const {
    const int64_t rb = window_block_rows(rows), kb = window_block_keys(rows, keys, window);
    return rb * kb * f + N * (rb * Aq + 2 * kb * Akv) * s + attn_backward_scratch(rb, kb);
  }
  // The attention backward of `rows` queries over `keys` keys (already cut to the window) as the CPU kernel
  // runs it: whole sequence, a chunk's two calls, or banded blocks under a window (dO coming in, dQ, dK, dV).
  int64_t cpu_attn_backward(int64_t rows, int64_t keys, int64_t window) const {
    if (windowed(keys, window))
      return N * (2 * rows * Aq + 2 * keys * Akv) * s + window_block_backward(rows, keys, window);
    return keys == rows ? attn_backward(rows) : chunk_attn_backward(rows, keys);
  }

  // No-grad forward of attention over `rows` queries: the output and logsumexp and the kernel's scratch;
  // a chunk (keys > rows) also holds both calls' outputs and logsumexps while they are merged in f; a
  // windowed call one block's mask, output and scratch. CUDA: one call, no scratch (cuda_forward_output +
  // kv_repeat).
  int64_t attn_forward(int64_t rows, int64_t keys, int64_t window = 0) const {
    if (cuda()) return cuda_forward_output(rows) + kv_repeat(keys);
    if (windowed(keys, window)) return N * rows * attn_out_row() + window_block_forward(rows, keys, window);
    if (keys == rows) return N * rows * attn_out_row() + attn_forward_scratch(rows, keys);
    return N * rows * (3 * Aq * s + 2 * Aq * f + 5 * Hq * f) + attn_forward_scratch(rows, keys);
  }

  // ---- CUDA (PyTorch 2.11's kernels; reports/ESTIMATE.md, "On CUDA") ----
  static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
  static int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }
  // The efficient kernel's K and V repeated to Hq heads over `keys` keys: 2 x (N, e, Hq, hd) in s, a copy
  // (attention_gpu.cpp, per_query_head) only when g > 1. Saved for the backward when grad is on.
  int64_t kv_repeat(int64_t keys) const { return efficient && gqa() ? 2 * N * keys * Aq * s : 0; }
  // No-grad output of one call: flash (N, c, Hq, hd) in s and the logsumexp (N, Hq, c) float32 (always
  // computed); efficient the output only (compute_log_sumexp is false under no grad).
  int64_t cuda_forward_output(int64_t rows) const { return N * rows * (Aq * s + (flash ? Hq * 4 : 0)); }
  // flash_api.cpp, mha_bwd (non-deterministic): dq_accum (N, round128(c), Hq, hd_r) float32, with hd_r = hd
  // rounded up to 32 (to 64 above 128), and softmax_d (N, Hq, round128(c)) float32.
  int64_t flash_dq_accum(int64_t rows) const {
    return N * round_up(rows, 128) * Hq * round_up(hd, hd <= 128 ? 32 : 64) * 4;
  }
  int64_t flash_softmax_d(int64_t rows) const { return N * Hq * round_up(rows, 128) * 4; }
  // mha_bwd with num_heads != num_heads_k: dk_expanded, dv_expanded (N, e, Hq, hd) in s, summed per group
  // into dK, dV (N, e, Hkv, hd) before it returns.
  int64_t flash_expanded(int64_t keys) const { return gqa() ? 2 * N * keys * Aq * s : 0; }
  // The float32 backward kernel cutlassB picks on sm80+ (the first that takes hd): 64x64 for hd <= 64, else
  // 128x64 (kBlockSizeI = 128) when its shared memory fits the GPU (assumed: H100; see ESTIMATE.md).
  int64_t efficient_block_rows() const { return hd <= 64 ? 64 : 128; }
  // kernel_backward.h, workspace_size for float32 (kNeedsAccumGradQ: split keys; no gK/gV staging): per
  // (sequence, query head) ceil(c/BI) x ceil(hd/64) GradQTempStorage tiles of a 16-byte lock and BI x 64
  // floats.
  int64_t efficient_workspace(int64_t rows) const {
    const int64_t bi = efficient_block_rows();
    return N * Hq * ceil_div(rows, bi) * ceil_div(hd, 64) * (16 + bi * 64 * 4);
  }
  // _efficient_attention_backward for float32 (kKernelComputesDelta is false): delta = (dO * O).sum(-1)
  // .transpose().contiguous(), whose float32 (N, c, Hq, hd) product, (N, c, Hq) sum and (N, Hq, c) copy live
  // together, then delta with the workspace.
  int64_t efficient_scratch(int64_t rows) const {
    const int64_t delta = N * Hq * rows * 4;
    return std::max(N * rows * Aq * 4 + 2 * delta, delta + efficient_workspace(rows));
  }
};

class PhaseBuilder {
 public:
  explicit PhaseBuilder(std::string name) { p_.name = std::move(name); }
  PhaseBuilder& add(std::string name, int64_t bytes, bool checkpoint = false) {
    if (bytes != 0) p_.terms.push_back({std::move(name), bytes, checkpoint});
    return *this;
  }
  PhaseEstimate done() {
    p_.bytes = 0;
    for (const auto& t : p_.terms) p_.bytes += t.bytes;
    return p_;
  }

 private:
  PhaseEstimate p_;
};

int64_t element_bytes(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat:
      return 4;
    case torch::kBFloat16:
      return 2;
    case torch::kDouble:
      return 8;
    default:
      throw std::invalid_argument(fmt::format(
          "estimate: unsupported dtype {} (valid: float32, bfloat16, float64)", c10::toString(t)));
  }
}

const char* dtype_name(torch::ScalarType t) {
  return t == torch::kBFloat16 ? "bfloat16" : t == torch::kDouble ? "float64" : "float32";
}

int64_t clamp_rows(int64_t rows, int64_t T) {
  return rows <= 0 || rows > T ? T : rows;
}

// Query chunks worth checking for a chunked layer: the last one (sees every key) and, when it is short, the
// last full-size one before it. Each as {rows, keys}.
std::vector<std::pair<int64_t, int64_t>> critical_chunks(int64_t T, int64_t c) {
  const int64_t last_rows = T - ((T - 1) / c) * c;
  std::vector<std::pair<int64_t, int64_t>> out = {{last_rows, T}};
  if (last_rows < c && T > c) out.push_back({c, T - last_rows});
  return out;
}

// ---- head phases ------------------------------------------------------------------------------------------

// Whole-sequence head (plain, checkpoint): logits (N, T, V) in s, upcast, log-softmax kept; the backward peak
// is log-probs + their gradient + the logits' gradient, all in f. Later, the LM head's weight gradient (V,
// d).
// The head backward's high point over `rows` = N*R rows (R named `R` in the terms): the softmax's three
// (rows, V) tensors in f, or later the logits' gradient with the LM head's weight gradient and dx rows.
void add_head_backward(PhaseBuilder& p, const Dims& D, int64_t rows, const char* R, bool chunk) {
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

void add_whole_head(PhaseBuilder& p, const Dims& D) {
  const int64_t rows = D.N * D.T;
  p.add("final norm saved (normed, rsqrt) + its output: N*T*(rms(d) + d*s)", rows * D.final_norm_row());
  add_head_backward(p, D, rows, "T", false);
}

// Streamed head: per chunk of c_l rows the same, plus dx (N, T, d) for the whole sequence.
void add_chunk_head(PhaseBuilder& p, const Dims& D, int64_t cl) {
  const int64_t rows = D.N * cl;
  p.add("dx of the head: N*T*d*s", D.N * D.T * D.d * D.s);
  p.add("final norm saved + output, one chunk: N*c_l*(rms(d) + d*s)", rows * D.final_norm_row());
  add_head_backward(p, D, rows, "c_l", true);
}

int64_t checkpoints_bytes(const Dims& D, int64_t count) {
  return count * D.N * D.T * D.d * D.s;
}

// Of `count` layer checkpoints alive at a phase, those on the device. Offloaded (impls/offload.h), two are
// in the forward (the input being read and the output being built) and in a layer's backward (its own input
// and the next one down, prefetched); one at the head (x_L: layer L-1's comes back after the head).
int64_t on_device(const Dims& D, int64_t count, int64_t offloaded_on_device) {
  return D.offload ? std::min<int64_t>(count, offloaded_on_device) : count;
}

// "layer inputs ...: K x N*T*d*s" for the checkpoints of a phase, with the offloaded ones named as such.
void add_checkpoints(PhaseBuilder& p, const Dims& D, const std::string& which, int64_t count,
                     int64_t offloaded_on_device = 2) {
  const int64_t kept = on_device(D, count, offloaded_on_device);
  p.add(kept == count ? fmt::format("{}: {} x N*T*d*s", which, count)
                      : fmt::format("{}, {} of them on the device (the rest in host memory): {} x N*T*d*s",
                                    which, kept, kept),
        checkpoints_bytes(D, kept), true);
}

// CUDA: the attention backward as one kernel call of `rows` queries over `keys` keys (named R and E in the
// terms): dO coming in, the kernel's dQ, dK, dV, and its own buffers while it runs.
void add_cuda_attention_backward(PhaseBuilder& p, const Dims& D, int64_t rows, int64_t keys, const char* R,
                                 const char* E) {
  if (D.flash) {
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
void add_cpu_attention_backward(PhaseBuilder& p, const Dims& D, int64_t rows, int64_t keys, int64_t window,
                                const char* R) {
  if (D.windowed(keys, window))
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

// A layer's attention backward, from its output norm (Gemma 3) to the attention kernel: its high point is
// either the kernel's backward (the output norm's saved tensors already released) or, before it, the output
// norm's backward with those saved tensors still alive. Attention-backward phases count the attention half
// without the output norm (attn_row() - output_norm()) and add this.
void add_attention_backward(PhaseBuilder& p, const Dims& D, int64_t rows, int64_t keys, int64_t window,
                            const char* R, const char* E) {
  PhaseBuilder kernel("kernel");
  if (D.cuda())
    add_cuda_attention_backward(kernel, D, rows, keys, R, E);
  else
    add_cpu_attention_backward(kernel, D, rows, keys, window, R);
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

// "K path saved + K + V" of a whole-layer graph (kv_row_graph), named for what the efficient kernel saves.
const char* kv_graph_name(const Dims& D) {
  return D.efficient && D.gqa() ? "K path saved + K, V repeated to Hq heads (saved by the efficient kernel)"
                                : "K path saved + K + dV";
}

// ---- layer phases for whole-sequence re-forward (checkpoint, checkpoint-chunked-head, mst) ----------------

// The attention backward of the top layer (the largest: every lower checkpoint is still alive). Kept: the
// attention half of the layer for all T rows (o_proj's input already consumed), K and V's gradient (V itself
// released), the kernel's saved output and logsumexp, the rope tables, `flows` (N, T, d) gradients in flight,
// and the kernel's backward (dQ, dK, dV, scratch).
PhaseEstimate whole_attention_backward(const Dims& D, const AttentionLayer& layer, int64_t flows,
                                       const std::string& flow_note) {
  const int64_t rows = D.N * D.T, checkpoints = layer.index + 1;
  PhaseBuilder p("layer attention backward");
  add_checkpoints(p, D, fmt::format("layer inputs x_0..x_{}", checkpoints - 1), checkpoints);
  p.add(fmt::format("gradients in flight ({}): {} x N*T*d*s", flow_note, flows), flows * rows * D.d * D.s);
  p.add("attention half saved below its output norm: N*T*(attn_row - output_norm)",
        rows * (D.attn_row() - D.output_norm()));
  p.add(fmt::format("{}: N*T*kv_row", kv_graph_name(D)), rows * D.kv_row_graph());
  p.add("rope cos/sin of q and k: 4*T*hd*s", 2 * D.rope(D.T));
  p.add("attention output + logsumexp: N*T*(Aq*s + Hq*f)", rows * D.attn_out_row());
  add_attention_backward(p, D, D.T, D.T, layer.window, "T", "T");
  return p.done();
}

// The MLP backward of the top layer for a whole-layer re-forward (checkpoint): the whole layer's graph, the
// incoming gradient and layer output, the gradient of the MLP product and the down projection's weight
// gradient.
PhaseEstimate whole_mlp_backward(const Dims& D, int64_t checkpoints) {
  const int64_t rows = D.N * D.T;
  PhaseBuilder p("layer mlp backward");
  add_checkpoints(p, D, "layer inputs", checkpoints);
  p.add("dy and the layer output: 2 x N*T*d*s", 2 * rows * D.d * D.s);
  p.add(
      "layer graph below the MLP output norm: N*T*(attn_row + attn_out_row + kv_row + mlp_row - "
      "output_norm)",
      rows * (D.attn_row() + D.attn_out_row() + D.kv_row_graph() + D.mlp_row() - D.output_norm()));
  p.add("rope tables", 2 * D.rope(D.T));
  p.add("MLP backward: max(N*T*I*s + d*I*s, 2 x N*T*I*s)", D.mlp_backward(D.T, false));
  return p.done();
}

// No-grad checkpointed forward at the top layer: the stored inputs, the output being built, K and V for all
// rows, and one query chunk's attention (`rows` queries over all keys for the last chunk).
PhaseEstimate checkpointed_forward_layer(const Dims& D, int64_t rows, const AttentionLayer& layer) {
  PhaseBuilder p("forward");
  add_checkpoints(p, D, fmt::format("layer inputs x_0..x_{} and the output being built", layer.index),
                  layer.index + 2);
  p.add("K and V, all rows: 2 x N*T*Akv*s", 2 * D.N * D.T * D.Akv * D.s);
  const int64_t keys = Dims::visible_keys(rows, D.T, layer.window);
  // A chunk's high point is in its attention (with the kernel's scratch) or in its MLP, whose four (N, c, I)
  // tensors are temporaries of one expression and live together (model.cpp, mlp_block): with whole-sequence
  // chunks (checkpoint, mst) and a large I the MLP is higher.
  const int64_t attention = D.N * rows * (D.d + D.Aq) * D.s + D.attn_forward(rows, keys, layer.window);
  const int64_t mlp = D.N * rows * (D.Aq + 2 * D.d + 4 * D.I + 2 * D.r) * D.s;
  if (attention >= mlp) {
    p.add("one chunk's normed rows and q: N*c*(d + Aq)*s", D.N * rows * (D.d + D.Aq) * D.s);
    if (!D.cuda()) {
      p.add(D.windowed(keys, layer.window)
                ? "one chunk's attention: output, logsumexp, and one banded block's mask, output, scratch"
                : "one chunk's attention: output, logsumexp (and a chunk's merge), scratch",
            D.attn_forward(rows, keys, layer.window));
    } else {
      p.add(D.flash ? "one chunk's attention (flash): output, logsumexp: N*c*(Aq*s + Hq*4)"
                    : "one chunk's attention (efficient, no grad: no logsumexp): output: N*c*Aq*s",
            D.cuda_forward_output(rows));
      p.add("the efficient kernel's K and V repeated to Hq heads: 2 x N*e*Aq*s", D.kv_repeat(keys));
    }
  } else {
    p.add("one chunk's MLP: q, x1, its norm, gate, silu(gate), up, product: N*c*(Aq + 2*d + 4*I [+ 2*r])*s",
          mlp);
  }
  return p.done();
}

// The no-grad forward's high point: at the topmost layer of each attention type.
PhaseEstimate checkpointed_forward_phase(const Dims& D, int64_t rows) {
  PhaseEstimate best;
  for (const auto& layer : D.attention_layers) keep_larger(best, checkpointed_forward_layer(D, rows, layer));
  return best;
}

// The whole-sequence attention backward's high point over the attention types.
PhaseEstimate whole_attention_backward(const Dims& D, int64_t flows, const std::string& flow_note) {
  PhaseEstimate best;
  for (const auto& layer : D.attention_layers)
    keep_larger(best, whole_attention_backward(D, layer, flows, flow_note));
  return best;
}

// ---- strategies -------------------------------------------------------------------------------------------

std::vector<PhaseEstimate> plain_phases(const Dims& D) {
  const int64_t rows = D.N * D.T;
  const int64_t layer_graph = rows * D.layer_row() + 2 * D.rope(D.T);
  // LoRA: the embedding output needs no grad and input_norm is frozen, so layer 0's attn_norm keeps nothing
  // (its output h is kept by the adapters' A, counted in attn_row).
  const int64_t frozen_first_norm = D.full ? 0 : rows * (D.kept(D.d) + D.rms(D.d, 1));
  std::vector<PhaseEstimate> out;
  {
    PhaseBuilder p("head");
    p.add(fmt::format("autograd graph of {} layers: L*(N*T*layer_row + 4*T*hd*s)", D.L),
          D.L * layer_graph - frozen_first_norm, true);
    p.add("final norm input x_L (kept when s == f): N*T*d*s", rows * D.kept(D.d), true);
    add_whole_head(p, D);
    out.push_back(p.done());
  }
  {
    PhaseBuilder p("layer mlp backward");
    p.add("autograd graph of every layer (the top one below its MLP output norm)",
          D.L * layer_graph - frozen_first_norm - rows * D.output_norm(), true);
    p.add("dy: N*T*d*s", rows * D.d * D.s);
    p.add("MLP backward: max(N*T*I*s + d*I*s, 2 x N*T*I*s)", D.mlp_backward(D.T, false));
    out.push_back(p.done());
  }
  PhaseEstimate attention;
  for (const auto& layer : D.attention_layers) {
    PhaseBuilder p("layer attention backward");
    p.add(fmt::format("autograd graph of the {} lower layers", layer.index),
          layer.index * layer_graph - (layer.index > 0 ? frozen_first_norm : 0), true);
    p.add(
        "top layer: its input, attention half (below its output norm) and output, K path: N*T*(kept(d) + "
        "attn_row - output_norm + attn_out_row + kv_row)",
        rows * (D.kept(D.d) + D.attn_row() - D.output_norm() + D.attn_out_row() + D.kv_row_graph()));
    p.add("gradient in flight: N*T*d*s", rows * D.d * D.s);
    p.add("top layer rope tables", 2 * D.rope(D.T));
    add_attention_backward(p, D, D.T, D.T, layer.window, "T", "T");
    keep_larger(attention, p.done());
  }
  out.push_back(attention);
  return out;
}

std::vector<PhaseEstimate> checkpoint_phases(const Dims& D, bool chunked_head, int64_t cl) {
  std::vector<PhaseEstimate> out;
  out.push_back(checkpointed_forward_phase(D, D.T));
  {
    PhaseBuilder p(chunked_head ? "head chunk" : "head");
    add_checkpoints(p, D, fmt::format("layer inputs x_0..x_{}", D.L), D.L + 1, /*offloaded_on_device=*/1);
    if (chunked_head)
      add_chunk_head(p, D, cl);
    else
      add_whole_head(p, D);
    out.push_back(p.done());
  }
  out.push_back(whole_mlp_backward(D, D.L));
  out.push_back(whole_attention_backward(D, 3, "dy, x_in.grad, the residual's gradient"));
  return out;
}

std::vector<PhaseEstimate> mst_phases(const Dims& D, int64_t c, int64_t cl) {
  const int64_t rows = D.N * D.T;
  std::vector<PhaseEstimate> out;
  out.push_back(checkpointed_forward_phase(D, D.T));
  {
    PhaseBuilder p("head chunk");
    add_checkpoints(p, D, fmt::format("layer inputs x_0..x_{}", D.L), D.L + 1, /*offloaded_on_device=*/1);
    add_chunk_head(p, D, cl);
    out.push_back(p.done());
  }
  {
    // Attention re-forwarded whole and kept; the MLP recomputed and backpropagated one mini-sequence at a
    // time.
    PhaseBuilder p("layer mlp backward");
    add_checkpoints(p, D, "layer inputs", D.L);
    p.add("x1, dy, dx1: 3 x N*T*d*s", 3 * rows * D.d * D.s);
    p.add("attention graph, all rows: N*T*(attn_row + attn_out_row + kv_row)",
          rows * (D.attn_row() + D.attn_out_row() + D.kv_row_graph()));
    p.add("rope tables", 2 * D.rope(D.T));
    // Its input x1[s:e] is a view of x1 (counted above): the graph adds only what mlp_row has beyond it.
    p.add(
        "one mini-sequence's MLP graph (below its output norm) and output: N*c*(mlp_row - output_norm - "
        "kept(d) + d*s)",
        D.N * c * (D.mlp_row() - D.output_norm() - D.kept(D.d) + D.d * D.s));
    p.add("MLP backward: max(N*c*I*s + d*I*s [+ N*c*d*s: dy rows made contiguous, N > 1], 2 x N*c*I*s)",
          D.mlp_backward(c, true));
    out.push_back(p.done());
  }
  out.push_back(whole_attention_backward(D, 2, "dx1, x_in.grad; dy is released first"));
  return out;
}

std::vector<PhaseEstimate> streambp_phases(const Dims& D, int64_t c, int64_t cl) {
  const int64_t rows = D.N * D.T;
  std::vector<PhaseEstimate> out;
  out.push_back(checkpointed_forward_phase(D, c));
  {
    PhaseBuilder p("head chunk");
    add_checkpoints(p, D, fmt::format("layer inputs x_0..x_{}", D.L), D.L + 1, /*offloaded_on_device=*/1);
    add_chunk_head(p, D, cl);
    out.push_back(p.done());
  }
  // Alive through the top layer's chunks: the layer inputs below, dy and dx, the K/V path for all T rows with
  // its graph (attn_norm, k_norm, K, V), dK and dV, and the k rope tables. StreamBP holds K and V themselves
  // (leaves), so on CUDA's efficient kernel a chunk's graph adds the repeated K[:e], V[:e] on top.
  auto layer_base = [&](PhaseBuilder& p, const AttentionLayer& layer) {
    add_checkpoints(p, D, fmt::format("layer inputs x_0..x_{}", layer.index), layer.index + 1);
    p.add("dy and dx: 2 x N*T*d*s", 2 * rows * D.d * D.s);
    p.add("K/V path graph, all rows: N*T*(rms(d) + d*s + kv_row)",
          rows * (D.rms(D.d, 1) + D.d * D.s + D.kv_row()));
    p.add("dK, dV accumulators: 2 x N*T*Akv*acc", 2 * rows * D.Akv * D.acc());
    p.add("k rope tables: 2*T*hd*s", D.rope(D.T));
  };
  const AttentionLayer& top = D.attention_layers.front();
  PhaseEstimate mlp, attn;
  for (auto [r, e] : critical_chunks(D.T, c)) {
    {
      PhaseBuilder p("layer mlp backward");
      layer_base(p, top);
      p.add("chunk graph below the MLP output norm: N*c*(attn_row + attn_out_row + mlp_row - output_norm)",
            D.N * r * (D.attn_row() + D.attn_out_row() + D.mlp_row() - D.output_norm()));
      p.add("chunk gradient in flight: N*c*d*s", D.N * r * D.d * D.s);
      p.add("chunk graph: the efficient kernel's K[:e], V[:e] repeated to Hq heads: 2 x N*e*Aq*s",
            D.kv_repeat(Dims::visible_keys(r, e, top.window)));
      p.add("q rope tables", D.rope(r));
      p.add("MLP backward: max(N*c*I*s + d*I*s [+ N*c*d*s: dy rows made contiguous, N > 1], 2 x N*c*I*s)",
            D.mlp_backward(r, true));
      keep_larger(mlp, p.done());
    }
    for (const auto& layer : D.attention_layers) {
      // A sliding layer's chunk sees K/V from its window start on: e' = min(e, c + window - 1) keys.
      const int64_t keys = Dims::visible_keys(r, e, layer.window);
      PhaseBuilder p("layer attention backward");
      layer_base(p, layer);
      p.add(
          "chunk attention half (below its output norm), output, logsumexp: N*c*(attn_row - output_norm + "
          "attn_out_row)",
          D.N * r * (D.attn_row() - D.output_norm() + D.attn_out_row()));
      p.add("chunk gradients in flight: 2 x N*c*d*s", 2 * D.N * r * D.d * D.s);
      p.add("q rope tables", D.rope(r));
      p.add("chunk graph: the efficient kernel's K[:e], V[:e] repeated to Hq heads: 2 x N*e*Aq*s",
            D.kv_repeat(keys));
      add_attention_backward(p, D, r, keys, layer.window, "c", "e");
      keep_larger(attn, p.done());
    }
  }
  out.push_back(mlp);
  out.push_back(attn);
  return out;
}

int64_t lora_adapter_params(const ModelConfig& c, int64_t r) {
  const int64_t d = c.hidden, Aq = c.heads * c.head_dim, Akv = c.kv_heads * c.head_dim, I = c.intermediate;
  // q, k, v, o, gate, up, down: r * (in + out) each.
  return c.layers * r * ((d + Aq) + 2 * (d + Akv) + (Aq + d) + 2 * (d + I) + (I + d));
}

// The most elements of one trainable tensor: AdamW's step holds two temporaries of that size.
int64_t largest_trainable_numel(const Dims& D) {
  const int64_t widest = std::max({D.d, D.Aq, D.Akv, D.I});
  if (!D.full) return D.r * widest;                                  // a LoRA factor: (r, in) or (out, r)
  return std::max({D.V * D.d, D.I * D.d, D.Aq * D.d, D.Akv * D.d});  // the embedding (or head) is V x d
}

// A training run around the step (harness/run/train_loop.cpp), `P` trainable parameters, the largest tensor
// of them `largest` elements:
// - every batch of the run is built before it and kept;
// - AdamW's moments exp_avg and exp_avg_sq (zeros_like each optimized tensor, made by the first optimizer
//   step), in float32 with precision "mixed", where float32 master weights and their gradients (made before
//   step 1) are what the optimizer updates; in the model dtype with precision "model";
// - so every forward + backward from step 2 on runs with all of it alive (step 1: the masters);
// - the optimizer step itself: for each tensor, `(exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps)`
//   holds the square root and the quotient at once, two temporaries of the tensor's size. The gradients'
//   norm and clipping run in place (the norms are scalars).
void add_training_run(const TrainEstimate& t, const Dims& D, int64_t P, int64_t largest, MemoryEstimate& e) {
  e.batch *= t.batches;
  e.base = e.params + e.grads + e.batch;
  const int64_t o = t.mixed ? 4 : D.s;  // element size of the optimized tensors and the moments
  const int64_t masters = t.mixed ? 2 * P * 4 : 0, moments = 2 * P * o;
  e.optimizer = masters + moments;
  const EstimateTerm masters_term{"2 x P*4: float32 master weights and their gradients (mixed)", masters};
  const EstimateTerm moments_term{fmt::format("2 x P*{}: AdamW's exp_avg and exp_avg_sq", o), moments};
  for (auto& p : e.phases) {
    if (t.steps >= 2) {
      p.terms.push_back({"the optimizer's tensors, alive from step 2 on (masters, moments)", e.optimizer});
      p.bytes += e.optimizer;
    } else if (masters > 0) {
      p.terms.push_back(masters_term);
      p.bytes += masters;
    }
  }
  PhaseEstimate step{"optimizer step", 0, {}};
  if (masters > 0) step.terms.push_back(masters_term);
  step.terms.push_back(moments_term);
  step.terms.push_back({fmt::format("2 x largest trainable tensor*{}: sqrt(exp_avg_sq) and its quotient", o),
                        2 * largest * o});
  for (const auto& term : step.terms) step.bytes += term.bytes;
  e.phases.push_back(step);
}

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

}  // namespace

const std::vector<std::string>& estimated_impls() {
  static const std::vector<std::string> names = {"plain", "checkpoint", "checkpoint-chunked-head", "mst",
                                                 "streambp"};
  return names;
}

int64_t sequences_for(const std::string& objective, int64_t batch, int64_t group) {
  if (objective == "sft") return batch;
  if (objective == "dpo") return 2 * batch;
  if (objective == "grpo") return batch * group;
  throw std::invalid_argument(
      fmt::format("estimate: unknown objective '{}' (valid: sft, dpo, grpo)", objective));
}

void check_estimate_input(const EstimateInput& in) {
  const auto& impls = estimated_impls();
  if (std::find(impls.begin(), impls.end(), in.impl) == impls.end())
    throw std::invalid_argument(
        fmt::format("estimate: no estimate for impl '{}' (valid: {})", in.impl, fmt::join(impls, ", ")));
  if (in.objective != "sft" && in.objective != "dpo" && in.objective != "grpo")
    throw std::invalid_argument(
        fmt::format("estimate: unknown objective '{}' (valid: sft, dpo, grpo)", in.objective));
  if (in.offload && in.impl == "plain")
    throw std::invalid_argument(
        "estimate: plain keeps no layer checkpoints to offload (valid with offload: "
        "checkpoint, checkpoint-chunked-head, mst, streambp)");
  if (in.seq_len <= 0 || in.sequences <= 0 || in.lora_rank < 0 || in.threads <= 0)
    throw std::invalid_argument("estimate: seq_len, sequences and threads must be > 0, lora_rank >= 0");
  if (in.device != "cpu" && in.device != "cuda")
    throw std::invalid_argument(fmt::format("estimate: unknown device '{}' (valid: cpu, cuda)", in.device));
  if (in.train && (in.train->steps < 1 || in.train->batches < 1))
    throw std::invalid_argument("estimate: a training run needs steps >= 1 and batches >= 1");
  in.config.validate();
  element_bytes(in.dtype);  // throws for a dtype the estimate does not take
}

MemoryEstimate estimate_peak(const EstimateInput& in) {
  check_estimate_input(in);
  // The kernel causal_attention runs for this cell, by the model's own rule (attention.cpp); a sliding
  // layer may get another one (float32 on CUDA: math).
  const torch::Device device(in.device == "cuda" ? torch::kCUDA : torch::kCPU);
  const AttentionKernel kernel = attention_kernel_for(device, in.dtype, in.config.head_dim);
  if (in.config.has_sliding_layers() &&
      attention_kernel_for(device, in.dtype, in.config.head_dim, in.config.sliding_window) != kernel)
    throw std::invalid_argument(fmt::format(
        "estimate: on cuda, {} sliding-window layers run the math attention kernel (N x Hq x c x e scores; "
        "the memory-efficient kernel's backward drops the window), which the estimate does not model "
        "(modelled: bfloat16 on flash)",
        dtype_name(in.dtype)));
  if (in.device == "cuda" && kernel == AttentionKernel::math)
    throw std::invalid_argument(
        fmt::format("estimate: on cuda, {} with head dim {} runs the math attention kernel (N x Hq x c x e "
                    "scores), which the estimate does not model (modelled on cuda: bfloat16 on flash, "
                    "float32 on the memory-efficient kernel, head dim a multiple of 8)",
                    dtype_name(in.dtype), in.config.head_dim));
  if (kernel == AttentionKernel::efficient && in.dtype != torch::kFloat)
    throw std::invalid_argument(
        fmt::format("estimate: on cuda, {} with head dim {} runs the memory-efficient kernel in half "
                    "precision, which the estimate does not model (flash takes head dims up to 256)",
                    dtype_name(in.dtype), in.config.head_dim));

  const ModelConfig& c = in.config;
  Dims D{};
  D.N = in.sequences;
  D.T = in.seq_len;
  D.d = c.hidden;
  D.I = c.intermediate;
  D.V = c.vocab;
  D.L = c.layers;
  D.Hq = c.heads;
  D.Hkv = c.kv_heads;
  D.hd = c.head_dim;
  D.Aq = c.heads * c.head_dim;
  D.Akv = c.kv_heads * c.head_dim;
  D.P = in.threads;
  D.s = element_bytes(in.dtype);
  D.f = in.dtype == torch::kDouble ? 8 : 4;
  D.up = D.s != D.f;
  D.qk = c.qk_norm;
  D.r = in.lora_rank;
  D.full = in.lora_rank == 0;
  D.offload = in.offload;
  D.gemma_norms = c.unit_offset_norms;
  D.sandwich = c.sandwich_norms;
  // The topmost layer of each attention type: the top layer's, then the other type's topmost if any.
  D.attention_layers.push_back({c.layers - 1, c.window_of(c.layers - 1)});
  for (int64_t i = c.layers - 2; i >= 0; --i)
    if ((c.window_of(i) > 0) != (D.attention_layers.front().window > 0)) {
      D.attention_layers.push_back({i, c.window_of(i)});
      break;
    }
  D.flash = kernel == AttentionKernel::flash;
  D.efficient = kernel == AttentionKernel::efficient;
  const int64_t cp = clamp_rows(in.partition, D.T), cl = clamp_rows(in.logits_partition, D.T);

  MemoryEstimate e;
  e.attention_kernel = attention_kernel_name(kernel);
  const int64_t base_params = c.parameter_count(), adapters = D.full ? 0 : lora_adapter_params(c, D.r);
  e.params = (base_params + adapters) * D.s;
  e.grads = (D.full ? base_params : adapters) * D.s;
  // input_ids and targets (N, T) int64; DPO: reference sums (N) float64; GRPO: reference and old log-probs
  // (N, T), advantages and token weights (N), float64.
  e.batch = 2 * D.N * D.T * 8;
  if (in.objective == "dpo") e.batch += D.N * 8;
  if (in.objective == "grpo") e.batch += 2 * D.N * D.T * 8 + 2 * D.N * 8;
  e.base = e.params + e.grads + e.batch;

  if (in.impl == "plain")
    e.phases = plain_phases(D);
  else if (in.impl == "checkpoint")
    e.phases = checkpoint_phases(D, false, cl);
  else if (in.impl == "checkpoint-chunked-head")
    e.phases = checkpoint_phases(D, true, cl);
  else if (in.impl == "mst")
    e.phases = mst_phases(D, cp, cl);
  else
    e.phases = streambp_phases(D, cp, cl);

  for (const auto& p : e.phases) {
    int64_t ckpt = 0;
    for (const auto& t : p.terms) ckpt += t.checkpoint ? t.bytes : 0;
    if (p.name.rfind("head", 0) == 0)
      e.head_working_set = std::max(e.head_working_set, p.bytes - ckpt);
    else if (p.name.rfind("layer", 0) == 0)
      e.layer_working_set = std::max(e.layer_working_set, p.bytes - ckpt);
  }
  if (in.train)
    add_training_run(*in.train, D, D.full ? base_params : adapters, largest_trainable_numel(D), e);
  const PhaseEstimate* top = &e.phases.front();
  for (const auto& p : e.phases)
    if (p.bytes > top->bytes) top = &p;
  e.dominant_phase = top->name;
  e.peak_above_base = top->bytes;
  for (const auto& t : top->terms) e.checkpoints += t.checkpoint ? t.bytes : 0;
  e.peak_bytes = e.base + e.peak_above_base;
  if (D.offload) {
    e.host_bytes = checkpoints_bytes(D, D.L);    // one pinned buffer per layer input, reused every step
    e.offload_traffic_bytes = 2 * e.host_bytes;  // each checkpoint out in the forward, back in the backward
  }
  return e;
}

std::string format_estimate(const EstimateInput& in, const MemoryEstimate& e) {
  std::ostringstream o;
  o << fmt::format("{} on {} ({}), T={}, N={}, partition={}, logits_partition={}, objective {}{}{}{}\n",
                   in.impl, in.config.name, dtype_name(in.dtype), in.seq_len, in.sequences,
                   clamp_rows(in.partition, in.seq_len), clamp_rows(in.logits_partition, in.seq_len),
                   in.objective, in.lora_rank > 0 ? fmt::format(", LoRA r={}", in.lora_rank) : "",
                   in.offload ? ", checkpoints offloaded" : "",
                   in.device == "cuda" ? fmt::format(", on cuda ({} attention)", e.attention_kernel) : "");
  o << fmt::format("  base {:>14} bytes ({}): params {}, grads {}, batch {}{}\n", e.base, mib(e.base),
                   e.params, e.grads, e.batch,
                   in.train ? fmt::format(" ({} batches)", in.train->batches) : "");
  if (in.train)
    o << fmt::format("  training run of {} AdamW steps, precision {}: optimizer {} bytes ({})\n",
                     in.train->steps, in.train->mixed ? "mixed" : "model", e.optimizer, mib(e.optimizer));
  for (const auto& p : e.phases) {
    o << fmt::format("  {}{:<26} {:>14} bytes ({}) above base\n", p.name == e.dominant_phase ? "*" : " ",
                     p.name, p.bytes, mib(p.bytes));
    for (const auto& t : p.terms) o << fmt::format("      {:>14}  {}\n", t.bytes, t.name);
  }
  o << fmt::format("  peak {:>14} bytes ({}), {} above base, in the {}\n", e.peak_bytes, mib(e.peak_bytes),
                   mib(e.peak_above_base), e.dominant_phase);
  if (in.offload)
    o << fmt::format("  host {:>14} bytes ({}) of offloaded checkpoints; {} bytes ({}) copied per step\n",
                     e.host_bytes, mib(e.host_bytes), e.offload_traffic_bytes, mib(e.offload_traffic_bytes));
  return o.str();
}

}  // namespace bpbench
