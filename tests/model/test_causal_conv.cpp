// test_causal_conv.cpp: Gated DeltaNet's short causal convolution, in float64: the whole sequence against the
// sum written out tap by tap, pieces with their halos against the whole (a piece of one row and one shorter
// than the halo included), and the gradients of pieces run from the last, each halo's gradient added to the
// rows before, against the whole sequence's.
#include <gtest/gtest.h>

#include <vector>

#include "harness/model/causal_conv.h"

namespace bpbench::test_causal_conv {
namespace {

constexpr double kTolerance = 1e-12;
const auto kF64 = torch::TensorOptions().dtype(torch::kDouble);

TEST(CausalConv, TheWholeSequenceIsTheSumOfItsTaps) {
  torch::manual_seed(1);
  const int64_t N = 2, T = 9, C = 5, K = 4;
  const auto x = torch::randn({N, T, C}, kF64), w = torch::randn({C, K}, kF64);
  const auto got = causal_depthwise_conv_silu(x, conv_halo(x, 0, K), w);
  for (int64_t t = 0; t < T; ++t) {
    auto sum = torch::zeros({N, C}, kF64);
    for (int64_t j = 0; j < K; ++j)  // tap j reads row t - (K - 1) + j
      if (t - (K - 1) + j >= 0) sum = sum + w.select(1, j) * x.select(1, t - (K - 1) + j);
    EXPECT_TRUE(torch::allclose(got.select(1, t), torch::silu(sum), 0, kTolerance)) << "row " << t;
  }
}

TEST(CausalConv, PiecesWithTheirHalosAreTheWholeAndSoAreTheirGradients) {
  torch::manual_seed(2);
  const int64_t N = 2, T = 13, C = 3, K = 4;
  const auto x = torch::randn({N, T, C}, kF64).requires_grad_();
  const auto w = torch::randn({C, K}, kF64).requires_grad_();
  const auto dy = torch::randn({N, T, C}, kF64);
  const auto whole = causal_depthwise_conv_silu(x, conv_halo(x, 0, K), w);
  const auto expected = torch::autograd::grad({(whole * dy).sum()}, {x, w});

  // Pieces [0, 5), [5, 6), [6, 8), [8, 13): one of a row and one shorter than the halo among them. Each runs
  // from its own leaves, as a streamed backward would: its rows and its halo, taken from x without a graph.
  const std::vector<std::pair<int64_t, int64_t>> pieces = {{8, 5}, {6, 2}, {5, 1}, {0, 5}};  // last first
  auto dx = torch::zeros_like(x);
  auto dw = torch::zeros_like(w);
  for (const auto& [s, c] : pieces) {
    const auto rows = x.detach().narrow(1, s, c).clone().requires_grad_();
    const auto halo = conv_halo(x.detach(), s, K).requires_grad_();
    const auto y = causal_depthwise_conv_silu(rows, halo, w);
    EXPECT_TRUE(torch::allclose(y, whole.detach().narrow(1, s, c), 0, kTolerance)) << "piece at " << s;
    const auto g = torch::autograd::grad({(y * dy.narrow(1, s, c)).sum()}, {rows, halo, w});
    dx.narrow(1, s, c).add_(g[0]);
    // The halo's gradient belongs to the rows before the piece (its zero rows before row 0 to none).
    const int64_t before = std::min(s, K - 1);
    if (before > 0) dx.narrow(1, s - before, before).add_(g[1].narrow(1, K - 1 - before, before));
    dw.add_(g[2]);
  }
  EXPECT_LT((dx - expected[0]).abs().max().item<double>(), kTolerance);
  EXPECT_LT((dw - expected[1]).abs().max().item<double>(), kTolerance);
}

TEST(CausalConv, AHaloOfTheWrongSizeIsRefused) {
  const auto x = torch::zeros({1, 4, 3}, kF64), w = torch::zeros({3, 4}, kF64);
  EXPECT_THROW(causal_depthwise_conv_silu(x, torch::zeros({1, 2, 3}, kF64), w), std::invalid_argument);
  EXPECT_NO_THROW(causal_depthwise_conv_silu(x, conv_halo(x, 2, 4), w));
}

}  // namespace
}  // namespace bpbench::test_causal_conv
