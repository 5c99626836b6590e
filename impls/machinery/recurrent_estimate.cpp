// recurrent_estimate.cpp: recurrent_estimate.h.
#include "impls/machinery/recurrent_estimate.h"

#include <fmt/format.h>

#include "harness/model/linear_memory_terms.h"
#include "harness/model/phase_builder.h"

namespace bpbench {

namespace {

// The state and halo of `count` chunk boundaries (or their gradients).
int64_t boundaries(const MemoryTerms& D, int64_t count) {
  return count * (linear_state_bytes(D) + linear_halo_bytes(D));
}

}  // namespace

PhaseEstimate linear_forward_phase(const MemoryTerms& D, int64_t c, FirstInput first) {
  const int64_t i = D.linear_top;
  const FirstInput stored = i == 0 ? FirstInput::kept : first;
  PhaseBuilder p("forward (linear layers)");
  add_checkpoints(p, D, layer_inputs_label(i, stored) + " and the output being built",
                  layer_inputs_alive(i, stored) + 1);
  p.add("the state and halo entering the chunk: N*Hv*dk*dv*f + N*(K-1)*C*s", boundaries(D, 1));
  const int64_t block = linear_chunk_forward(D, c);
  const int64_t rows = D.N * c;
  const int64_t mlp = boundaries(D, 1) + rows * (2 * D.d * D.s) + D.mlp_forward(rows);
  if (block >= mlp)
    p.add(
        "one chunk's Gated DeltaNet, no grad: its locals and the delta rule's last chunk: see "
        "linear_chunk_forward",
        block);
  else
    p.add(
        "one chunk's MLP beside the block's outputs: the state and halo it leaves, x1, its norm, the "
        "MLP's temporaries",
        mlp);
  return p.done();
}

namespace {
// A whole-sequence block at D.linear_top: its lower checkpoints and its own input, `held` (N, T, d)
// tensors, its graph over all rows, and the transient named `what`.
PhaseEstimate whole_linear_phase(const MemoryTerms& D, const char* name, int64_t held,
                                 const std::string& held_note, const char* what, int64_t transient) {
  const int64_t i = D.linear_top, rows = D.N * D.T;
  PhaseBuilder p(name);
  add_checkpoints(p, D, layer_inputs_label(i, FirstInput::kept), layer_inputs_alive(i, FirstInput::kept));
  p.add(fmt::format("{}: {} x N*T*d*s", held_note, held), held * rows * D.d * D.s);
  p.add("the Gated DeltaNet block's graph, all rows: see linear_whole_graph", linear_whole_graph(D, D.T));
  p.add(what, transient);
  return p.done();
}
}  // namespace

PhaseEstimate whole_linear_backward(const MemoryTerms& D, int64_t held, const std::string& held_note) {
  return whole_linear_phase(
      D, "layer linear backward", held, held_note,
      "its backward: x_in.grad and the larger of linear_chunk_backward and the input norm's backward",
      linear_whole_backward(D, D.T));
}

PhaseEstimate whole_linear_forward(const MemoryTerms& D, int64_t held, const std::string& held_note) {
  return whole_linear_phase(D, "layer linear re-forward", held, held_note,
                            "its forward's high point, at its last step or in a delta-rule chunk: see "
                            "linear_whole_forward",
                            linear_whole_forward(D, D.T));
}

std::vector<PhaseEstimate> streambp_linear_phases(const MemoryTerms& D, const Partitioning& partition,
                                                  FirstInput first) {
  const int64_t c = partition.rows, i = D.linear_top, rows = D.N * D.T;
  const int64_t chunks = (D.T + c - 1) / c;
  std::vector<PhaseEstimate> out;
  out.push_back(linear_forward_phase(D, c, first));
  auto layer_base = [&](PhaseBuilder& p) {
    add_checkpoints(p, D, layer_inputs_label(i, first), layer_inputs_alive(i, first));
    p.add("dy, its rows becoming dx's: N*T*d*s", rows * D.d * D.s);
  };
  if (chunks > 1) {
    // a. the last forward (chunk D - 2), every earlier boundary kept.
    PhaseBuilder p("layer linear boundary states");
    layer_base(p);
    p.add(fmt::format("the states and halos kept so far: {} x (N*Hv*dk*dv*f + N*(K-1)*C*s)", chunks - 1),
          boundaries(D, chunks - 1));
    p.add("one chunk's Gated DeltaNet, no grad: see linear_chunk_forward", linear_chunk_forward(D, c));
    out.push_back(p.done());
  }
  // b. the last chunk (every state kept, no gradient from a later one) and the one before it (a state fewer,
  // the later chunk's dS and dhalo in its place).
  PhaseEstimate best;
  for (auto [r, e] : critical_chunks(D.T, c)) {
    const bool last = e == D.T;
    PhaseBuilder p("layer linear chunk backward");
    layer_base(p);
    const int64_t kept = last ? chunks : chunks - 1;
    p.add(fmt::format("the states and halos entering chunks 0..{}: {} x (N*Hv*dk*dv*f + N*(K-1)*C*s)",
                      kept - 1, kept),
          boundaries(D, kept));
    if (!last) p.add("the later chunk's dS and dhalo: N*Hv*dk*dv*f + N*(K-1)*C*s", boundaries(D, 1));
    p.add("the state and halo the chunk leaves: N*Hv*dk*dv*f + N*(K-1)*C*s", boundaries(D, 1));
    p.add("the chunk's Gated DeltaNet graph: see linear_chunk_graph", linear_chunk_graph(D, r));
    p.add("x1 and the MLP half's graph: N*c*(d*s + mlp_row - [x1 as its norm keeps it])",
          D.N * r * (D.d * D.s + D.mlp_row() - D.block_input_kept()));
    p.add("the layer output: N*c*d*s", D.N * r * D.d * D.s);
    const int64_t mlp_backward = D.mlp_backward(r, true);
    const int64_t delta_backward = D.N * r * D.d * D.s + linear_chunk_backward(D, r);
    p.add(mlp_backward >= delta_backward
              ? mlp_backward_name(D, "MLP backward: max(N*c*I*s + d*I*s [+ N*c*d*s], 2 x N*c*I*s)")
              : std::string("the block's backward: dx1 and linear_chunk_backward"),
          std::max(mlp_backward, delta_backward));
    keep_larger(best, p.done());
  }
  out.push_back(best);
  return out;
}

}  // namespace bpbench
