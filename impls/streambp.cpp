// streambp.cpp: StreamBP (Luo et al.), exact backpropagation streamed along the sequence. Legend:
// docs/architecture.md (N sequences, T tokens, d hidden, c = partition rows, L layers).
//
// Forward as checkpointing: each layer input x_i (N, T, d) kept without a graph, on the device or, with
// `offload: checkpoints`, in host memory (offload.h), prefetched one layer ahead of the backward. All but x_0
// = embed(ids), a gather made again for layer 0's backward (layerwise.h: FirstInputRecomputed), so the step
// holds x_1..x_{L-1}. Head: logits, loss terms and their gradients for one chunk of logits_partition rows at
// a time (layerwise.h: streamed_head_backward); each chunk's dx rows overwrite its rows of x_L, which nothing
// reads again. Layers, from the top: each one's backward streamed chunk by chunk, K and V of all rows kept as
// values (Note [StreamBP's layer backward], layerwise.h: streambp_layer_backward).
//
// Peak per layer: K, V, dK, dV and dY, all O(T·Akv) or O(T·d) without a graph, and one chunk's activations:
// never a T x I, T x V or T x T tensor. The price: the K/V path runs three times a layer where whole-layer
// recomputation runs it twice, 2·N·T·d·(2·Akv) FLOPs more a layer, and chunk j's scores span its e_j keys, so
// attention costs about (1 + D) / (2 D) of the full T x T product (D = ceil(T / c) chunks).
#include <fmt/format.h>

#include "harness/model/phase_builder.h"
#include "impls/machinery/layerwise.h"
#include "impls/machinery/layerwise_estimate.h"
#include "impls/machinery/recurrent_estimate.h"
#include "profiles/memory.h"

namespace bpbench {
namespace {

using profiles::PhaseScope;

class StreamBP final : public Strategy {
 public:
  std::string name() const override { return "streambp"; }
  std::string description() const override {
    return "StreamBP: layers streamed in `partition` rows, LM head in `logits_partition` rows";
  }
  bool uses_partition() const override { return true; }
  bool uses_logits_partition() const override { return true; }
  bool uses_offload() const override { return true; }
  bool keeps_first_input() const override { return false; }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    const Model& m = in.model;
    std::unique_ptr<CheckpointStore> owned;
    FirstInputRecomputed store(checkpoint_store(in, owned), m, in.batch.input_ids);       // x_1..x_{L-1} kept
    auto x_last = checkpointed_forward(m, in.batch.input_ids, in.partition.rows, store);  // x_L (N, T, d)
    auto head = streamed_head_backward(m, x_last, in.batch, in.objective, in.partition.logits_rows, {},
                                       HeadDx::into_x);  // x_L becomes dL/dx_L
    x_last = torch::Tensor();
    auto dx = layers_backward(m, store, std::move(head.dx),
                              [&](int64_t i, const torch::Tensor& x_in, torch::Tensor dy) {
                                return streambp_layer_backward(m, i, x_in, std::move(dy), in.partition.rows);
                              });
    embedding_backward(m, in.batch.input_ids, dx);
    return head.loss;
  }

  bool estimated() const override { return true; }
  std::vector<PhaseEstimate> memory_phases(const MemoryTerms& D,
                                           const Partitioning& partition) const override;
  FlopSchedule flop_schedule() const override { return streambp_flop_schedule(); }
};

std::vector<PhaseEstimate> StreamBP::memory_phases(const MemoryTerms& D,
                                                   const Partitioning& partition) const {
  return streambp_phases(D, partition, FirstInput::recomputed);
}

}  // namespace

FlopSchedule streambp_flop_schedule() {
  FlopSchedule f;
  f.attention_by_partition = true;
  f.recomputes_layers = true;
  f.streams_head = true;
  f.recomputes_kv = true;
  return f;
}

// StreamBP's phases (layerwise_estimate.h), with x_0 made again (streambp) or kept (streambp-dist): the
// checkpointed forward in chunks of `partition` queries, the chunked head over the layer inputs (x_L's rows
// becoming dx's), then per layer (a. to c. above) K, V, dK, dV and dY for all rows beside one chunk's graph,
// its attention backward into dK, dV, or its rows' K/V path backward, at the chunks that see the most keys.
std::vector<PhaseEstimate> streambp_phases(const MemoryTerms& D, const Partitioning& partition,
                                           FirstInput first) {
  const int64_t c = partition.rows, cl = partition.logits_rows;
  const int64_t rows = D.N * D.T;
  std::vector<PhaseEstimate> out;
  out.push_back(checkpointed_forward_phase(D, c, first));
  {
    PhaseBuilder p("head chunk");
    const bool kept = first == FirstInput::kept;
    add_checkpoints(p, D,
                    fmt::format("layer inputs x_{}..x_{}{}, x_{}'s rows becoming dx's", kept ? 0 : 1, D.L,
                                kept ? "" : " (x_0 not kept)", D.L),
                    kept ? D.L + 1 : D.L, /*offloaded_on_device=*/1);
    add_chunk_head(p, D, cl, /*dx_in_x=*/true);
    out.push_back(p.done());
  }
  // Alive through the top layer's chunks: the layer inputs below, dy (whose rows become dx's), K and V of all
  // T rows (values, no graph), dK and dV. On CUDA's efficient kernel a chunk's graph adds the repeated
  // K[:e], V[:e] on top.
  auto layer_base = [&](PhaseBuilder& p, const AttentionLayer& layer) {
    add_checkpoints(p, D, layer_inputs_label(layer.index, first), layer_inputs_alive(layer.index, first));
    p.add("dy, its rows becoming dx's: N*T*d*s", rows * D.d * D.s);
    if (D.mla) {  // latent_attention.h: the latent rows, not K and V
      p.add("the normed latent and the RoPE key, all rows: N*T*(r + dr)*s", rows * D.latent_width() * D.s);
      p.add("their gradient accumulators: N*T*(r + dr)*acc", rows * D.latent_width() * D.acc());
      return;
    }
    p.add("K and V, all rows: 2 x N*T*Akv*s", 2 * rows * D.Akv * D.s);
    p.add("dK, dV accumulators: 2 x N*T*Akv*acc", 2 * rows * D.Akv * D.acc());
  };
  const AttentionLayer& top = D.attention_layers.front();
  PhaseEstimate mlp, attn, kv_backward;
  for (auto [r, e] : critical_chunks(D.T, c)) {
    {
      PhaseBuilder p("layer mlp backward");
      layer_base(p, top);
      p.add(
          "chunk graph below the MLP output norm: N*c*(attn_row + attn_out_row + mlp_row - output_norm)",
          D.N * r *
              (D.attn_row() + D.strided_rows_copy(true) + D.attn_out_row() + D.mlp_row() - D.output_norm()));
      p.add("chunk gradient in flight: N*c*d*s", D.N * r * D.d * D.s);
      p.add("chunk graph: the efficient kernel's K[:e], V[:e] repeated to Hq heads: 2 x N*e*Aq*s",
            D.kv_repeat(MemoryTerms::visible_keys(r, e, top.window)));
      p.add("q rope tables", D.rope(r));
      p.add(
          mlp_backward_name(
              D,
              "MLP backward: max(N*c*I*s + d*I*s [+ N*c*d*s: dy rows made contiguous, N > 1], 2 x N*c*I*s)"),
          D.mlp_backward(r, true));
      keep_larger(mlp, p.done());
    }
    for (const auto& layer : D.attention_layers) {
      // A sliding layer's chunk sees K/V from its window start on: e' = min(e, c + window - 1) keys.
      const int64_t keys = MemoryTerms::visible_keys(r, e, layer.window);
      PhaseBuilder p("layer attention backward");
      layer_base(p, layer);
      p.add(
          "chunk attention half (below its output norm), output, logsumexp: N*c*(attn_row - output_norm + "
          "Aq*s + Hq*f)",
          D.N * r * (D.attn_row() + D.strided_rows_copy(true) - D.output_norm() + D.attn_saved_row()));
      p.add("chunk gradients in flight: 2 x N*c*d*s", 2 * D.N * r * D.d * D.s);
      p.add("q rope tables", D.rope(r));
      if (D.mla) {
        p.add(
            "attention backward by key blocks of c, K and V expanded from the latent: dO, dQ so far, a "
            "block's K, V and their dQ, dK, dV, the kernel's scratch or the expansion's backward: see "
            "latent_attn_backward",
            D.latent_attn_backward(r, keys));
        keep_larger(attn, p.done());
        continue;
      }
      p.add("chunk graph: the efficient kernel's K[:e], V[:e] repeated to Hq heads: 2 x N*e*Aq*s",
            D.kv_repeat(keys));
      add_attention_backward(p, D, r, keys, layer.window, "c", "e", /*into_sink=*/true);
      keep_larger(attn, p.done());
    }
    {
      // c. with the chunk's dx rows so far: the K/V path of its rows recomputed with its graph, and its
      // backward (bfloat16: the dK, dV rows rounded to the model dtype first).
      PhaseBuilder p("layer K/V backward");
      layer_base(p, top);
      p.add("chunk dx rows: N*c*d*s", D.N * r * D.d * D.s);
      if (D.mla) {
        // kv_a's output (kept by the latent norm unless upcast), the norm, the latent and the RoPE key.
        const int64_t W = D.latent_width();
        p.add("latent path graph, the chunk's rows: N*c*(rms(d) + d*s + [(r + dr)*s] + rms(r) + (r + dr)*s)",
              D.N * r * (D.input_norm_row() + D.kept(W) + D.rms(D.mla_r, 1) + W * D.s));
        p.add("k rope tables, the chunk's rows", D.rope(r));
        if (D.acc() != D.s)
          p.add("latent gradient rows in the model dtype: N*c*(r + dr)*s", D.N * r * W * D.s);
        p.add("its backward: kv_a's output gradient, dh from kv_a and q: N*c*((r + dr) + 2*d)*s",
              D.N * r * (W + 2 * D.d) * D.s);
        keep_larger(kv_backward, p.done());
        continue;
      }
      p.add("K/V path graph, the chunk's rows: N*c*(rms(d) + d*s + kv_row)",
            D.N * r * (D.input_norm_row() + D.strided_rows_copy(true) + D.kv_row()));
      p.add("k rope tables, the chunk's rows", D.rope(r));
      if (D.acc() != D.s) p.add("dK, dV rows in the model dtype: 2 x N*c*Akv*s", 2 * D.N * r * D.Akv * D.s);
      p.add("its backward: dK, dV through k_norm and RoPE, dh from both projections: N*c*(2*Akv + 2*d)*s",
            D.N * r * (2 * D.Akv + 2 * D.d) * D.s);
      keep_larger(kv_backward, p.done());
    }
  }
  out.push_back(mlp);
  out.push_back(attn);
  out.push_back(kv_backward);
  if (D.hybrid())  // Gated DeltaNet layers: Note [StreamBP through the recurrence]
    for (auto& phase : streambp_linear_phases(D, partition, first)) out.push_back(std::move(phase));
  return out;
}

std::unique_ptr<Strategy> make_streambp_strategy() {
  return std::make_unique<StreamBP>();
}

}  // namespace bpbench
