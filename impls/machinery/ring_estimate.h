// ring_estimate.h: one rank's phases of the ring strategies (ring.cpp, streambp_ring.cpp, ring_attention.cpp,
// mesh_attention.cpp), from the model's terms (memory_terms.h) in two views (MeshViews below). On the plain
// ring every head stays on every rank and the views are one; what the ring adds is the K/V pair it passes on
// (and, backward, the dK/dV accumulator travelling with it) and one b x b pair of blocks (or a tile of it) at
// a time in the attention kernel. On the 2-D mesh the Ulysses exchanges around the ring add their buffers
// and the ring's reordered copies of Q, K, V.
#pragma once

#include <vector>

#include "harness/model/memory_terms.h"
#include "impls/interface/strategy.h"

namespace bpbench {

// A rank's two views (ring_layer.h's legend): its rows, T = 2h with every head, where everything but the
// ring's attention runs; and the ring's, T = 2b rows of Hq/U query and Hk'/U K/V heads, where the ring's
// kernels run (on the plain ring, U = 1, the same). D: the whole step's terms (D.T = T, D.ranks = P,
// D.ulysses = U); throws std::invalid_argument where U does not divide P or split the heads.
struct MeshViews {
  MemoryTerms rows, ring;
  int64_t ulysses = 1, kv_repeat = 1;  // U, and the copies of each K/V head its exchange sends
};
MeshViews mesh_views(const MemoryTerms& D);
std::vector<PhaseEstimate> ring_phases(const MemoryTerms& D);
// streambp-ring's (streambp_ring.cpp): StreamBP's chunks of `partition` rows on the rank's 2b rows.
std::vector<PhaseEstimate> streambp_ring_phases(const MemoryTerms& D, const Partitioning& partition);

}  // namespace bpbench
