// mst.cpp: Mini-Sequence Transformer (Luo et al. 2024, "MsT") on top of layerwise checkpointing.
//
//   forward (no grad): as checkpoint, keeping each layer input x_i (N, T, d) on the device or, with
//                      `offload: checkpoints`, in host memory (offload.h)
//   head:   forward all chunks of logits_partition rows keeping only hidden states (S, no logits), then in
//           backward recompute each chunk's logits and backpropagate it (two head passes, by design)
//   layer i backward: re-forward the layer: attention WHOLE (full Q, K, V, scores kept for the layer), then
//   the
//           MLP in mini-sequences of `partition` rows, each saving only its input x1[s:e] (forward all chunks
//           first, no intermediates kept); backward: per chunk recompute the MLP and backpropagate it, then
//           backpropagate the attention with the gathered dx1.
//
// Where the public MsT code differs, and this one does not:
//   - it accumulates the LM-head weight gradient twice (once in its chunked-loss backward, once through
//     autograd); here the head's gradient reaches W_lm exactly once;
//   - it splits T into T / chunks rows and drops the tail tokens when T is not a multiple; here the last
//   chunk
//     is simply shorter, so every row is trained.
// MsT decomposes the loss as a sum over chunks, which DPO's log-sigmoid is not: DPO is reported as skipped.
#include <fmt/format.h>

#include <algorithm>

#include "harness/model/phase_builder.h"
#include "harness/objectives/objective.h"
#include "impls/machinery/layerwise.h"
#include "impls/machinery/layerwise_estimate.h"
#include "impls/machinery/recurrent_estimate.h"
#include "profiles/memory.h"

namespace bpbench {
namespace {

using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;

class MiniSequence final : public Strategy {
 public:
  std::string name() const override { return "mst"; }
  std::string description() const override {
    return "MsT: checkpointing + MLP and LM head in mini-sequences, attention whole";
  }
  bool uses_partition() const override { return true; }
  bool uses_logits_partition() const override { return true; }
  bool uses_offload() const override { return true; }
  std::optional<std::string> unsupported(const CellTraits& cell) const override {
    const auto& names = objective_names();
    if (std::find(names.begin(), names.end(), cell.objective) == names.end()) return std::nullopt;
    if (const auto objective = make_objective(cell.objective); !objective->outer_is_linear())
      return fmt::format("mst decomposes the loss as a sum over chunks; {} is not one",
                         objective->outer_description());
    return std::nullopt;
  }

  bool estimated() const override { return true; }
  std::vector<PhaseEstimate> memory_phases(const MemoryTerms& D,
                                           const Partitioning& partition) const override;
  FlopSchedule flop_schedule() const override {
    FlopSchedule f;
    f.recomputes_layers = true;
    f.recomputes_head = true;
    f.recomputes_mlp = true;
    return f;
  }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    const Model& m = in.model;
    std::unique_ptr<CheckpointStore> owned;
    CheckpointStore& store = checkpoint_store(in, owned);
    auto x_last = checkpointed_forward(m, in.batch.input_ids, in.batch.seq_len(), store);  // x_L (N, T, d)
    auto sums = streamed_sequence_sums(m, x_last, in.batch, in.objective, in.partition.logits_rows);
    auto head = streamed_head_backward(m, x_last, in.batch, in.objective, in.partition.logits_rows, sums);
    x_last = torch::Tensor();
    auto dx = layers_backward(m, store, std::move(head.dx),
                              [&](int64_t i, const torch::Tensor& x_in, torch::Tensor dy) {
                                MemoryScope scope(Category::activations);
                                return layer_backward(m, i, x_in, std::move(dy), in.partition.rows);
                              });
    embedding_backward(m, in.batch.input_ids, dx);
    return head.loss;
  }

 private:
  static torch::Tensor layer_backward(const Model& m, int64_t i, const torch::Tensor& x_in, torch::Tensor dy,
                                      int64_t rows) {
    const int64_t T = x_in.size(1);
    // Re-forward: attention over all rows, with grad.
    torch::Tensor x1;  // (N, T, d)
    if (m.config.is_linear_layer(i)) {
      x1 = m.token_mixer(i, x_in);  // Gated DeltaNet over all rows
    } else {
      // q before K and V, the order the estimate counts (with LoRA the order sets the peak).
      auto h = m.attn_norm(i, x_in);
      auto q = m.project_q(i, h, 0, h.size(1));
      x1 = m.attention_block(i, x_in, q, m.project_kv(i, h), m.output_gate(i, h));
    }
    auto x1_saved = x1.detach();  // each mini-sequence saves only its slice of this
    {
      // MsT's forward of the mini-sequences: outputs computed, intermediates not kept.
      torch::NoGradGuard no_grad;
      for (int64_t s = 0; s < T; s += rows)
        (void)m.mlp_block(i, x1_saved.narrow(1, s, std::min(rows, T - s)));
    }
    auto dx1 = torch::empty_like(x1_saved);
    for (int64_t s = 0; s < T; s += rows) {
      const int64_t c = std::min(rows, T - s);
      auto x1_rows = x1_saved.narrow(1, s, c).requires_grad_(true);  // recompute the MLP for this chunk
      m.mlp_block(i, x1_rows).backward(dy.narrow(1, s, c));
      dx1.narrow(1, s, c).copy_(x1_rows.grad());
    }
    dy = torch::Tensor();
    x1.backward(dx1);
    return x_in.grad();
  }
};

// Its estimate: the checkpointed forward, the chunked head over every layer input, then per layer the
// token mixer (attention, or a hybrid's Gated DeltaNet block) re-forwarded whole and kept while the MLP runs
// one mini-sequence at a time, then its backward.
std::vector<PhaseEstimate> MiniSequence::memory_phases(const MemoryTerms& D,
                                                       const Partitioning& partition) const {
  const int64_t c = partition.rows, cl = partition.logits_rows;
  const int64_t rows = D.N * D.T;
  std::vector<PhaseEstimate> out;
  out.push_back(checkpointed_forward_phase(D, D.T));
  if (D.hybrid()) out.push_back(linear_forward_phase(D, D.T, FirstInput::kept));
  {
    PhaseBuilder p("head chunk");
    add_checkpoints(p, D, fmt::format("layer inputs x_0..x_{}", D.L), D.L + 1, /*offloaded_on_device=*/1);
    add_chunk_head(p, D, cl);
    out.push_back(p.done());
  }
  for (const auto& mixer : whole_mixers(D)) {
    // The token mixer re-forwarded whole and kept; the MLP recomputed and backpropagated one mini-sequence at
    // a time.
    PhaseBuilder p(mixer.linear ? "layer linear mlp backward" : "layer mlp backward");
    add_checkpoints(p, D, fmt::format("layer inputs x_0..x_{}", mixer.layer), mixer.layer + 1);
    p.add("x1, dy, dx1: 3 x N*T*d*s", 3 * rows * D.d * D.s);
    p.add(mixer.name, mixer.bytes);
    // Its input x1[s:e] is a view of x1 (counted above): the graph adds only what mlp_row has beyond it.
    p.add(
        "one mini-sequence's MLP graph (below its output norm) and output: N*c*(mlp_row - output_norm - "
        "kept(d) + d*s)",
        D.N * c *
            (D.mlp_row() - D.output_norm() - D.block_input_kept() + D.strided_rows_copy(true) + D.d * D.s));
    p.add(
        mlp_backward_name(
            D, "MLP backward: max(N*c*I*s + d*I*s [+ N*c*d*s: dy rows made contiguous, N > 1], 2 x N*c*I*s)"),
        D.mlp_backward(c, true));
    out.push_back(p.done());
  }
  out.push_back(whole_attention_backward(D, 2, "dx1, x_in.grad; dy is released first"));
  if (D.hybrid()) {
    out.push_back(whole_linear_forward(D, 1, "dy"));
    out.push_back(whole_linear_backward(D, 2, "x1 and dx1; dy is released first"));
  }
  return out;
}

}  // namespace

std::unique_ptr<Strategy> make_mst_strategy() {
  return std::make_unique<MiniSequence>();
}

}  // namespace bpbench
