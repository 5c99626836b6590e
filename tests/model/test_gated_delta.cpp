// test_gated_delta.cpp: the gated delta rule's chunked form against its per-token recurrence in float64 (the
// output, the final state and every gradient, chunk sizes that do not divide T), and the property StreamBP
// through the recurrence needs: two pieces chained by their state, backpropagated from the last with dS
// carried, give the whole sequence's gradients. The FLOP counter sees each of the chunked form's products and
// solves once forward and once in the backward.
#include <gtest/gtest.h>

#include <vector>

#include "harness/model/flop_count.h"
#include "harness/model/gated_delta.h"

namespace bpbench::test_gated_delta {
namespace {

constexpr double kTolerance = 1e-11;

struct Inputs {
  torch::Tensor q, k, v, g, beta, state;
  std::vector<torch::Tensor> all() const { return {q, k, v, g, beta, state}; }
};

// N = 2, H = 3, T = 13 (prime), dk = 4, dv = 5; q and k l2-normed as the layer gives them, decays in
// (e^-1.5, 1), a state entering that is not zero.
Inputs random_inputs() {
  torch::manual_seed(3);
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  auto unit = [&](torch::Tensor x) { return x / x.norm(2, -1, true); };
  Inputs in;
  in.q = unit(torch::randn({2, 3, 13, 4}, f64)).requires_grad_();
  in.k = unit(torch::randn({2, 3, 13, 4}, f64)).requires_grad_();
  in.v = torch::randn({2, 3, 13, 5}, f64).requires_grad_();
  in.g = (-1.5 * torch::rand({2, 3, 13}, f64)).requires_grad_();
  in.beta = torch::rand({2, 3, 13}, f64).requires_grad_();
  in.state = (0.3 * torch::randn({2, 3, 4, 5}, f64)).requires_grad_();
  return in;
}

// A loss that weighs every output and the final state differently, and the gradients of every input.
std::vector<torch::Tensor> gradients(const Inputs& in, const DeltaRuleOutput& r) {
  torch::manual_seed(11);
  const auto loss = (r.out * torch::randn(r.out.sizes(), r.out.options())).sum() +
                    (r.state * torch::randn(r.state.sizes(), r.state.options())).sum();
  return torch::autograd::grad({loss}, in.all());
}

TEST(GatedDeltaRule, ChunksEqualTheRecurrenceWithEveryGradient) {
  const Inputs in = random_inputs();
  const double scale = 0.5;  // dk^-1/2 for dk = 4
  const DeltaRuleOutput ref = gated_delta_rule_recurrent(in.q, in.k, in.v, in.g, in.beta, in.state, scale);
  const auto ref_grads = gradients(in, ref);
  for (const int64_t chunk : {1, 4, 5, 13, 20}) {
    SCOPED_TRACE(chunk);
    const DeltaRuleOutput got =
        gated_delta_rule_chunked(in.q, in.k, in.v, in.g, in.beta, in.state, scale, chunk);
    EXPECT_TRUE(torch::allclose(got.out, ref.out, 0, kTolerance));
    EXPECT_TRUE(torch::allclose(got.state, ref.state, 0, kTolerance));
    const auto grads = gradients(in, got);
    const char* names[] = {"q", "k", "v", "g", "beta", "state"};
    for (size_t i = 0; i < grads.size(); ++i)
      EXPECT_LT((grads[i] - ref_grads[i]).abs().max().item<double>(), kTolerance) << names[i];
  }
}

// Rows [0, 6) and [6, 13) as two pieces: forward the first, keep the state between them; backward the second
// first with the loss's gradients, which gives dS for the boundary, then the first with its own and that dS.
TEST(GatedDeltaRule, PiecesChainedByTheirStateBackpropagateFromTheLast) {
  const Inputs in = random_inputs();
  const DeltaRuleOutput whole = gated_delta_rule_chunked(in.q, in.k, in.v, in.g, in.beta, in.state, 0.5, 4);
  torch::manual_seed(5);
  const auto w_out = torch::randn(whole.out.sizes(), whole.out.options());
  const auto w_state = torch::randn(whole.state.sizes(), whole.state.options());
  const auto expected =
      torch::autograd::grad({(whole.out * w_out).sum() + (whole.state * w_state).sum()}, in.all());

  auto rows = [](const torch::Tensor& t, int64_t s, int64_t n) { return t.narrow(2, s, n); };
  const int64_t split = 6, rest = 13 - split;
  // Forward of the first piece without a graph: only its final state is kept.
  torch::Tensor boundary;
  {
    torch::NoGradGuard no_grad;
    boundary = gated_delta_rule_chunked(rows(in.q, 0, split), rows(in.k, 0, split), rows(in.v, 0, split),
                                        rows(in.g, 0, split), rows(in.beta, 0, split), in.state, 0.5, 4)
                   .state;
  }
  const auto boundary_leaf = boundary.detach().requires_grad_();
  const DeltaRuleOutput second =
      gated_delta_rule_chunked(rows(in.q, split, rest), rows(in.k, split, rest), rows(in.v, split, rest),
                               rows(in.g, split, rest), rows(in.beta, split, rest), boundary_leaf, 0.5, 4);
  const auto second_loss = (second.out * rows(w_out, split, rest)).sum() + (second.state * w_state).sum();
  std::vector<torch::Tensor> wrt = in.all();
  wrt.push_back(boundary_leaf);
  const auto late = torch::autograd::grad({second_loss}, wrt, {}, false, false, /*allow_unused=*/true);
  const DeltaRuleOutput first =
      gated_delta_rule_chunked(rows(in.q, 0, split), rows(in.k, 0, split), rows(in.v, 0, split),
                               rows(in.g, 0, split), rows(in.beta, 0, split), in.state, 0.5, 4);
  const auto first_loss = (first.out * rows(w_out, 0, split)).sum() + (first.state * late.back()).sum();
  const auto early = torch::autograd::grad({first_loss}, in.all(), {}, false, false, /*allow_unused=*/true);
  const char* names[] = {"q", "k", "v", "g", "beta", "state"};
  for (size_t i = 0; i < expected.size(); ++i) {
    auto sum = early[i].defined() ? early[i] : torch::zeros_like(expected[i]);
    if (late[i].defined()) sum = sum + late[i];
    EXPECT_LT((sum - expected[i]).abs().max().item<double>(), kTolerance) << names[i];
  }
}

TEST(GatedDeltaRule, ShapesThatDisagreeAreRefusedByName) {
  const Inputs in = random_inputs();
  EXPECT_THROW(gated_delta_rule_chunked(in.q, in.k, in.v, in.g, in.beta, in.state.transpose(-1, -2), 0.5, 4),
               std::invalid_argument);
  EXPECT_THROW(gated_delta_rule_chunked(in.q, in.k, in.v, in.g, in.beta, in.state, 0.5, 0),
               std::invalid_argument);
}

// Per chunk of c rows and (sequence, head), with R = dv + dk: the products beta k k^T and q k^T (c x dk x c
// each), the solve (c (c - 1) R), the entering state read twice (c x dk x dv each), the chunk's attention on
// u (c x c x dv) and the state's update (dk x c x dv). Backward, every input training: both factors of every
// product, and the solve once more with its dA (2 c c R).
TEST(GatedDeltaRule, TheFlopCounterSeesEveryProductOfTheChunks) {
  const Inputs in = random_inputs();
  const int64_t N = 2, H = 3, dk = 4, dv = 5, R = dv + dk;
  int64_t forward = 0, backward = 0;
  for (const int64_t c : {5, 5, 3}) {
    const int64_t products = 2 * (2 * c * c * dk) + 2 * (2 * c * dk * dv) + 2 * c * c * dv + 2 * dk * c * dv;
    forward += N * H * (products + c * (c - 1) * R);
    backward += N * H * (2 * products + c * (c - 1) * R + 2 * c * c * R);
  }
  FlopCounter counter;
  const DeltaRuleOutput got = gated_delta_rule_chunked(in.q, in.k, in.v, in.g, in.beta, in.state, 0.5, 5);
  gradients(in, got);
  EXPECT_EQ(counter.counts().forward_matmul, forward);
  EXPECT_EQ(counter.counts().backward_matmul, backward);
  EXPECT_EQ(counter.counts().recompute_matmul, 0);
}

}  // namespace
}  // namespace bpbench::test_gated_delta
