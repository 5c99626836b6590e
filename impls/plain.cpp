// plain.cpp: plain backpropagation, the paper's "w/o ckpt" column.
//
// Full autograd over the whole model: every layer's activations, the (N, T, V) logits, their float32 upcast
// and log-softmax stay alive until backward. The reference every other strategy must match exactly.
#include <fmt/format.h>

#include <algorithm>

#include "harness/model/linear_memory_terms.h"
#include "harness/model/phase_builder.h"
#include "impls/interface/strategy.h"
#include "profiles/memory.h"

namespace bpbench {
namespace {

using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;

class Plain final : public Strategy {
 public:
  std::string name() const override { return "plain"; }
  std::string description() const override { return "full autograd, all activations kept (w/o ckpt)"; }

  torch::Tensor forward_backward(const StepInputs& in) const override {
    const Model& m = in.model;
    torch::Tensor loss;
    {
      PhaseScope phase("forward");
      MemoryScope scope(Category::activations);
      auto x = m.embed(in.batch.input_ids);  // (N, T, d)
      for (int64_t i = 0; i < m.config.layers; ++i) x = m.layer(i, x);
      PhaseScope head("head");
      MemoryScope logits_scope(Category::logits);
      loss = in.objective.loss(m.head_logits(x), in.batch);  // logits (N, T, V)
    }
    PhaseScope phase("backward");
    MemoryScope scope(Category::activations);
    loss.backward();
    return loss.detach();
  }

  bool estimated() const override { return true; }
  std::vector<PhaseEstimate> memory_phases(const MemoryTerms& D,
                                           const Partitioning& partition) const override;
};

// Of the `below` layers under a phase's layer, those that apply RoPE: exact for the top layer (every other
// layer is below it); for a lower one (the other attention type's topmost) the NoPE layers are taken to be
// the highest ones. On a hybrid every full-attention layer applies RoPE and no Gated DeltaNet layer does.
int64_t lower_rope_layers(const MemoryTerms& D, int64_t below) {
  if (D.hybrid()) return below - D.linear_layers_below(below);
  return std::min(below, D.rope_layers - (D.rope_top ? 1 : 0));
}

// A Gated DeltaNet layer's graph over all T rows: its block's (Note [A Gated DeltaNet block over all rows]),
// its input as its norm keeps it and its MLP half's (x1 as that norm keeps it).
int64_t linear_layer_graph(const MemoryTerms& D) {
  return linear_whole_graph(D, D.T) + D.N * D.T * (D.block_input_kept() + D.mlp_row());
}

// Its estimate: the whole graph of every layer is alive at the head, and below the layer whose backward runs.
std::vector<PhaseEstimate> Plain::memory_phases(const MemoryTerms& D, const Partitioning&) const {
  const int64_t rows = D.N * D.T;
  // The graphs of `layers` layers from the bottom: a routed model's dense first layers (DeepSeek's) keep the
  // dense MLP's; a hybrid's Gated DeltaNet layers keep linear_layer_graph.
  auto graphs = [&](int64_t layers) {
    const int64_t dense = std::min(layers, D.dense_layers), linear = D.linear_layers_below(layers);
    return rows *
               ((layers - dense - linear) * D.layer_row() + (dense > 0 ? dense * D.dense_layer_row() : 0)) +
           (linear > 0 ? linear * linear_layer_graph(D) : 0);
  };
  // Every layer's graph, each RoPE layer's tables (SmolLM3's NoPE layers keep none).
  const int64_t all_layers = graphs(D.L) + 2 * D.rope_layers * D.rope_table(D.T);
  // LoRA: the embedding output needs no grad and input_norm is frozen, so layer 0's attn_norm keeps nothing
  // (its output h is kept by the adapters' A, counted in attn_row). Without input norms (OLMo) the adapters'
  // A keep the embedding output itself, counted in block_input_kept.
  const int64_t frozen_first_norm = D.full || !D.input_norms ? 0 : rows * (D.kept(D.d) + D.rms(D.d, 1));
  std::vector<PhaseEstimate> out;
  {
    PhaseBuilder p("head");
    p.add(fmt::format("autograd graph of {} layers: L*(N*T*layer_row + 4*T*hd*s)", D.L),
          all_layers - frozen_first_norm, true);
    p.add("final norm input x_L (kept when s == f): N*T*d*s", rows * D.kept(D.d), true);
    add_whole_head(p, D);
    out.push_back(p.done());
  }
  {
    PhaseBuilder p("layer mlp backward");
    p.add("autograd graph of every layer (the top one below its MLP output norm)",
          all_layers - frozen_first_norm - rows * D.output_norm(), true);
    p.add("dy: N*T*d*s", rows * D.d * D.s);
    p.add(mlp_backward_name(D, "MLP backward: max(N*T*I*s + d*I*s, 2 x N*T*I*s)"),
          D.mlp_backward(D.T, false));
    out.push_back(p.done());
  }
  PhaseEstimate attention;
  for (const auto& layer : D.attention_layers) {
    PhaseBuilder p("layer attention backward");
    p.add(fmt::format("autograd graph of the {} lower layers", layer.index),
          graphs(layer.index) + 2 * lower_rope_layers(D, layer.index) * D.rope_table(D.T) -
              (layer.index > 0 ? frozen_first_norm : 0),
          true);
    p.add(
        "top layer: its input, attention half (below its output norm) and output, K path: N*T*(kept(d) + "
        "attn_row - output_norm + Aq*s + Hq*f + kv_row)",
        rows *
            (D.block_input_kept() + D.attn_row() - D.output_norm() + D.attn_saved_row() + D.kv_row_graph()));
    p.add("gradient in flight: N*T*d*s", rows * D.d * D.s);
    p.add("top layer rope tables", 2 * D.rope(D.T));
    add_attention_backward(p, D, D.T, D.T, layer.window, "T", "T");
    keep_larger(attention, p.done());
  }
  out.push_back(attention);
  if (D.hybrid()) {
    const int64_t i = D.linear_top;
    const int64_t lower =
        graphs(i) + 2 * lower_rope_layers(D, i) * D.rope_table(D.T) - (i > 0 ? frozen_first_norm : 0);
    {
      PhaseBuilder f("forward (linear layers)");
      f.add(fmt::format("autograd graph of the {} lower layers", i), lower, true);
      f.add("the top linear layer's input x: N*T*d*s", rows * D.d * D.s);
      f.add("its Gated DeltaNet block's graph, all rows: see linear_whole_graph",
            linear_whole_graph(D, D.T) - (i == 0 ? frozen_first_norm : 0));
      f.add("its forward's high point: see linear_whole_forward", linear_whole_forward(D, D.T));
      out.push_back(f.done());
    }
    PhaseBuilder p("layer linear backward");
    p.add(fmt::format("autograd graph of the {} lower layers", i),
          graphs(i) + 2 * lower_rope_layers(D, i) * D.rope_table(D.T) - (i > 0 ? frozen_first_norm : 0),
          true);
    p.add("top linear layer: its input as its norm keeps it: N*T*kept(d)", rows * D.block_input_kept());
    p.add("its Gated DeltaNet block's graph, all rows: see linear_whole_graph",
          linear_whole_graph(D, D.T) - (i == 0 ? frozen_first_norm : 0));
    p.add("gradient in flight: N*T*d*s", rows * D.d * D.s);
    p.add("its backward: x_in.grad and the larger of linear_chunk_backward and the input norm's backward",
          linear_whole_backward(D, D.T));
    out.push_back(p.done());
  }
  return out;
}

}  // namespace

std::unique_ptr<Strategy> make_plain_strategy() {
  return std::make_unique<Plain>();
}

}  // namespace bpbench
