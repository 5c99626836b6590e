// estimate_flops.h: the FLOPs of one forward + backward of each strategy, analytically, in the counter's own
// tallies (harness/model/flop_count.h), so that `bpbench estimate` and a measured cell's "compute" can be
// held equal. The formulas: docs/estimate.md, "FLOPs".
#pragma once

#include "harness/estimate/estimate.h"
#include "harness/model/flop_count.h"

namespace bpbench {

// Throws std::invalid_argument as check_estimate_input does. Every attention kernel is modelled (the math
// kernel's masked scores included), so unlike estimate_peak it takes float64 on cuda.
FlopCounts estimate_flops(const EstimateInput& in);

// Whether estimate_flops models `c`'s blocks (not yet: hybrid linear attention, whose memory is estimated).
inline bool flops_estimated_for(const ModelConfig& c) {
  return !c.linear_attention;
}

}  // namespace bpbench
