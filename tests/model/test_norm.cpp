// test_norm.cpp: the two RMSNorm kernels (harness/model/ops.h) compute one function: equal to round-off in
// float64 in values and gradients, within bfloat16's rounding in bfloat16, and a model switched to the fused
// kernel takes the same step as with Hugging Face's formula. (On CUDA the fused kernel is PyTorch's own
// kernel: tests/device/test_device.cpp compares it with this CPU reference.)
#include <gtest/gtest.h>

#include "harness/model/ops.h"
#include "harness/objectives/objective.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_norm {
namespace {

struct NormRun {
  torch::Tensor y, dx, dw;
};

NormRun run_norm(const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& dy, NormKernel k) {
  auto x = x0.clone().requires_grad_(true);
  auto w = w0.clone().requires_grad_(true);
  auto y = rms_norm(x, w, 1e-6, k);
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad()};
}

TEST(RmsNorm, FusedEqualsHuggingFaceInFloat64ValuesAndGradients) {
  torch::manual_seed(3);
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  const auto x = torch::randn({2, 7, 24}, f64), w = 1 + 0.1 * torch::randn({24}, f64);
  const auto dy = torch::randn({2, 7, 24}, f64);
  const NormRun hf = run_norm(x, w, dy, NormKernel::hf), fused = run_norm(x, w, dy, NormKernel::fused);
  EXPECT_TRUE(torch::allclose(fused.y, hf.y, 1e-13, 1e-13));
  EXPECT_TRUE(torch::allclose(fused.dx, hf.dx, 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(fused.dw, hf.dw, 1e-12, 1e-12));
}

TEST(RmsNorm, FusedIsWithinBfloat16RoundingOfHuggingFace) {
  torch::manual_seed(4);
  const auto x = torch::randn({3, 33, 64}).to(torch::kBFloat16);
  const auto w = (1 + 0.1 * torch::randn({64})).to(torch::kBFloat16);
  const auto dy = torch::randn({3, 33, 64}).to(torch::kBFloat16);
  const NormRun hf = run_norm(x, w, dy, NormKernel::hf), fused = run_norm(x, w, dy, NormKernel::fused);
  EXPECT_EQ(fused.y.scalar_type(), torch::kBFloat16);
  // The kernels round once at different points (hf: before the scale; fused: after): one bfloat16 ulp of
  // the output (2^-8 relative) apart at most, and never further than that from the float64 truth.
  const NormRun exact =
      run_norm(x.to(torch::kDouble), w.to(torch::kDouble), dy.to(torch::kDouble), NormKernel::hf);
  const double ulp = 1.0 / 256;
  auto worst = [&](const torch::Tensor& got) {
    return ((got.to(torch::kDouble) - exact.y).abs() / exact.y.abs().clamp_min(1e-3)).max().item<double>();
  };
  EXPECT_LE(worst(fused.y), 2 * ulp);
  EXPECT_LE(worst(hf.y), 2 * ulp);
}

TEST(RmsNorm, AModelOnTheFusedKernelTakesTheSameStep) {
  auto objective = make_objective("sft");
  Model model = tiny_model({});
  const Batch batch = padded_sft_batch(model, *objective);
  for (const std::string impl : {"plain", "streambp"}) {
    model.norm_kernel = NormKernel::hf;
    const StepResult hf = run_step(impl, model, batch, *objective, {5, 4});
    model.norm_kernel = NormKernel::fused;
    const StepResult fused = run_step(impl, model, batch, *objective, {5, 4});
    expect_same_gradients(hf, fused, 1e-11, impl + " fused vs hf norm");
  }
}

TEST(RmsNorm, KernelNamesAndDefaults) {
  EXPECT_EQ(parse_norm_kernel("hf"), NormKernel::hf);
  EXPECT_EQ(parse_norm_kernel("fused"), NormKernel::fused);
  EXPECT_STREQ(norm_kernel_name(NormKernel::fused), "fused");
  EXPECT_EQ(default_norm_kernel(torch::Device(torch::kCPU)), NormKernel::hf);
  EXPECT_EQ(default_norm_kernel(torch::Device(torch::kCUDA, 0)), NormKernel::fused);
  try {
    parse_norm_kernel("apex");
    ADD_FAILURE() << "accepted apex";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'apex' (valid: hf, fused)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bpbench::testing::test_norm
