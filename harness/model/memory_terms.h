// memory_terms.h: what the model's operations and its attention kernels keep alive during one forward +
// backward, as byte terms. Each strategy (impls/) composes them into the phases of its own estimate, next to
// the code they describe (phase_builder.h: the pieces every strategy's phases share);
// harness/estimate/estimate.h adds the base (weights, gradients, batch) and picks the peak.
//
// Conventions (legend in model_config.h): s bytes per element of the model dtype, f of the compute dtype
// (float32 for float32/bfloat16 models, float64 for float64), "up" when they differ (bfloat16: every norm and
// softmax input is upcast into a new float32 tensor). Aq = Hq*hd, Akv = Hkv*hd. A "row" term is bytes per
// (sequence, token) and is multiplied by N and the rows it covers; rope tables, the c x c mask and weight
// gradients do not scale with N. The formulas, and which tensor each term is: docs/estimate.md.
//
// What autograd keeps (LibTorch 2.x, as measured by the tracking allocator):
//   rms_norm(x, w) over width w keeps the normalised x (w s; only when w is trainable), the rsqrt (f per
//     row), and its input: x itself when s == f, else the float32 copy (w f). pow(x, 2) saves that same
//     input, not its result (1.13 kept the square too);
//   rope keeps only its cos/sin tables (x * cos saves cos, not x): the pre-rope q/k are freed;
//   causal_attention keeps q after RoPE (Aq s), K, V, its output (Aq s: also o_proj's input, a view of it)
//     and the logsumexp (Hq f); no scores, no mask (the kernels' own buffers: the Notes below);
//   the MLP keeps gate, silu(gate), up and their product (4 I s); LoRA keeps x A^T (r s) per adapted linear.
//
// Note [CPU fused attention buffers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch's fused CPU kernel (flash-style, attention_cpu.cpp) works in query blocks of qb = 32, 64 or 256
// rows (fewer than 192 queries, fewer than 768, else; at most the queries) by kb = min(keys, 512) keys, with
// one scratch block per thread (P threads):
//   forward  P * ((qb*kb + 2*qb + qb*hd) * f + [up] qb*kb*s): scores, row max and sum, an output tile, and a
//            bfloat16 copy of the scores (attn_forward_scratch);
//   backward P * (2*qb*kb * (f + [up] s) + qb*f): scores and their gradient, their bfloat16 copies and a row
//            sum (attn_backward_scratch).
// The backward allocates dQ, dK and dV beside the incoming dO: N*R*(2*Aq + 2*Akv)*s over R = E rows
// (attn_backward). A StreamBP chunk (R queries over E > R keys) runs the kernel twice, over the prefix keys
// [0, E-R) with no mask and over the R x R diagonal block, merged through the logsumexps; its backward is
// the largest of the prefix call, N*(2*R*Aq + 2*(E-R)*Akv)*s + scratch_bwd(R, E-R), the diagonal call,
// N*(3*R*Aq + 2*E*Akv)*s + scratch_bwd(R, R), and the concatenation of dK and dV, N*(2*R*Aq + 3*E*Akv)*s
// (chunk_attn_backward). Under a sliding window shorter than the keys it runs banded blocks of rb =
// min(256, R) query rows over at most kb = min(E, rb + w - 1) keys, each with its own additive mask (rb*kb*f)
// (window_block_forward, window_block_backward). Measured to the byte with the tracking allocator.
//
// Note [Flash attention buffers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// FlashAttention-2 (bfloat16 on CUDA; PyTorch 2.11's flash_attn/flash_api.cpp) saves what the CPU kernel
// saves (q, K, V as views, the output, a float32 logsumexp); one call per chunk (bottom-right causal: no
// prefix/diagonal split, no merge); no per-thread scratch; its no-grad forward also returns the logsumexp.
// Its backward (mha_bwd) allocates dQ, dK, dV and, while the kernel runs, a float32 dq accumulator (N,
// round128(c), Hq, hd_r) with hd_r = hd rounded up to 32 (to 64 above 128) (flash_dq_accum), softmax_d (N,
// Hq, round128(c)) float32 (flash_softmax_d) and, with GQA, dK/dV expanded to Hq heads, (N, e, Hq, hd) each,
// summed per kv head before it returns (flash_expanded). Derived from the source, not yet measured on a GPU.
//
// Note [Efficient attention buffers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The memory-efficient kernel (float32 on CUDA) takes K and V repeated to Hq heads (attention_gpu.cpp, a copy
// when g > 1), and those copies are what the graph saves: K and V themselves are freed, except where StreamBP
// holds them (kv_repeat, kv_row_graph). Under no grad it computes no logsumexp. Its backward
// (attention_backward.cu, _efficient_attention_backward) returns dK/dV per query head (the repeat's backward
// sums them) and allocates delta (N, Hq, c) float32, computed for float32 from a float32 (N, c, Hq, hd)
// product, and a workspace of float32 dQ tiles (kernel_backward.h, workspace_size): per (sequence, query
// head) ceil(c/BI) x ceil(hd/64) tiles of a 16-byte lock and BI x 64 floats, BI = 64 for hd <= 64 else 128
// (the kernel cutlassB picks on sm80+ when its shared memory fits: assumed H100) (efficient_scratch).
// Derived from the source, not yet measured on a GPU.
//
// Note [Mixture-of-experts buffers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Model::experts_mlp over R = N x rows rows: the router's logits (R, E) in s, their softmax in f (float32, or
// float64 for a float64 model), its top k (weights in f, indices int64), renormalised over the k when the
// family does, then expert by expert the Re rows routed to it (nonzero's (Re, 2) int64 positions): gathered
// (index_select, (Re, d)), through gate, up, silu and their product (4 (Re, Ie)), the down projection (Re,
// d), times the gathered routing weight, added into the output (R, d) (index_add_). What autograd keeps is
// routing_saved_row() per row plus routed_saved_row() per routed row: the k R routed rows are the same
// whatever the routing, so the graph's bytes are exact. What one expert allocates at a time (a no-grad
// forward's temporaries, its backward's gradients) depends on its Re, which the estimate cannot know: it
// counts the balanced Re = ceil(k R / E). Its backward runs expert by expert from the last one, each
// expert's graph released as it is done; index_select's backward scatters each expert's dh into a new
// (R, d), added into the rows' gradient.
//
// Note [Math attention buffers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The math kernel (attention_math.cpp: float64 on CUDA, head dims that are not a multiple of 8 on CUDA,
// float32 sliding windows on CUDA) materialises N x Hq x c x e scores and their softmax. No estimate models
// it: estimate_peak refuses those cells by name (estimate_flops counts them, masked scores included).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "harness/model/attention_blocks.h"

namespace bpbench {

// One named tensor term of a phase: `bytes` in all (count x shape x element size).
struct EstimateTerm {
  std::string name;
  int64_t bytes = 0;
  bool checkpoint = false;  // kept across the whole backward (layer inputs, or plain's autograd graph)
};

// One phase's high point: everything alive above base.
struct PhaseEstimate {
  std::string name;  // "forward", "head", "head chunk", "layer attention backward", "layer mlp backward"
  int64_t bytes = 0;
  std::vector<EstimateTerm> terms;
};

// The topmost layer of one attention type (full, or sliding over `window` keys): the layer whose attention
// backward is that type's high point, with every lower checkpoint alive.
struct AttentionLayer {
  int64_t index;
  int64_t window;  // 0: full causal attention
};

// The dimensions of one cell and the per-row and per-call terms of the model's operations.
struct MemoryTerms {
  int64_t N, T, d, I, V, L, Hq, Hkv, hd, Aq, Akv;
  int64_t s, f;  // element bytes: model dtype, compute dtype
  int64_t P;     // CPU threads (the attention kernel's scratch is per thread)
  bool up;       // s != f: norms and softmax copy their input to float32
  bool qk;       // q/k RMSNorm
  int64_t r;     // LoRA rank (0: full fine-tuning)
  bool full;     // base weights (norms, LM head, embedding included) are trainable
  bool offload;  // layer checkpoints in host memory (impls/machinery/offload.h)
  // Norms scaled before their cast (Gemma 3's (1 + w), OLMo's): the normalised x is saved in f, not s.
  bool norms_scaled_before_cast = false;
  bool sandwich = false;    // norms on the attention and MLP outputs (Gemma 3, OLMo)
  bool input_norms = true;  // norms before the attention and the MLP (false: OLMo)
  // The q and k norms' rsqrt values a row: Hq and Hkv per head, 1 each over the whole projection (OLMo).
  int64_t qk_rsqrt_q = 0, qk_rsqrt_k = 0;
  bool rope_top = true;     // the layers the phases estimate (the topmost) apply RoPE (not SmolLM3's NoPE)
  int64_t rope_layers = 0;  // how many layers apply RoPE (L but for SmolLM3's NoPE layers)
  int64_t rotary = 0;  // partial RoPE (GLM-4.5's; MLA's RoPE key): the rotated dims of a head (0: all hd)
  // Multi-head latent attention in the expanded form (Note [MLA in the expanded form], model.cpp): q through
  // a latent of mla_rq (0: q_proj), K and V from a latent of mla_r, values of mla_dv carried at hd (Hkv =
  // Hq).
  bool mla = false;
  int64_t mla_rq = 0, mla_r = 0, mla_dr = 0, mla_dv = 0;
  // Qwen3.5's full layers: the attention output times sigmoid(h W_gate) before o_proj.
  bool gated = false;
  // Hybrid linear attention (Qwen3.5): Gated DeltaNet's dimensions (Hk, Hv, dk, dv, K taps, C = 2 Hk dk +
  // Hv dv conv channels; legend: model_config.h) and its topmost layer (-1: no such layer). Its terms:
  // harness/model/linear_memory_terms.h.
  int64_t la_Hk = 0, la_Hv = 0, la_dk = 0, la_dv = 0, la_K = 0, la_C = 0, linear_top = -1;
  bool hybrid() const { return linear_top >= 0; }
  std::vector<bool> linear_layers;  // which layers are Gated DeltaNet's, bottom first
  // Of the lowest `count` layers, the Gated DeltaNet ones.
  int64_t linear_layers_below(int64_t count) const {
    return std::count(linear_layers.begin(),
                      linear_layers.begin() + std::min<int64_t>(count, linear_layers.size()), true);
  }
  std::vector<AttentionLayer> attention_layers;  // one per attention type present, topmost first
  // The CUDA kernel the attention terms model (both false: the fused CPU kernel, every term as measured).
  bool flash = false;      // FlashAttention-2: bfloat16
  bool efficient = false;  // the memory-efficient kernel: float32
  bool cuda() const { return flash || efficient; }
  bool gqa() const { return Hq != Hkv; }

  // Mixture of experts: every layer's MLP (but dense_layers) a router and E experts of Ie, k a row; E = 0:
  // the dense MLP of I. See Note [Mixture-of-experts buffers].
  int64_t E = 0, k = 0, Ie = 0;
  // A routed model's dense layers (DeepSeek's first_k_dense_replace), all below the routed ones, with the
  // dense MLP of I; the phases are the routed top layer's and, for the layer phases, the dense layers' own
  // (estimate.cpp: add_dense_layer_phases).
  int64_t dense_layers = 0;
  bool norm_topk = false;  // the k routing weights renormalised (Qwen3-MoE's norm_topk_prob, Mixtral)
  // gpt-oss's router: the k largest logits and a softmax over them only (no E-wide softmax kept; the
  // load-balancing loss, which would keep one, is not estimated for it).
  bool topk_then_softmax = false;
  // gpt-oss's clamped SwiGLU (ops.h, clamped_swiglu): what an expert row's activation keeps, 7 (Ie) tensors
  // (gate and up as the clamps save them, the clamped gate, its sigmoid, up + 1, their product, the result)
  // against SiLU's 4, and the 9 (Ie) alive at once as its one expression ends (its temporaries too).
  bool clamped_swiglu = false;
  // DeepSeek's routing (ModelConfig::grouped_routing): the router's logits from float32 copies of its input
  // and weight (copies only where s != f, the input's then kept), sigmoid or softmax scores kept in f, the
  // chosen k gathered from them, and each routed row weighted in f (its weight kept in f).
  bool grouped_routing = false;
  // DeepSeek's shared experts: one SwiGLU of Ish on every row of a routed layer (0: none).
  int64_t Ish = 0;
  int64_t activation_saved() const { return clamped_swiglu ? 7 : 4; }
  int64_t activation_peak() const { return clamped_swiglu ? 9 : 4; }
  bool moe() const { return E > 0; }
  // A routed model cut after its dense first layers (dense_layers of them), with the dense MLP of I: the
  // terms of those layers' phases; its attention layers the cut's topmost of each type.
  MemoryTerms dense_kind() const {
    MemoryTerms t = *this;
    t.E = t.k = t.Ie = t.Ish = 0;
    t.grouped_routing = t.norm_topk = t.topk_then_softmax = t.clamped_swiglu = false;
    t.L = dense_layers;
    t.dense_layers = 0;
    t.layer_group = dense_layer_group;
    t.dense_layer_group = 0;
    t.shards_above = (L - dense_layers) * shard(layer_group);
    t.rope_layers = std::min(rope_layers, dense_layers);
    t.attention_layers.clear();
    for (const auto& layer : attention_layers)
      if (layer.index < dense_layers) t.attention_layers.push_back(layer);
    if (t.attention_layers.empty())
      t.attention_layers.push_back({dense_layers - 1, attention_layers.front().window});
    return t;
  }
  // The dense first layers' graph a row (plain keeps them all): layer_row() of the dense kind.
  int64_t dense_layer_row() const { return dense_kind().layer_row(); }

  // Data parallel over `ranks` processes with ZeRO-2 gradient buckets (impls/machinery/dist_common.h; N is
  // then the rows of one rank); 1: one process. The trainable elements of each parameter group: the embedding
  // (with tied embeddings the LM head's too), one layer, the head (final norm and an untied LM head).
  int64_t ranks = 1;
  // The ring strategies' 2-D mesh (impls/machinery/mesh_attention.h): Ulysses over this many of the ranks
  // inside rings of ranks / ulysses; 1 for every other strategy.
  int64_t ulysses = 1;
  int64_t embedding_group = 0, layer_group = 0, head_group = 0;
  // A routed model's dense first layers (dense_layers of them): their own group; layer_group is then a routed
  // layer's.
  int64_t dense_layer_group = 0;
  // Set in dense_kind(): the routed layers' shards, reduced before the dense layers' backward begins.
  int64_t shards_above = 0;
  bool tied = false;
  // Every layer's gradient shard (at the step's end; a data-parallel step's base).
  int64_t layer_shards() const {
    return (L - dense_layers) * shard(layer_group) + dense_layers * shard(dense_layer_group) + shards_above;
  }
  // A group's gradient bucket (flat, padded to a multiple of ranks, model dtype) and one rank's shard of it.
  int64_t bucket(int64_t numel) const { return (numel + ranks - 1) / ranks * ranks * s; }
  int64_t shard(int64_t numel) const { return whole_gradients ? bucket(numel) : bucket(numel) / ranks; }
  // sharding none and zero1: each rank keeps every group's whole reduced gradient, not a shard.
  bool whole_gradients = false;
  // A training step of several micro-batches (grad_accum > 1): from the second on, every phase holds every
  // gradient shard of the step so far, which each group's reduction adds into (dist_common.h).
  bool accumulating = false;

  // dK/dV accumulators of streambp: float32 for a bfloat16 model, else the model dtype.
  int64_t acc() const { return s == 2 ? 4 : s; }
  // The input of an rms_norm stays alive as the saved tensor when no upcast copy replaces it.
  int64_t kept(int64_t w) const { return up ? 0 : w * s; }
  // rms_norm over `w` (with `heads` rsqrt values per row) keeps, besides its input and output: the normalised
  // x (when the weight is trainable), the float32 copy of x (bfloat16), the rsqrt.
  int64_t rms(int64_t w, int64_t heads) const {
    return (full ? w * (norms_scaled_before_cast ? f : s) : 0) + (up ? w * f : 0) + heads * f;
  }
  // Gemma 3's norm on a block's output (its input is the o_proj or down projection's output, kept by it).
  int64_t output_norm() const { return sandwich ? kept(d) + rms(d, 1) : 0; }
  // Its backward, the first step of a block's backward while the whole block graph is alive: four (N, rows,
  // d) tensors in f above what it holds, five when its weight is frozen (LoRA), for float32 and bfloat16
  // alike (measured with the tracking allocator: 16 and 20 bytes per element).
  int64_t output_norm_backward(int64_t rows) const {
    return sandwich ? N * rows * d * (full ? 4 : 5) * f : 0;
  }
  // A block's input norm per row: its saved tensors and its output h, which the projections read. Without
  // input norms (OLMo) the projections read the block's input itself (block_input_kept).
  int64_t input_norm_row() const { return input_norms ? rms(d, 1) + d * s : 0; }
  // What keeps a block's input (the layer's input, x1) alive in its graph: its input norm when that keeps it
  // (kept(d)), or without input norms the projections that read it (d s).
  int64_t block_input_kept() const { return input_norms ? kept(d) : d * s; }
  // Without input norms a strided slice of rows (a chunk of N > 1 sequences) is made contiguous once before
  // the projections read it (Model::attn_norm, mlp_block), and that copy is what they keep.
  int64_t strided_rows_copy(bool strided) const { return !input_norms && strided && N > 1 ? d * s : 0; }
  // What a block's projections read in a call over `rows` of the T rows: the input norm's output h (d s a
  // row), or without input norms the contiguous copy of a strided slice, or the input itself (nothing new).
  int64_t normed_input(int64_t rows) const { return input_norms ? d * s : strided_rows_copy(rows < T); }
  // Attention half of a layer, per query row: attn_norm (+ its output h), the q path (q_norm), qg. LoRA: x
  // A^T of q, k, v, o.
  // MLA: q_a's output (its norm's input), the norm, q_b's input, q; LoRA on q_a, q_b (or q), kv_a, kv_b, o.
  int64_t attn_row() const {
    if (mla) {
      const int64_t q_latent = mla_rq > 0 ? kept(mla_rq) + rms(mla_rq, 1) + mla_rq * s : 0;
      return input_norm_row() + q_latent + Aq * s + (mla_rq > 0 ? 5 : 4) * r * s + output_norm();
    }
    return input_norm_row() + (qk ? kept(Aq) + rms(Aq, qk_rsqrt_q) : 0) + Aq * s + 4 * r * s + gate_row() +
           output_norm();
  }
  // The output gate's graph a row: sigmoid's result and the gated values o_proj reads (Aq s each); LoRA: x
  // A^T of output_gate.
  int64_t gate_row() const { return gated ? 2 * Aq * s + r * s : 0; }
  // The gate's logits a row, alive beside q from the projections to o_proj in a no-grad forward.
  int64_t gate_logits() const { return gated ? Aq * s : 0; }
  // K/V path, per key row: k_norm's saved tensors, then K (after RoPE) and V.
  // MLA: kv_a's whole output (its latent norm's input is a view of it), the norm, kv_b's input, K and V at
  // hd.
  int64_t kv_row() const {
    if (mla) return (up ? 0 : (mla_r + mla_dr) * s) + rms(mla_r, 1) + mla_r * s + 2 * Akv * s;
    return (qk ? kept(Akv) + rms(Akv, qk_rsqrt_k) : 0) + 2 * Akv * s;
  }
  // The same as a layer's graph keeps it. The efficient CUDA kernel saves K and V repeated to Hq heads (a
  // copy when g > 1), and nothing else holds K and V in a whole-layer graph, so they are Aq wide there;
  // everywhere else kv_row().
  int64_t kv_row_graph() const { return efficient && gqa() ? kv_row() + 2 * (Aq - Akv) * s : kv_row(); }
  // MLP half, per row: x1 (as mlp_norm's input), mlp_norm, its output n, gate, silu, up, product; LoRA x
  // A^T.
  int64_t mlp_row() const { return block_input_kept() + input_norm_row() + mlp_saved_row() + output_norm(); }
  // What the MLP's own graph keeps per row: gate, silu, up, product (4 I s) and LoRA's x A^T; routed: the
  // router's softmax and top-k, and per routed row (k of them) its expert's graph.
  int64_t mlp_saved_row() const {
    return moe() ? routing_saved_row() + k * routed_saved_row() + shared_saved_row() : 4 * I * s + 3 * r * s;
  }
  // The shared expert's graph a row: gate, silu, up, product (4 Ish s) and LoRA's x A^T (3 r s).
  int64_t shared_saved_row() const { return Ish > 0 ? 4 * Ish * s + 3 * r * s : 0; }
  // The routed MLP's last forward moment over R rows with a shared expert, its whole graph made: beside the
  // routed output (counted with the experts' terms) the shared down projection's (R, d), before it is added
  // into the routed one in place (model.cpp); with LoRA that projection's base output, its adapter's output,
  // the scaled adapter output and their sum (Linear: y + scale * (x A^T) B^T), four. Where it is above the
  // experts' backward, a whole-layer recompute's high point (checkpoint, mst's and streambp's chunks) is
  // there (measured on tiny-glm4-moe: docs/estimate.md, "Mixtures of experts (Qwen3-MoE, Mixtral)").
  int64_t shared_forward_end(int64_t R) const { return Ish > 0 ? (r > 0 ? 4 : 1) * R * d * s : 0; }
  // Saved by the attention kernel beyond q, K and V, per query row: its output (also o_proj's input) and
  // the logsumexp.
  // MLA with values narrower than hd: o_proj keeps its input, a copy of the unpadded values (Hq dv s).
  int64_t attn_out_row() const { return attn_saved_row() + (mla && mla_dv < hd ? Hq * mla_dv * s : 0); }
  // What an attention backward still holds of it: the kernel's saved output and logsumexp (o_proj's backward,
  // which runs first, has released its copy).
  int64_t attn_saved_row() const { return Aq * s + Hq * f; }
  // Everything one layer's autograd graph keeps per row: attention, its output, K/V, MLP, and the layer's
  // input (when rms_norm keeps it).
  int64_t layer_row() const {
    return attn_row() + attn_out_row() + kv_row_graph() + mlp_row() + block_input_kept();
  }
  // The final norm's saved tensors and its output h (kept by the LM head only when W_lm is trainable: with
  // LoRA the frozen head saves nothing of its input).
  int64_t final_norm_row() const { return rms(d, 1) + (full ? d * s : 0); }
  // Not scaled by N: the cos and sin tables of RoPE over `rows` positions (float32 computed, cast to s).
  int64_t rope(int64_t rows) const { return rope_top ? rope_table(rows) : 0; }
  int64_t rope_table(int64_t rows) const { return 2 * rows * rope_dim() * s; }  // a RoPE layer's
  int64_t rope_dim() const { return rotary > 0 ? rotary : hd; }                 // the rotated dims of a head
  // The fused CPU kernel's blocks and per-thread scratch: see Note [CPU fused attention buffers].
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
    if (moe()) return std::max(dy_copy + experts_backward(N * rows), shared_forward_end(N * rows));
    // Gemma 3: the MLP output norm's backward comes first, with its saved tensors still alive (MLP phases
    // count them here, not in the graph: mlp_row() - output_norm()); they are released before the
    // projections' backward, whose incoming gradient is then the norm's input gradient, a new (N, rows, d)
    // tensor (not the residual's dy), released once the down projection's backward is done.
    const int64_t dy_below_norm = sandwich ? N * rows * d * s : 0;
    return std::max({N * rows * I * s + (full ? d * I * s : 0) + dy_copy + dy_below_norm,
                     2 * N * rows * I * s, N * rows * output_norm() + output_norm_backward(rows)});
  }
  // No-grad forward of the MLP over `R` = N x rows rows beside its input and normed rows: the four (R, I)
  // temporaries of one expression (model.cpp, mlp_block) and LoRA's, or routed (experts_forward).
  int64_t mlp_forward(int64_t R) const { return moe() ? experts_forward(R) : R * (4 * I + 2 * r) * s; }

  // ---- mixture of experts: see Note [Mixture-of-experts buffers] ----
  // Rows one expert takes when the k R choices are spread evenly (the estimate cannot know the routing).
  int64_t expert_rows(int64_t R) const { return ceil_div(k * R, E); }
  // Kept per row by the routing: the softmax (E f), the top-k indices (k int64) and, renormalised, the top-k
  // weights and their sum (k f + f).
  // gpt-oss: the top-k indices and the softmax over the k logits (k s).
  // DeepSeek's: the scores (E f), the indices, renormalised the gathered weights and their sum, and in
  // bfloat16 the router input's float32 copy (d f).
  int64_t routing_saved_row() const {
    if (topk_then_softmax) return k * 8 + k * s;
    if (grouped_routing) return E * f + k * 8 + (norm_topk ? k * f + f : 0) + (up ? d * f : 0);
    return E * f + k * 8 + (norm_topk ? k * f + f : 0);
  }
  // Kept per routed row by its expert: its position in the top-k (nonzero's two int64), the gathered row h
  // (d s), gate, silu, up, product (4 Ie s), the down projection's output (d s) and its routing weight (s),
  // the weighted output (d s: index_add_'s backward expands the gradient as its source), LoRA's x A^T (3 r
  // s).
  int64_t routed_saved_row() const {
    return 16 + 3 * d * s + activation_saved() * Ie * s + (grouped_routing ? f : s) + 3 * r * s;
  }
  // No-grad forward over R rows: the output (R, d), the router logits, the top-k weights and indices, and one
  // expert's rows at a time: their positions, h, and either gate, up, silu, product or gate, product, the
  // down projection's output and its weighted copy (LoRA: x A^T and B's output).
  int64_t experts_forward(int64_t R) const {
    const int64_t Re = expert_rows(R);
    const int64_t routing = R * (d * s + E * s + k * (s + 8));
    const int64_t expert =
        Re * (16 + d * s + std::max(activation_peak() * Ie, 2 * Ie + 2 * d) * s + 2 * r * s);
    // DeepSeek's shared expert runs after the routed ones, over every row: the dense MLP's temporaries and
    // its down projection's output (derived as the dense MLP's; no measured phase of tiny-glm4-moe peaks
    // there).
    const int64_t shared = Ish > 0 ? R * (4 * Ish + 2 * r + d) * s : 0;
    return routing + std::max(expert, shared);
  }
  // Backward over R rows (the incoming gradient counted by the caller), expert by expert from the last, every
  // expert's graph alive at the first: its weighting's backward, the expert's dy rows, dz and dy * z, with
  // its weighted output (index_add_'s saved source) released; each later step of the expert releases at
  // least what it allocates (measured with the tracking allocator). From the second expert on: the rows'
  // input gradient accumulated over the experts beside the next expert's, scattered into a new (R, d)
  // (index_select's backward), two experts' graphs released.
  int64_t experts_backward(int64_t R) const {
    const int64_t Re = expert_rows(R);
    const int64_t weighting = 2 * Re * d * s;
    const int64_t scatter = 2 * R * d * s + Re * d * s - 2 * Re * routed_saved_row();
    return std::max(weighting, scatter);
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
  // A chunk's backward into a gradient sink (ops.h, StreamBP's dK, dV; attention_cpu.cpp: SinkAttention):
  // the prefix keys in blocks of max(c, kMinSinkKeyBlock), then the diagonal, one call at a time, each
  // call's dK, dV added into the sink and released. At a later call: dO, dQ so far, the call's dQ, dK, dV
  // over its keys (at most `widest`) and its scratch. One call when keys = rows. In bfloat16 and float16 dQ
  // so far is float32 (attention.cpp, sink_backward_by_key_blocks) from the second call on, and adding a
  // call's dQ into it makes a float32 copy of that dQ on the CPU (CUDA's kernel casts as it reads): the
  // first call (the widest block, no sum yet), the later ones (the sum beside them), and each addition (dO,
  // the sum, the call's dQ and its copy, its dK, dV gone).
  int64_t sink_attn_backward(int64_t rows, int64_t keys) const {
    if (keys == rows) return attn_backward(rows);
    if (s >= 4) {
      const int64_t widest = sink_widest_block(rows, keys);
      return N * (3 * rows * Aq + 2 * widest * Akv) * s + attn_backward_scratch(rows, widest);
    }
    const int64_t prefix = keys - rows, block = std::max(rows, flash ? kCudaSinkKeyBlock : kMinSinkKeyBlock);
    const int64_t first_keys = std::min(block, prefix);
    const int64_t later_keys = std::max(rows, prefix > block ? std::min(block, prefix - block) : 0);
    const int64_t dq_sum = N * rows * Aq * 4;
    auto call = [&](int64_t call_keys) {
      return N * (2 * rows * Aq + 2 * call_keys * Akv) * s + attn_backward_scratch(rows, call_keys);
    };
    const int64_t adding = N * rows * Aq * 2 * s + dq_sum + (cuda() ? 0 : dq_sum);
    return std::max({call(first_keys), call(later_keys) + dq_sum, adding});
  }
  // The most keys one call of a sink's backward takes: the prefix's blocks of max(rows, the kernel's
  // minimum: attention_blocks.h, flash's on CUDA), or the diagonal's rows.
  int64_t sink_widest_block(int64_t rows, int64_t keys) const {
    const int64_t block = std::max(rows, flash ? kCudaSinkKeyBlock : kMinSinkKeyBlock);
    return std::max(rows, std::min(block, keys - rows));
  }
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

  // ---- multi-head latent attention through the latent: Note [StreamBP through the latent] ----
  // What a token's K and V are made from: the normed latent and the RoPE key, r + dr values.
  int64_t latent_width() const { return mla_r + mla_dr; }
  // kv_b's output a row: every head's nope key and value, Hq x (hd - dr + dv) values.
  int64_t kv_b_width() const { return Hq * (hd - mla_dr + mla_dv); }
  // One block of `keys` key rows expanded (expand_mla_latent): kv_b's output beside the K and V made from
  // it, (N, Hq, keys, hd) each; with LoRA, before them, the adapter's expression: kv_b's base output, x A^T,
  // the adapter's output, its scaled copy and their sum.
  int64_t latent_expansion(int64_t keys) const {
    const int64_t W = kv_b_width();
    return N * keys * std::max(W + 2 * Aq, r > 0 ? 4 * W + r : 0) * s;
  }
  // The no-grad attention of `rows` queries over `keys` keys by key blocks of `rows` (latent_attention.cpp,
  // attention_by_key_blocks): from the second block on, the output and logsumexp so far beside the highest
  // of a block's expansion, its attention (its K and V, its partial output and logsumexp, the kernel's
  // scratch), or the merge (the partial output, the new logsumexp, the merged output in f, one weight, and in
  // bfloat16 the float32 copy of one output).
  int64_t latent_attn_forward(int64_t rows, int64_t keys) const {
    const int64_t part = N * rows * (Aq * s + Hq * f);
    const int64_t call = 2 * N * rows * Aq * s + part + (cuda() ? 0 : attn_forward_scratch(rows, rows));
    if (keys == rows) return std::max(latent_expansion(rows), call);
    const int64_t merge = part + N * rows * ((up ? 2 : 1) * Aq * f + 2 * Hq * f);
    return part + std::max({latent_expansion(rows), call, merge});
  }
  // The backward of that attention, block by block (LatentChunkAttention::backward): dO, dQ so far (float32
  // for bfloat16, from the second block on), the block's K and V with their graph from kv_b and, either, the
  // kernel's call (the block's dQ, dK, dV and its scratch) or the expansion's backward with the block's dQ,
  // dK, dV still alive (latent_expansion_backward).
  int64_t latent_attn_backward(int64_t rows, int64_t keys) const {
    const int64_t dq_sum = keys > rows ? N * rows * Aq * (s == 2 ? 4 : s) : 0;
    // The block's latent rows are a strided slice when N > 1: kv_b's matmul saves a contiguous copy.
    const int64_t latent_copy = N > 1 ? N * rows * mla_r * s : 0;
    const int64_t block =
        N * rows * Aq * s + dq_sum + 2 * N * rows * Aq * s + latent_copy + (r > 0 ? N * rows * r * s : 0);
    const int64_t grads = N * rows * 3 * Aq * s;  // the call's dQ, and dK, dV over its `rows` keys
    const int64_t scratch =
        cuda() ? flash_dq_accum(rows) + flash_softmax_d(rows) : attn_backward_scratch(rows, rows);
    return block + grads + std::max(scratch, latent_expansion_backward(rows));
  }
  // A block's expansion backpropagated with its dK, dV: the RoPE key's gradient summed over the heads (N,
  // keys, dr) beside the two narrow backwards' zero-filled (N, Hq, keys, dn + dv), or later their sum made
  // contiguous for kv_b's backward with the latent rows' gradient and (full fine-tuning) kv_b's weight
  // gradient before it is added into .grad.
  int64_t latent_expansion_backward(int64_t keys) const {
    const int64_t W = kv_b_width();
    return N * keys * mla_dr * s +
           std::max(2 * N * keys * W * s, N * keys * (W + mla_r) * s + (full ? W * mla_r * s : 0));
  }

  // ---- CUDA: see Note [Flash attention buffers] and Note [Efficient attention buffers] ----
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
  // 128x64 (kBlockSizeI = 128) when its shared memory fits the GPU (assumed: H100; see docs/estimate.md).
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

}  // namespace bpbench
