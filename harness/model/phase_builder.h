// phase_builder.h: how the strategies compose memory_terms.h's byte terms into the phases of their estimates,
// and the pieces of phases that several strategies share (the LM head, an attention backward). Implemented in
// memory_terms.cpp, beside the terms.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "harness/model/memory_terms.h"

namespace bpbench {

// A phase's terms as they are added; zero-byte terms are left out.
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

// The MLP backward's term name: `dense`, the dense MLP's formula, or the routed experts' (experts_backward).
inline std::string mlp_backward_name(const MemoryTerms& D, const char* dense) {
  return D.moe() ? "experts backward: max(2 x Re*d*s, 2 x R*d*s + Re*d*s - two experts' graphs) "
                   "(experts_backward), R rows, Re = ceil(k*R/E)"
                 : dense;
}

// Query chunks worth checking for a chunked layer: the last one (sees every key) and, when it is short, the
// last full-size one before it. Each as {rows, keys}.
std::vector<std::pair<int64_t, int64_t>> critical_chunks(int64_t T, int64_t c);

// The larger of two estimates of one phase (the same phase at another layer or chunk).
void keep_larger(PhaseEstimate& best, PhaseEstimate candidate);
// The terms of the highest of `moments` (moments of one phase that never coexist: a layer's q, k, v being
// made, its attention, its MLP), the first of equals, added to `into`.
void add_highest(PhaseBuilder& into, std::vector<PhaseEstimate> moments);

// ---- the LM head ----
// The head backward's high point over `rows` = N*R rows (R named `R` in the terms): the softmax's three
// (rows, V) tensors in f, or later the logits' gradient with the LM head's weight gradient and dx rows.
void add_head_backward(PhaseBuilder& p, const MemoryTerms& D, int64_t rows, const char* R, bool chunk);
// Whole-sequence head (plain, checkpoint): the final norm's saved tensors and output for all rows, then the
// head backward over N*T rows.
void add_whole_head(PhaseBuilder& p, const MemoryTerms& D);
// Streamed head: per chunk of c_l rows the same, plus dx (N, T, d) for the whole sequence unless it is
// written into x_L's rows (`dx_in_x`: layerwise.h, HeadDx::into_x; x_L is then counted by the caller).
void add_chunk_head(PhaseBuilder& p, const MemoryTerms& D, int64_t cl, bool dx_in_x = false);

// ---- attention backward ----
// A layer's attention backward of `rows` queries over `keys` keys (named R and E in the terms) of layer type
// `window`, from its output norm (Gemma 3) to the attention kernel: its high point is either the kernel's
// backward (Notes above; the output norm's saved tensors already released) or, before it, the output norm's
// backward with those saved tensors still alive. Attention-backward phases count the attention half without
// the output norm (attn_row() - output_norm()) and add this. into_sink: dK, dV go to a gradient sink
// (sink_attn_backward on the CPU kernel; the other kernels make them whole as before).
void add_attention_backward(PhaseBuilder& p, const MemoryTerms& D, int64_t rows, int64_t keys, int64_t window,
                            const char* R, const char* E, bool into_sink = false);
// "K path saved + K + V" of a whole-layer graph (kv_row_graph), named for what the efficient kernel saves.
const char* kv_graph_name(const MemoryTerms& D);

}  // namespace bpbench
