// recurrent_estimate.h: the estimate's phases at a Gated DeltaNet layer, beside the attention layers'
// (layerwise_estimate.h): StreamBP's by partitions (Note [StreamBP through the recurrence],
// recurrent_layer.h) and a whole-sequence re-forward's (checkpoint, mst; Note [A Gated DeltaNet block over
// all rows]). The layer's terms: harness/model/linear_memory_terms.h.
#pragma once

#include <string>
#include <vector>

#include "harness/model/memory_terms.h"
#include "impls/interface/strategy.h"
#include "impls/machinery/layerwise_estimate.h"

namespace bpbench {

// At the topmost linear layer (D.linear_top), every lower checkpoint alive: its no-grad forward in the
// checkpointed forward ("forward (linear layers)"), its boundary states ("layer linear boundary states") and
// its chunks' backward from the last ("layer linear chunk backward").
// The checkpointed forward at D.linear_top, Model::layer_in_chunks in pieces of `rows` ("forward (linear
// layers)"): the stored inputs and the output being built, the state entering a piece, and the piece's
// no-grad block or, after it, its MLP beside the block's outputs.
PhaseEstimate linear_forward_phase(const MemoryTerms& D, int64_t rows, FirstInput first);

// A whole-sequence re-forward's block backward at D.linear_top ("layer linear backward"): its lower
// checkpoints and its own input, `held` (N, T, d) tensors named by `held_note`, the block's graph over all
// rows and its backward's transients (linear_whole_backward).
PhaseEstimate whole_linear_backward(const MemoryTerms& D, int64_t held, const std::string& held_note);
// Its re-forward with grad ("layer linear re-forward"), at the block's last step: as above, the forward's
// high point (linear_whole_forward) in place of the backward's.
PhaseEstimate whole_linear_forward(const MemoryTerms& D, int64_t held, const std::string& held_note);

std::vector<PhaseEstimate> streambp_linear_phases(const MemoryTerms& D, const Partitioning& partition,
                                                  FirstInput first);

}  // namespace bpbench
