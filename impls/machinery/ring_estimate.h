// ring_estimate.h: one rank's phases of the ring strategy (ring.cpp, ring_attention.cpp), from the model's
// terms (memory_terms.h) on the rank's rows: R = D with R.T = 2b, b = ceil(T / 2P) (ring_attention.h's
// legend). Every head stays on every rank, so there is one view, the rows'; what the ring adds is the K/V
// pair it passes on (and, backward, the dK/dV accumulator travelling with it) and one b x b pair of blocks at
// a time in the attention kernel.
#pragma once

#include <vector>

#include "harness/model/memory_terms.h"
#include "impls/strategy.h"

namespace bpbench {

// D: the whole step's terms (D.T = T, D.ranks = P).
MemoryTerms ring_rows(const MemoryTerms& D);
std::vector<PhaseEstimate> ring_phases(const MemoryTerms& D);
// streambp-ring's (streambp_ring.cpp): StreamBP's chunks of `partition` rows on the rank's 2b rows.
std::vector<PhaseEstimate> streambp_ring_phases(const MemoryTerms& D, const Partitioning& partition);

}  // namespace bpbench
