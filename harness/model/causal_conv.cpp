// causal_conv.cpp: the causal depthwise convolution over a piece with its halo (causal_conv.h).
#include "harness/model/causal_conv.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <vector>

namespace bpbench {

torch::Tensor causal_depthwise_conv_silu(const torch::Tensor& x, const torch::Tensor& halo,
                                         const torch::Tensor& weight) {
  const int64_t K = weight.size(-1), C = x.size(2);
  if (x.dim() != 3 || weight.dim() != 2 || weight.size(0) != C || halo.dim() != 3 ||
      halo.size(0) != x.size(0) || halo.size(1) != K - 1 || halo.size(2) != C)
    throw std::invalid_argument(
        "causal conv: x (N, c, C), halo (N, K - 1, C) and weight (C, K) do not agree");
  // (N, C, K - 1 + c): the halo then the piece, channels first as conv1d takes them; groups = C: depthwise.
  const auto rows = torch::cat({halo, x}, 1).transpose(1, 2);
  const std::vector<int64_t> one = {1}, none = {0};
  const auto y = torch::conv1d(rows, weight.unsqueeze(1), std::optional<torch::Tensor>(), one, none, one, C);
  return torch::silu(y).transpose(1, 2);  // (N, c, C)
}

torch::Tensor conv_halo(const torch::Tensor& x, int64_t s, int64_t kernel) {
  const int64_t before = std::min(s, kernel - 1);
  auto halo = torch::zeros({x.size(0), kernel - 1, x.size(2)}, x.options());
  if (before == 0) return halo;
  return torch::cat({halo.narrow(1, 0, kernel - 1 - before), x.narrow(1, s - before, before)}, 1);
}

}  // namespace bpbench
