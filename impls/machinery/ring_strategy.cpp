// ring_strategy.cpp: ring_strategy.h.
#include "impls/machinery/ring_strategy.h"

#include <fmt/format.h>

#include <stdexcept>

#include "harness/model/attention_partial.h"

namespace bpbench::dist {

std::optional<std::string> RingStrategy::estimate_gap(const std::string& device, at::ScalarType dtype,
                                                      const ModelConfig& model) const {
  if (device != "cuda" ||
      partial_kernel_for(torch::Device(torch::kCUDA), dtype, model.head_dim) == PartialKernel::cuda_flash)
    return std::nullopt;
  return fmt::format(
      "{} on CUDA is estimated with flash's block pairs only (bfloat16, a head flash takes): its math form's "
      "pairs are not written (valid: --dtype bfloat16, or --device cpu)",
      name());
}

Batch RingStrategy::local_slice(const Batch& global, int rank, int world) const {
  return zigzag_batch(global, rank, world);
}

std::optional<std::string> RingStrategy::unsupported(const CellTraits& traits) const {
  if (options_.shard_params)
    return fmt::format("{}: shard_params is not implemented on the ring yet", name());
  return DistStrategy::unsupported(traits);
}

ZigzagLayout RingStrategy::layout_of(DistStep& step) const {
  auto& comm = step.comm();
  const ZigzagLayout layout = zigzag_layout(step.batch().whole_seq_len, comm.world_size(), comm.rank());
  if (step.batch().seq_len() != layout.rows())
    throw std::logic_error(fmt::format("{}: rank {} holds {} rows, its layout {}", name(), comm.rank(),
                                       step.batch().seq_len(), layout.rows()));
  return layout;
}

}  // namespace bpbench::dist
