// estimate_inverse.h: the estimate turned around: the longest sequence length whose estimated peak fits a
// memory budget (and, with offloaded checkpoints, whose pinned host buffers fit a host budget).
//
// The estimate's peak (and host bytes) grow with T for every strategy at a fixed partition (a partition
// larger than T is T), so the answer is the largest multiple of the granularity that fits, found by
// bisection; `bpbench estimate --budget/--gpu` prints it, and a max-length search starts its probes there
// (maxlen_cell.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "harness/estimate/estimate.h"

namespace bpbench {

// The largest k * granularity <= upper (k >= 1) for which fits() holds, fits() being monotone (true up to
// some length, false above); 0 when not even `granularity` fits. About log2(upper / granularity) calls.
int64_t largest_fitting_multiple(int64_t granularity, int64_t upper,
                                 const std::function<bool(int64_t)>& fits);

struct LengthBudget {
  int64_t device_bytes = 0;           // the estimate's peak_bytes must not exceed it
  std::optional<int64_t> host_bytes;  // offload: the pinned checkpoints must not exceed it (none: no bound)
  int64_t granularity = 1024;         // lengths are multiples of it
  int64_t upper = int64_t{1} << 24;   // never beyond it (16M tokens)
};

struct LongestLength {
  int64_t seq_len = 0;  // 0: not even `granularity` tokens fit
  std::string bound;    // what stops one granularity more: "device", "host", or "upper" (never stopped)
  MemoryEstimate at;    // the estimate at seq_len (at granularity when seq_len is 0: what did not fit)
};

// `in` with its seq_len replaced by each length tried. Throws what estimate_peak throws for `in`.
LongestLength longest_seq_len(EstimateInput in, const LengthBudget& budget);

}  // namespace bpbench
