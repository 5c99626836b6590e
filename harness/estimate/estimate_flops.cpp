// estimate_flops.cpp: estimate_flops.h. Each strategy's FLOPs as the ops it runs, in its own order:
//   model work (every strategy): one forward with grad of the L layers and the head, and its backward
//   what the strategy runs again, as its flop_schedule() says (impls/interface/strategy.h, FlopSchedule: a
//   no-grad forward of the layers, the head or the MLP once more, attention with grad in chunks of
//   `partition`).
// Legend (model_config.h): N sequences, T tokens, d hidden, I intermediate, V vocab, L layers, Hq and Hkv
// heads, hd head size, r LoRA rank, c partition rows; mixtures of experts: E experts, k a row, Ie.
#include "harness/estimate/estimate_flops.h"

#include <algorithm>

#include "harness/model/attention_kernels.h"
#include "harness/objectives/objective.h"
#include "impls/interface/strategy.h"
#include "impls/machinery/ring_attention.h"

namespace bpbench {

namespace {

struct LinearShape {
  int64_t in, out;
  bool input_grad;  // does the backward compute dX (flop_count.h: only where the input needs a gradient)
  int64_t row_factor = 1;  // rows it runs over per row of the layer: k for the experts (each row's k choices)
  bool adapted = true;     // LoRA adapts it (every projection but a mixture's router)
};

// Layer i's MLP: gate, up, down; in a mixture-of-experts layer the router and the k experts each row is
// routed to (dropless: every row's k choices run, whichever experts they are), and DeepSeek's shared expert
// on every row.
std::vector<LinearShape> mlp_linears(const ModelConfig& c, int64_t i) {
  const int64_t d = c.hidden;
  if (!c.is_moe_layer(i))
    return {{d, c.intermediate, true}, {d, c.intermediate, true}, {c.intermediate, d, true}};
  const int64_t k = c.experts_per_token, Ie = c.expert_intermediate, Ish = c.shared_expert_intermediate;
  std::vector<LinearShape> linears = {
      {d, c.experts, true, 1, /*adapted=*/false}, {d, Ie, true, k}, {d, Ie, true, k}, {Ie, d, true, k}};
  if (Ish > 0) linears.insert(linears.end(), {{d, Ish, true}, {d, Ish, true}, {Ish, d, true}});  // shared
  return linears;
}

// The attention's projections, q's then k's and v's then o: q, k, v, o; or multi-head latent attention's
// q_a and q_b (or q), kv_a and kv_b, o (model.h). `first_lora_layer`: LoRA's layer 0, whose projections of
// the layer input need no input gradient.
struct AttentionLinears {
  std::vector<LinearShape> q, kv, o;
};
AttentionLinears attention_linears(const ModelConfig& c, bool first_lora_layer) {
  const int64_t d = c.hidden, aq = c.heads * c.head_dim, akv = c.kv_heads * c.head_dim;
  const bool input_dx = !first_lora_layer;
  if (!c.mla) return {{{d, aq, input_dx}}, {{d, akv, input_dx}, {d, akv, input_dx}}, {{aq, d, true}}};
  const ModelConfig::Mla& m = *c.mla;
  const int64_t rq = m.q_lora_rank, r = m.kv_lora_rank;
  AttentionLinears a;
  a.q = rq > 0 ? std::vector<LinearShape>{{d, rq, input_dx}, {rq, aq, true}}
               : std::vector<LinearShape>{{d, aq, input_dx}};
  a.kv = {{d, r + m.qk_rope_head_dim, input_dx}, {r, c.heads * (c.qk_nope_head_dim() + m.v_head_dim), true}};
  a.o = {{c.heads * m.v_head_dim, d, true}};
  return a;
}

// Layer i's projections.
std::vector<LinearShape> layer_linears(const ModelConfig& c, int64_t i, bool first_lora_layer) {
  const AttentionLinears a = attention_linears(c, first_lora_layer);
  std::vector<LinearShape> linears = a.q;
  linears.insert(linears.end(), a.kv.begin(), a.kv.end());
  linears.insert(linears.end(), a.o.begin(), a.o.end());
  const auto mlp = mlp_linears(c, i);
  linears.insert(linears.end(), mlp.begin(), mlp.end());
  return linears;
}

// The k and v projections: what StreamBP's K/V values run again.
std::vector<LinearShape> kv_linears(const ModelConfig& c) {
  return attention_linears(c, false).kv;
}

// The q projection: what streambp-ulysses runs again besides k and v.
std::vector<LinearShape> q_linears(const ModelConfig& c) {
  return attention_linears(c, false).q;
}

// Forward FLOPs of `linears` over `rows` rows, LoRA adapters (rank r) included.
int64_t forward_matmul(const std::vector<LinearShape>& linears, int64_t rows, int64_t r) {
  int64_t f = 0;
  for (const auto& l : linears)
    f += 2 * rows * l.row_factor * (l.in * l.out + (l.adapted ? r : 0) * (l.in + l.out));
  return f;
}

// Their backward: full fine-tuning dX + dW; LoRA: the base dX, dA (+ its dX), dB and dU (a frozen linear
// without adapters: dX alone).
int64_t backward_matmul(const std::vector<LinearShape>& linears, int64_t rows, int64_t r) {
  int64_t b = 0;
  for (const auto& l : linears) {
    const int64_t dx = l.input_grad ? 1 : 0, m = rows * l.row_factor;
    if (r == 0)
      b += 2 * m * l.in * l.out * (dx + 1);
    else if (!l.adapted)
      b += 2 * m * l.in * l.out * dx;
    else
      b += 2 * m * (l.in * l.out * dx + l.in * r * (1 + dx) + r * l.out * 2);
  }
  return b;
}

}  // namespace

FlopCounts estimate_flops(const EstimateInput& in) {
  check_estimate_input(in);
  const ModelConfig& c = in.config;
  if (!flops_estimated_for(c))
    throw std::invalid_argument(fmt::format(
        "estimate: the FLOPs of {}'s Gated DeltaNet layers (projections, conv, the delta rule by chunks) are "
        "not estimated yet (valid: a model without them; a cell measures them: flop_count.h)",
        c.name));
  const auto strategy = make_strategy(in.impl);
  const FlopSchedule schedule = strategy->flop_schedule();
  // A sequence-parallel rank (impls/machinery/sequence_parallel.h) runs the projections, MLP and head on its
  // Ts rows and the attention of its Hq / P heads over the padded T' = P Ts rows: one rank's FLOPs. On the
  // ring its rows are 2h = 2 ceil(T / 2P), with every head (ring_attention.h); on the 2-D mesh the same
  // rows, and the ring over P / U ranks of blocks of b = U h rows with Hq / U heads (ring_layer.h).
  const int64_t P = strategy->sequence_parallel() ? in.ranks : 1, U = in.ulysses_degree;
  const int64_t N = in.sequences, L = c.layers, r = in.lora_rank;
  const int64_t half = (in.seq_len + 2 * P - 1) / (2 * P);
  const dist::ZigzagLayout ring = dist::zigzag_layout(2 * P * half, P / U, 0);  // its blocks: U h rows
  const int64_t Ts = schedule.ring_attention ? 2 * half : (in.seq_len + P - 1) / P;
  const int64_t T = P * Ts;  // the attention's length
  const bool full = r == 0;
  const int64_t rows = N * Ts;
  const int64_t per_pair = N * (schedule.ring_attention ? c.heads / U : c.heads / P) * c.head_dim;
  const torch::Device device(in.device == "cuda" ? torch::kCUDA : torch::kCPU);
  FlopCounts f;

  // The FLOPs of `pairs` (query, key) pairs per (sequence, query head): forward, and with grad backward.
  auto tally = [&](const AttentionPairs& pairs, bool with_grad) {
    const int64_t visible = pairs.visible, executed = pairs.executed, all = pairs.all;
    const int64_t masked = executed - visible;
    f.attention_dense += 4 * per_pair * all;
    f.attention_masked += 4 * per_pair * masked;
    (with_grad ? f.forward_attention : f.recompute_attention) += 4 * per_pair * visible;
    if (!with_grad) return;
    f.backward_attention += 8 * per_pair * visible;
    f.attention_dense += 8 * per_pair * all;
    f.attention_masked += 8 * per_pair * masked;
    if (pairs.rescored) f.attention_rescore += 2 * per_pair * executed;
  };

  // Layer i's attention: one call per query block of `block` rows over the keys up to its end, from the
  // block's window start under a sliding window (ModelConfig::first_visible_key); the ring's, one tally of
  // the rank's pairs.
  auto attention_calls = [&](int64_t i, int64_t block, bool with_grad) {
    if (schedule.ring_attention)  // streambp-ring: the pairs in tiles of `partition` (block: the partition)
      return tally(dist::ring_attention_pairs(ring, device, in.dtype, c.head_dim,
                                              schedule.attention_by_partition ? block : 0, c.window_of(i)),
                   with_grad);
    const int64_t window = c.window_of(i);
    const AttentionKernel kernel =
        attention_kernel_for(device, in.dtype, c.head_dim, window, c.attention_sinks);
    for (int64_t s = 0; s < T; s += block) {
      const int64_t q = std::min(block, T - s), e = s + q - c.first_visible_key(i, s);  // keys the call gets
      tally(attention_pairs(kernel, q, e, window), with_grad);
    }
  };
  const std::vector<LinearShape> head = {{c.hidden, c.vocab, true}};
  const int64_t head_forward = forward_matmul(head, rows, 0);

  // The model's work, the same for every strategy.
  for (int64_t i = 0; i < L; ++i) {
    const auto linears = layer_linears(c, i, !full && i == 0);
    f.forward_matmul += forward_matmul(linears, rows, r);
    f.backward_matmul += backward_matmul(linears, rows, r);
  }
  f.forward_matmul += head_forward;
  f.backward_matmul += head_forward * (full ? 2 : 1);  // dX, and dW where the head is trained

  // What the strategy runs again (impls/, its flop_schedule()): attention with grad whole or in chunks of
  // `partition` queries, a no-grad forward of the layers (K/V for all rows, queries in the same blocks), and
  // the head, the MLP or the K/V projections once more.
  const int64_t partition = in.partition <= 0 || in.partition > T ? T : in.partition;
  const int64_t grad_block = schedule.attention_by_partition ? partition : T;
  for (int64_t i = 0; i < L; ++i) attention_calls(i, grad_block, true);
  // Multi-head latent attention through the latent (Model::layer_in_chunks, latent_attention.h): kv_b
  // expands the keys each query block sees, one key block at a time, N x (the sum of the blocks' e) rows
  // where the expanded form makes N T once. In StreamBP's backward each key row's expansion with a graph is
  // the model's work in its own chunk (the causal block) and recomputation, forward and backward, in every
  // later chunk.
  const std::vector<LinearShape> kv = kv_linears(c);  // k, v; MLA: kv_a, kv_b (the two below: MLA only)
  const std::vector<LinearShape> kv_a(kv.begin(), kv.begin() + 1), kv_b(kv.end() - 1, kv.end());
  auto expanded_key_rows = [&](int64_t block) {
    int64_t keys = 0;
    for (int64_t s = 0; s < T; s += block) keys += s + std::min(block, T - s);
    return N * keys;
  };
  const int64_t expanded = c.mla ? expanded_key_rows(grad_block) : rows;
  if (schedule.recomputes_layers)
    for (int64_t i = 0; i < L; ++i) {
      f.recompute_matmul +=
          forward_matmul(layer_linears(c, i, false), rows, r) + forward_matmul(kv_b, expanded - rows, r);
      attention_calls(i, grad_block, false);
    }
  if (schedule.recomputes_head) f.recompute_matmul += head_forward;
  if (schedule.recomputes_mlp)
    for (int64_t i = 0; i < L; ++i) f.recompute_matmul += forward_matmul(mlp_linears(c, i), rows, r);
  if (schedule.recomputes_kv && c.mla)  // the latent rows, each chunk's key blocks, the later chunks' again
    f.recompute_matmul +=
        L * (forward_matmul(kv_a, rows, r) + forward_matmul(kv_b, expanded, r) +
             forward_matmul(kv_b, expanded - rows, r) + backward_matmul(kv_b, expanded - rows, r));
  else if (schedule.recomputes_kv)
    f.recompute_matmul += L * forward_matmul(kv, rows, r);
  if (schedule.recomputes_q) f.recompute_matmul += L * forward_matmul(q_linears(c), rows, r);
  if (schedule.recomputes_attention)
    for (int64_t i = 0; i < L; ++i) attention_calls(i, grad_block, false);
  // A non-linear f: the streaming head's first pass computes S without grad (objective.h).
  if (schedule.streams_head && !make_objective(in.objective)->outer_is_linear())
    f.recompute_matmul += head_forward;
  return f;
}

}  // namespace bpbench
