// ring_strategy.cpp: ring_strategy.h.
#include "impls/machinery/ring_strategy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <vector>

#include "harness/model/attention_partial.h"
#include "impls/machinery/sequence_parallel.h"

namespace bpbench::dist {

std::optional<std::string> mesh_refusal(const ModelConfig& model, int64_t ranks, int64_t U) {
  std::vector<int64_t> valid;
  for (int64_t u = 1; u <= ranks; ++u)
    if (ranks % u == 0 && heads_split(model.heads, model.kv_heads, u)) valid.push_back(u);
  if (ranks % U != 0)
    return fmt::format("ulysses_degree {} does not divide world_size {} (valid for {}: {})", U, ranks,
                       model.name, fmt::join(valid, ", "));
  if (!heads_split(model.heads, model.kv_heads, U))
    return fmt::format(
        "ulysses_degree {} cannot split {}'s attention by heads ({} query heads, {} K/V heads: U must divide "
        "the query heads, and divide the K/V heads or be a multiple of them; valid on {} ranks: {})",
        U, model.name, model.heads, model.kv_heads, ranks, fmt::join(valid, ", "));
  return std::nullopt;
}

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
  return ring_batch(global, rank, world, options_.ulysses_degree);
}

std::optional<std::string> RingStrategy::unsupported(const CellTraits& traits) const {
  if (options_.ulysses_degree > 1 && traits.model)
    if (auto why = mesh_refusal(*traits.model, traits.world_size, options_.ulysses_degree))
      return fmt::format("{}: {}", name(), *why);
  return DistStrategy::unsupported(traits);
}

RingPlace RingStrategy::place_of(DistStep& step) const {
  RingPlace place(step.batch().whole_seq_len, options_.ulysses_degree, step.comm());
  if (step.batch().seq_len() != place.rows())
    throw std::logic_error(fmt::format("{}: rank {} holds {} rows, its layout {}", name(), step.comm().rank(),
                                       step.batch().seq_len(), place.rows()));
  return place;
}

}  // namespace bpbench::dist
