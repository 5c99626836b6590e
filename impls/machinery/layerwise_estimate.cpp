// layerwise_estimate.cpp: layerwise_estimate.h.
#include "impls/machinery/layerwise_estimate.h"

#include "harness/model/linear_memory_terms.h"
#include "harness/model/phase_builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace bpbench {

namespace {

// Of `count` layer checkpoints alive at a phase, those on the device. Offloaded (impls/machinery/offload.h),
// two are in the forward (the input being read and the output being built) and in a layer's backward (its own
// input and the next one down, prefetched); one at the head (x_L: layer L-1's comes back after the head).
int64_t on_device(const MemoryTerms& D, int64_t count, int64_t offloaded_on_device) {
  return D.offload ? std::min<int64_t>(count, offloaded_on_device) : count;
}

// No-grad checkpointed forward at the top layer: the stored inputs, the output being built, K and V for all
// rows, and one query chunk's attention (`rows` queries over all keys for the last chunk).
PhaseEstimate checkpointed_forward_layer(const MemoryTerms& D, int64_t rows, const AttentionLayer& layer,
                                         FirstInput first) {
  PhaseBuilder p("forward");
  // Layer 0 reads x_0 even where it is not kept.
  const FirstInput stored = layer.index == 0 ? FirstInput::kept : first;
  add_checkpoints(p, D, layer_inputs_label(layer.index, stored) + " and the output being built",
                  layer_inputs_alive(layer.index, stored) + 1);
  // MLA: the latent rows of all T, K and V expanded a key block of `rows` at a time (Model::layer_in_chunks).
  if (D.mla)
    p.add("the normed latent and the RoPE key, all rows: N*T*(r + dr)*s", D.N * D.T * D.latent_width() * D.s);
  else
    p.add("K and V, all rows: 2 x N*T*Akv*s", 2 * D.N * D.T * D.Akv * D.s);
  const int64_t keys = MemoryTerms::visible_keys(rows, D.T, layer.window);
  // A chunk's high point is in its attention (with the kernel's scratch) or in its MLP, whose four (N, c, I)
  // tensors are temporaries of one expression and live together (model.cpp, mlp_block): with whole-sequence
  // chunks (checkpoint, mst) and a large I the MLP is higher.
  // Without input norms (OLMo) the rows are read as they are (copied when strided) and x1 is the MLP's input.
  // MLA's latent attention runs after its normed rows are released (only q is read by the key blocks).
  const int64_t normed = D.N * rows * ((D.mla ? 0 : D.normed_input(rows)) + D.Aq * D.s + D.gate_logits());
  const int64_t attention =
      normed + (D.mla ? D.latent_attn_forward(rows, keys) : D.attn_forward(rows, keys, layer.window));
  const int64_t mlp = D.N * rows * ((D.Aq + D.d) * D.s + D.gate_logits()) +
                      D.N * rows * (D.input_norms ? D.d * D.s : 0) + D.mlp_forward(D.N * rows);
  if (attention >= mlp) {
    p.add(D.mla ? "one chunk's q: N*c*Aq*s" : "one chunk's normed rows and q: N*c*(d + Aq)*s", normed);
    if (D.mla) {
      p.add(
          "one chunk's attention by key blocks expanded from the latent: its output so far, a block's "
          "expansion, attention or merge: see latent_attn_forward",
          D.latent_attn_forward(rows, keys));
    } else if (!D.cuda()) {
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
    p.add(D.moe() ? "one chunk's MLP: q, x1, its norm, and the routed experts' temporaries: N*c*(Aq + 2*d)*s "
                    "+ experts_forward(N*c)"
                  : "one chunk's MLP: q, x1, its norm, gate, silu(gate), up, product: N*c*(Aq + 2*d + 4*I "
                    "[+ 2*r])*s",
          mlp);
  }
  return p.done();
}

// The attention backward of the top layer (the largest: every lower checkpoint is still alive). Kept: the
// attention half of the layer for all T rows (o_proj's input already consumed), K and V's gradient (V itself
// released), the kernel's saved output and logsumexp, the rope tables, `flows` (N, T, d) gradients in flight,
// and the kernel's backward (dQ, dK, dV, scratch).
PhaseEstimate whole_attention_backward(const MemoryTerms& D, const AttentionLayer& layer, int64_t flows,
                                       const std::string& flow_note) {
  const int64_t rows = D.N * D.T, checkpoints = layer.index + 1;
  PhaseBuilder p("layer attention backward");
  add_checkpoints(p, D, fmt::format("layer inputs x_0..x_{}", checkpoints - 1), checkpoints);
  p.add(fmt::format("gradients in flight ({}): {} x N*T*d*s", flow_note, flows), flows * rows * D.d * D.s);
  p.add("attention half saved below its output norm: N*T*(attn_row - output_norm)",
        rows * (D.attn_row() - D.output_norm()));
  p.add(fmt::format("{}: N*T*kv_row", kv_graph_name(D)), rows * D.kv_row_graph());
  p.add("rope cos/sin of q and k: 4*T*hd*s", 2 * D.rope(D.T));
  p.add("attention output + logsumexp: N*T*(Aq*s + Hq*f)", rows * D.attn_saved_row());
  add_attention_backward(p, D, D.T, D.T, layer.window, "T", "T");
  return p.done();
}

}  // namespace

int64_t layer_inputs_alive(int64_t index, FirstInput first) {
  return first == FirstInput::kept ? index + 1 : std::max<int64_t>(index, 1);
}

std::string layer_inputs_label(int64_t index, FirstInput first) {
  if (first == FirstInput::kept || index == 0) return fmt::format("layer inputs x_0..x_{}", index);
  return fmt::format("layer inputs x_1..x_{} (x_0 not kept)", index);
}

int64_t checkpoints_bytes(const MemoryTerms& D, int64_t count) {
  return count * D.N * D.T * D.d * D.s;
}

// "layer inputs ...: K x N*T*d*s" for the checkpoints of a phase, with the offloaded ones named as such.
void add_checkpoints(PhaseBuilder& p, const MemoryTerms& D, const std::string& which, int64_t count,
                     int64_t offloaded_on_device) {
  const int64_t kept = on_device(D, count, offloaded_on_device);
  p.add(kept == count ? fmt::format("{}: {} x N*T*d*s", which, count)
                      : fmt::format("{}, {} of them on the device (the rest in host memory): {} x N*T*d*s",
                                    which, kept, kept),
        checkpoints_bytes(D, kept), true);
}

// The no-grad forward's high point: at the topmost layer of each attention type.
PhaseEstimate checkpointed_forward_phase(const MemoryTerms& D, int64_t rows, FirstInput first) {
  PhaseEstimate best;
  for (const auto& layer : D.attention_layers)
    keep_larger(best, checkpointed_forward_layer(D, rows, layer, first));
  return best;
}

// The whole-sequence attention backward's high point over the attention types.
PhaseEstimate whole_attention_backward(const MemoryTerms& D, int64_t flows, const std::string& flow_note) {
  PhaseEstimate best;
  for (const auto& layer : D.attention_layers)
    keep_larger(best, whole_attention_backward(D, layer, flows, flow_note));
  return best;
}

std::vector<WholeMixer> whole_mixers(const MemoryTerms& D) {
  const int64_t rows = D.N * D.T;
  std::vector<WholeMixer> out;
  out.push_back({D.attention_layers.front().index, false,
                 "attention half, all rows: N*T*(attn_row + attn_out_row + kv_row) + rope tables",
                 rows * (D.attn_row() + D.attn_out_row() + D.kv_row_graph()) + 2 * D.rope(D.T)});
  if (D.hybrid())
    out.push_back({D.linear_top, true, "the Gated DeltaNet block's graph, all rows: see linear_whole_graph",
                   linear_whole_graph(D, D.T)});
  return out;
}

// The MLP backward of a whole-layer re-forward (checkpoint): the whole layer's graph, the incoming gradient
// and layer output, the gradient of the MLP product and the down projection's weight gradient.
PhaseEstimate whole_mlp_backward(const MemoryTerms& D, const WholeMixer& mixer) {
  const int64_t rows = D.N * D.T;
  PhaseBuilder p(mixer.linear ? "layer linear mlp backward" : "layer mlp backward");
  add_checkpoints(p, D, fmt::format("layer inputs x_0..x_{}", mixer.layer), mixer.layer + 1);
  p.add("dy and the layer output: 2 x N*T*d*s", 2 * rows * D.d * D.s);
  p.add(mixer.name, mixer.bytes);
  p.add("the MLP half's graph below its output norm: N*T*(mlp_row - output_norm)",
        rows * (D.mlp_row() - D.output_norm()));
  p.add(mlp_backward_name(D, "MLP backward: max(N*T*I*s + d*I*s, 2 x N*T*I*s)"), D.mlp_backward(D.T, false));
  return p.done();
}

}  // namespace bpbench

namespace bpbench {

std::vector<PhaseEstimate> data_parallel_phases(const MemoryTerms& D, std::vector<PhaseEstimate> phases,
                                                FirstInput first) {
  const int64_t layer_bucket = D.layer_group ? D.bucket(D.layer_group) : 0;
  const int64_t layer_shard = D.layer_group ? D.shard(D.layer_group) : 0;
  const int64_t head_shard = D.head_group ? D.shard(D.head_group) : 0;
  const int64_t embedding_bucket = D.embedding_group ? D.bucket(D.embedding_group) : 0;
  const int64_t layer_input = D.N * D.T * D.d * D.s;  // one (N, T, d) checkpoint
  auto starts = [](const std::string& name, const char* prefix) { return name.rfind(prefix, 0) == 0; };
  const int64_t embedding_shard = D.embedding_group ? D.shard(D.embedding_group) : 0;
  const int64_t every_shard = embedding_shard + head_shard + D.layer_shards();
  for (auto& p : phases) {
    const bool head = starts(p.name, "head"), layer = starts(p.name, "layer");
    // The forward: no gradient exists yet (the previous step's shards were freed as it began), but in a later
    // micro-batch every shard of the step so far, which each group's reduction adds into.
    if (!head && !layer && !D.accumulating) continue;
    // The buckets open in the phase. open_head: the head's; tied, the embedding's (the LM head's) too.
    if (head && D.head_group) p.terms.push_back({"the head group's gradient bucket", D.bucket(D.head_group)});
    if (layer && layer_bucket) p.terms.push_back({"this layer's gradient bucket", layer_bucket});
    if (layer && head_shard && !D.accumulating) p.terms.push_back({"the head's gradient shard", head_shard});
    if ((head || layer) && D.tied && embedding_bucket)
      p.terms.push_back({head ? "the embedding's gradient bucket (tied: the LM head's, open until the "
                                "embedding backward)"
                              : "the embedding's gradient bucket (tied, open since the head)",
                         embedding_bucket});
    if (D.accumulating) {
      p.terms.push_back({"every gradient shard of the step's earlier micro-batches", every_shard});
    } else if (layer) {
      if (D.shards_above)  // a routed model's dense first layers (MemoryTerms::dense_kind)
        p.terms.push_back({"the routed layers' gradient shards, reduced before these", D.shards_above});
      // The phase is the top layer's; at layer i the L - 1 - i layers above have left their shards and the
      // device holds the inputs of layer i (offloaded: add_checkpoints' two in a layer's backward, one at
      // layer 0 or where x_0 is made again, whose prefetch has nothing below it). The highest layer wins;
      // when x_0 is kept on the device the change is linear in i, so one of the two ends.
      const int64_t top_inputs = on_device(D, layer_inputs_alive(D.L - 1, first), 2);
      int64_t best = 0, best_layer = D.L - 1, best_freed = 0;
      // A routed model's layers down to its dense first ones, which have phases of their own.
      for (int64_t i = D.L - 2; i >= D.dense_layers; --i) {
        const int64_t freed = top_inputs - on_device(D, layer_inputs_alive(i, first), 2);
        const int64_t down = (D.L - 1 - i) * layer_shard - freed * layer_input;
        if (down > best) best = down, best_layer = i, best_freed = freed;
      }
      if (best > 0) {
        p.terms.push_back(
            {best_layer == 0 && best_freed == D.L - 1
                 ? fmt::format("at layer 0 rather than {}: (L-1) x (a layer's gradient shard - N*T*d*s)",
                               D.L - 1)
                 : fmt::format("at layer {} rather than {}: {} x a layer's gradient shard - {} x N*T*d*s",
                               best_layer, D.L - 1, D.L - 1 - best_layer, best_freed),
             best});
        p.name += fmt::format(" (layer {})", best_layer);
      }
    }
    p.bytes = 0;
    for (const auto& t : p.terms) p.bytes += t.bytes;
  }
  if (embedding_bucket) {
    // embedding_backward: the embedding's output made again and its dense (V, d) gradient, added into the
    // bucket; the input gradient dy; the head's and every layer's shards.
    PhaseBuilder p("embedding backward");
    p.add("dy: N*T*d*s", layer_input);
    p.add("the embedding's output, made again: N*T*d*s", layer_input);
    p.add("the embedding's dense gradient: V*d*s", D.V * D.d * D.s);
    p.add("the embedding's gradient bucket", embedding_bucket);
    p.add("the head's and every layer's gradient shards", head_shard + D.layer_shards());
    if (D.accumulating) p.add("the embedding's gradient shard (the earlier micro-batches')", embedding_shard);
    phases.push_back(p.done());
  }
  return phases;
}

PhaseEstimate rows_head_chunk(const MemoryTerms& R, const Partitioning& partition) {
  const Partitioning rows{std::min(partition.rows, R.T), std::min(partition.logits_rows, R.T)};
  for (auto& phase : streambp_phases(R, rows, FirstInput::recomputed))
    if (phase.name == "head chunk") return phase;
  throw std::logic_error("rows_head_chunk: streambp_phases has no head chunk");
}

}  // namespace bpbench
