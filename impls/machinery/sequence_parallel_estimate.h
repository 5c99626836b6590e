// sequence_parallel_estimate.h: one rank's phases of the sequence-parallel strategies (ulysses.cpp,
// streambp_ulysses.cpp), from the model's terms (memory_terms.h) in two views: the rank's rows (T = Ts of
// every sequence) and its heads (T' rows of Hq' query and Hk'/P K/V heads), where the attention kernel runs.
// D: the whole step's terms with D.T = T and D.ranks = P (sequence_parallel.h's legend).
#pragma once

#include <vector>

#include "harness/model/memory_terms.h"
#include "impls/interface/strategy.h"

namespace bpbench {

struct RankViews {
  MemoryTerms rows;   // T = Ts: everything a rank holds for its rows
  MemoryTerms heads;  // T = T', Hq = Hq', Hkv = Hk'/P: the attention of its heads over every row
  int64_t kv_repeat = 1;
  // One (N, Ts, d) row tensor; q of the rows (= Q of the heads); k of the rows (Hkv heads); K of the heads
  // (= k repeated to Hk', on the rows); what the q, k, v all-to-all carries (Q + 2 K of the heads).
  int64_t x() const { return rows.N * rows.T * rows.d * rows.s; }
  int64_t q() const { return rows.N * rows.T * rows.Aq * rows.s; }
  int64_t k_rows() const { return rows.N * rows.T * rows.Akv * rows.s; }
  int64_t k_heads() const { return heads.N * heads.T * heads.Akv * heads.s; }
  int64_t qkv() const { return q() + 2 * k_heads(); }
};
// Throws std::invalid_argument where P cannot split the heads (sequence_parallel.h).
RankViews rank_views(const MemoryTerms& D);

std::vector<PhaseEstimate> streambp_ulysses_phases(const MemoryTerms& D, const Partitioning& partition);
std::vector<PhaseEstimate> ulysses_phases(const MemoryTerms& D);

}  // namespace bpbench
