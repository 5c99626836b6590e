// test_device_partial_attention.cpp: the ring's block pairs on CUDA (harness/model/attention_partial.h),
// skipped with a one-line reason where no GPU is present; compiled in every CUDA build.
//
// bfloat16 with a head of 64 picks FlashAttention-2's pair (PartialKernel::cuda_flash; the test checks the
// pick). A sequence of three unequal blocks, as the ring splits it: every query block's pairs (its diagonal
// causal, the earlier blocks whole) merged by logsumexp into one output, then each pair's backward given the
// merged output and logsumexp, its dQ, dK, dV added up. The reference is whole-sequence causal attention in
// float64 on the CPU from the same bfloat16 inputs; the flash pairs and the math form of the same pairs (in
// bfloat16 on the GPU) are both held to 2e-2 relative L2, and the flash pairs to no worse than twice the
// math form's error: bfloat16 rounding, not a wrong merge or a wrong pair.
#include <gtest/gtest.h>

#include <vector>

#include "harness/model/attention_partial.h"
#include "harness/model/ops.h"
#include "profiles/cuda_build.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_device_partial_attention {
namespace {

#define REQUIRE_GPU() \
  if (profiles::cuda_device_count() == 0) GTEST_SKIP() << profiles::no_gpu_reason() << ": GPU test skipped"

double relative(const torch::Tensor& got, const torch::Tensor& want) {
  const auto g = got.to(torch::kCPU, torch::kDouble), w = want.to(torch::kCPU, torch::kDouble);
  return (g - w).norm().item<double>() / w.norm().item<double>();
}

// Output, dQ, dK, dV of the blocks' pairs on `kernel`: q, k, v, dO (N, H, T, hd) split at `sizes`.
std::vector<torch::Tensor> by_pairs(const std::vector<torch::Tensor>& in, const std::vector<int64_t>& sizes,
                                    double scale, PartialKernel kernel) {
  const auto &q = in[0], &k = in[1], &v = in[2], &grad_out = in[3];
  std::vector<int64_t> starts = {0};
  for (int64_t s : sizes) starts.push_back(starts.back() + s);
  auto block = [&](const torch::Tensor& t, size_t i) { return t.narrow(2, starts[i], sizes[i]); };
  auto mask_of = [](size_t key, size_t query) {
    return key == query ? KeyBlockMask::causal : KeyBlockMask::all;
  };
  auto out = torch::empty_like(q);
  auto lse = torch::empty(q.sizes().slice(0, 3), q.options().dtype(torch::kFloat));
  for (size_t a = 0; a < sizes.size(); ++a) {
    const PartialAttention merged{block(out, a), block(lse, a)};
    for (size_t j = a + 1; j-- > 0;) {
      const auto pair =
          partial_attention(block(q, a), block(k, j), block(v, j), scale, mask_of(j, a), kernel);
      if (j == a) {
        merged.out.copy_(pair.out);
        merged.lse.copy_(pair.lse);
      } else {
        merge_partial(merged, pair);
      }
    }
  }
  auto dq = torch::zeros(q.sizes(), q.options().dtype(torch::kFloat));
  auto dk = torch::zeros(k.sizes(), dq.options()), dv = torch::zeros(v.sizes(), dq.options());
  for (size_t a = 0; a < sizes.size(); ++a)
    for (size_t j = 0; j <= a; ++j) {
      auto [dq_pair, dk_pair, dv_pair] =
          partial_attention_backward(block(grad_out, a), block(q, a), block(k, j), block(v, j), block(out, a),
                                     block(lse, a), scale, mask_of(j, a), kernel);
      block(dq, a).add_(dq_pair);
      block(dk, j).add_(dk_pair);
      block(dv, j).add_(dv_pair);
    }
  return {out, dq, dk, dv};
}

TEST(DevicePartialAttention, FlashPairsMergeToWholeSequenceAttention) {
  REQUIRE_GPU();
  constexpr int64_t kN = 2, kHq = 8, kHkv = 2, kHd = 64;
  const std::vector<int64_t> sizes = {96, 160, 128};  // T = 384, unequal blocks
  const torch::Device cuda(torch::kCUDA);
  ASSERT_EQ(partial_kernel_for(cuda, torch::kBFloat16, kHd), PartialKernel::cuda_flash);
  torch::manual_seed(11);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16);
  std::vector<torch::Tensor> in = {torch::randn({kN, kHq, 384, kHd}).to(bf16.dtype()),
                                   torch::randn({kN, kHkv, 384, kHd}).to(bf16.dtype()),
                                   torch::randn({kN, kHkv, 384, kHd}).to(bf16.dtype()),
                                   torch::randn({kN, kHq, 384, kHd}).to(bf16.dtype())};
  const double scale = 1.0 / 8.0;
  // The reference: float64 whole-sequence causal attention on the CPU from the same bfloat16 values.
  auto q = in[0].to(torch::kDouble).requires_grad_(), k = in[1].to(torch::kDouble).requires_grad_(),
       v = in[2].to(torch::kDouble).requires_grad_();
  auto want = causal_attention(q, k, v, 0, scale).view({kN, 384, kHq, kHd}).transpose(1, 2);
  want.backward(in[3].to(torch::kDouble));
  const std::vector<torch::Tensor> reference = {want.detach(), q.grad(), k.grad(), v.grad()};

  std::vector<torch::Tensor> on_gpu;
  for (const auto& t : in) on_gpu.push_back(t.to(cuda));
  const auto flash = by_pairs(on_gpu, sizes, scale, PartialKernel::cuda_flash);
  const auto math = by_pairs(on_gpu, sizes, scale, PartialKernel::math);
  const char* names[] = {"output", "dQ", "dK", "dV"};
  for (size_t i = 0; i < 4; ++i) {
    const double flash_error = relative(flash[i], reference[i]), math_error = relative(math[i], reference[i]);
    EXPECT_LT(flash_error, 2e-2) << names[i];
    EXPECT_LT(math_error, 2e-2) << names[i];
    EXPECT_LE(flash_error, 2 * math_error + 1e-3)
        << names[i] << ": flash " << flash_error << ", math " << math_error;
  }
}

}  // namespace
}  // namespace bpbench::testing::test_device_partial_attention
