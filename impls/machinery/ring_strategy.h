// ring_strategy.h: what the two ring strategies (ring.cpp, streambp_ring.cpp) share as strategies: each
// rank's zigzag slice of the batch, T's multiple that needs no padding (2P), the cells they refuse, and the
// CUDA settings their estimate does not cover. Their steps differ; their layout does not.
#pragma once

#include <optional>
#include <string>

#include "impls/machinery/dist_common.h"
#include "impls/machinery/ring_attention.h"

namespace bpbench::dist {

class RingStrategy : public DistStrategy {
 public:
  bool data_parallel() const override { return false; }
  bool sequence_parallel() const override { return true; }
  bool splits_heads() const override { return false; }
  int64_t unpadded_multiple(int64_t ranks) const override { return 2 * ranks; }
  // On CUDA the pairs the estimate knows are flash's (ring_estimate.h); the math form's (float32, or a head
  // flash does not take) are not written.
  std::optional<std::string> estimate_gap(const std::string& device, at::ScalarType dtype,
                                          const ModelConfig& model) const override;
  Batch local_slice(const Batch& global, int rank, int world) const override;
  // shard_params, as a skipped cell with the reason; else DistStrategy's.
  std::optional<std::string> unsupported(const CellTraits& traits) const override;

 protected:
  using DistStrategy::DistStrategy;
  // The layout of this rank's rows, checked against the batch's.
  ZigzagLayout layout_of(DistStep& step) const;
};

}  // namespace bpbench::dist
