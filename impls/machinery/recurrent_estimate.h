// recurrent_estimate.h: StreamBP's phases at a Gated DeltaNet layer (Note [StreamBP through the recurrence],
// recurrent_layer.h), beside the attention layers' (layerwise_estimate.h: streambp_phases). The layer's
// terms: harness/model/linear_memory_terms.h.
#pragma once

#include <vector>

#include "harness/model/memory_terms.h"
#include "impls/interface/strategy.h"
#include "impls/machinery/layerwise_estimate.h"

namespace bpbench {

// At the topmost linear layer (D.linear_top), every lower checkpoint alive: its no-grad forward in the
// checkpointed forward ("forward (linear layers)"), its boundary states ("layer linear boundary states") and
// its chunks' backward from the last ("layer linear chunk backward").
std::vector<PhaseEstimate> streambp_linear_phases(const MemoryTerms& D, const Partitioning& partition,
                                                  FirstInput first);

}  // namespace bpbench
