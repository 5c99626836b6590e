// estimate_comm.h: the collectives of one rank of a distributed strategy, from the model's dimensions: calls
// and bytes by kind in comm.h's conventions, and the group each runs in. What a CPU cell measures as its
// "comm" (held equal in tests/run/test_per_rank_peaks.cpp), and what the time estimate (estimate_time.h)
// puts on the links.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/estimate/estimate.h"
#include "impls/machinery/comm.h"

namespace bpbench {

// Which ranks a collective runs over: all of them, a Ulysses group of the 2-D mesh, or its ring.
enum class CommGroup : uint8_t { world, ulysses, ring };

struct CollectiveEstimate {
  dist::Collective kind;
  std::string what;  // "layer gradients", "K/V round the ring", ...
  CommGroup group = CommGroup::world;
  int64_t group_ranks = 1;
  int64_t calls = 0, bytes = 0;  // logical: comm.h's conventions (the full buffer of each call)
  // What this rank sends with NCCL's ring algorithms (comm.h: reduce_scatter and all_gather (R-1)/R n s,
  // all_reduce twice that, all_to_all (R-1)/R n s, send_recv n s). Gloo's reduce_scatter, an all_reduce,
  // sends twice what this says: the estimate is the GPU's.
  double wire_bytes() const;
};

struct CommEstimate {
  std::vector<CollectiveEstimate> collectives;
  int64_t calls(dist::Collective kind) const;
  int64_t bytes(dist::Collective kind) const;
};

// One forward + backward (one micro-batch) of `in.impl` on one of `in.ranks` ranks: its gradient groups
// (reduce_scatter, or all_reduce whole under sharding none and zero1), the loss's all_reduces (its
// normalisers, the loss; DPO's sequence sums on sequence-parallel ranks), zero3's two gathers of each layer,
// and the strategy's exchanges (its comm_schedule(), impls/interface/strategy.h). Left out: the routers'
// load-balancing counts, one all_reduce of 2E + 1 float64 where that loss is on. Empty for a single-process
// strategy. Throws std::invalid_argument for an unknown impl or sharding, a ulysses_degree that does not
// divide the ranks, a length or batch below 1; the memory estimate's gaps are not the collectives'.
CommEstimate estimate_step_comm(const EstimateInput& in);

// What a training step's optimizer adds once per step (harness/run/train_sharded.cpp): the gradient norm's
// all_reduce where the optimizer is sharded, and the new weights all_gathered per group under zero1 and
// zero2 (zero3: the embedding and the head's; its layers are gathered by the next forward).
CommEstimate estimate_optimizer_comm(const EstimateInput& in);

}  // namespace bpbench
