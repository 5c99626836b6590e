// ring_strategy.h: what the two ring strategies (ring.cpp, streambp_ring.cpp) share as strategies: each
// rank's rows of the batch (the zigzag layout, or with options().ulysses_degree U > 1 the 2-D mesh's U-th of
// them: ring_layer.h), T's multiple that needs no padding (2P), the cells they refuse, and the CUDA settings
// their estimate does not cover. Their steps differ; their layout does not.
#pragma once

#include <optional>
#include <string>

#include "impls/machinery/dist_common.h"
#include "impls/machinery/ring_layer.h"

namespace bpbench::dist {

class RingStrategy : public DistStrategy {
 public:
  bool data_parallel() const override { return false; }
  bool sequence_parallel() const override { return true; }
  bool splits_heads() const override { return false; }  // the mesh's U does: unsupported() below
  bool runs_on_mesh() const override { return true; }
  int64_t unpadded_multiple(int64_t ranks) const override { return 2 * ranks; }
  // On CUDA the pairs the estimate knows are flash's (ring_estimate.h); the math form's (float32, or a head
  // flash does not take) are not written.
  std::optional<std::string> estimate_gap(const std::string& device, at::ScalarType dtype,
                                          const ModelConfig& model) const override;
  Batch local_slice(const Batch& global, int rank, int world) const override;
  // A ulysses_degree that does not divide the ranks or split the model's heads: a skipped cell with the
  // reason; else DistStrategy's.
  std::optional<std::string> unsupported(const CellTraits& traits) const override;

 protected:
  using DistStrategy::DistStrategy;
  // This rank's place in the step (its groups joined), checked against the batch's rows.
  RingPlace place_of(DistStep& step) const;
};

// Why U Ulysses ranks cannot run inside `ranks` ranks' ring strategy on `model` (U not dividing the ranks,
// or not splitting the heads), naming the valid degrees; nullopt when they can.
std::optional<std::string> mesh_refusal(const ModelConfig& model, int64_t ranks, int64_t ulysses_degree);

}  // namespace bpbench::dist
