// test_device_fused_strategies.cpp: every strategy through the fused CUDA attention kernels (skipped with a
// one-line reason where no GPU is present; compiled in every CUDA build).
//
// tiny's head size (6) sends every CUDA cell to the math kernel, so the strategy-level tests in
// test_device.cpp never reach flash or the memory-efficient kernel. Here tiny gets a preset-sized head (64):
// bfloat16 runs flash and float32 the efficient kernel (the test checks the pick), GQA groups of 1, 2 and 4,
// an odd length with partitions that leave a short last chunk, so a StreamBP chunk hands the kernels K/V
// narrowed to its first e keys (c < e, bottom-right causal).
//
// The reference is plain BP in float64 on the CPU (exact). GPU gradients are compared with tolerances, never
// bitwise: flash's backward accumulates dQ with atomics (not deterministic), and chunking changes the order
// of the sums. float32: every strategy within 1e-4 (relative L2, per parameter). bfloat16: no strategy
// further from the reference than twice plain BP's own bfloat16 error plus 1e-2, per parameter: a strategy
// may round differently from plain, not worse.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "harness/model/attention_kernels.h"
#include "harness/objectives/objective.h"
#include "profiles/cuda_build.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_device_fused_strategies {
namespace {

#define REQUIRE_GPU() \
  if (profiles::cuda_device_count() == 0) GTEST_SKIP() << profiles::no_gpu_reason() << ": GPU test skipped"

constexpr int64_t kHeadDim = 64;
constexpr int64_t kSeqLen = 301;        // odd: the last chunk is short
const Partitioning kPartition{64, 32};  // c = 64 rows per chunk, 32 per logits chunk
const char* kStrategies[] = {"plain", "checkpoint", "checkpoint-chunked-head", "mst", "streambp"};

ModelConfig tiny_with_head_dim_64(int64_t kv_heads) {
  ModelConfig c = find_model_preset("tiny");
  c.name = "tiny-hd64";
  c.head_dim = kHeadDim;
  c.kv_heads = kv_heads;
  c.validate();
  return c;
}

// The same weights as `cpu` (float64), cast to `dtype` on the GPU.
Model on_cuda(const ModelConfig& config, torch::ScalarType dtype, uint64_t seed) {
  Model m = Model::random(config, torch::TensorOptions().dtype(torch::kDouble), seed);
  torch::NoGradGuard no_grad;
  for (auto& p : m.named_parameters()) p.tensor.set_data(p.tensor.to(torch::kCUDA, dtype));
  // DeepSeek's router correction bias: float32, as a non-float64 model keeps it.
  for (auto& b : m.named_buffers()) b.tensor.set_data(b.tensor.to(torch::kCUDA, torch::kFloat));
  return m;
}

Batch batch_on_cuda(const Batch& cpu) {
  Batch b = cpu;
  b.input_ids = cpu.input_ids.to(torch::kCUDA);
  b.targets = cpu.targets.to(torch::kCUDA);
  return b;
}

// Relative L2 error of each gradient against `ref` (0 where both are 0).
std::vector<double> relative_errors(const StepResult& ref, const StepResult& got) {
  std::vector<double> out;
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    const double norm = ref.grads[i].norm().item<double>();
    const double diff = (got.grads[i].cpu() - ref.grads[i]).norm().item<double>();
    out.push_back(norm > 0 ? diff / norm : diff);
  }
  return out;
}

TEST(DeviceFused, EveryStrategyOnFlashAndEfficientMatchesFloat64PlainBp) {
  REQUIRE_GPU();
  const auto objective = make_objective("sft");
  for (const int64_t kv_heads : {int64_t{1}, int64_t{2}, int64_t{4}}) {  // tiny has 4 query heads
    const ModelConfig config = tiny_with_head_dim_64(kv_heads);
    Model cpu = Model::random(config, torch::TensorOptions().dtype(torch::kDouble), 7);
    const Batch batch = padded_sft_batch(cpu, *objective, kSeqLen);
    const StepResult exact = run_step("plain", cpu, batch, *objective, kPartition);

    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const auto kernel = attention_kernel_for(torch::Device(torch::kCUDA), dtype, kHeadDim);
      ASSERT_EQ(kernel, dtype == torch::kFloat ? AttentionKernel::efficient : AttentionKernel::flash)
          << "the test must reach the fused kernel it names";
      Model gpu = on_cuda(config, dtype, 7);
      const Batch on_gpu = batch_on_cuda(batch);
      std::vector<double> plain_errors;
      for (const std::string impl : kStrategies) {
        const std::string what = fmt::format(
            "{} {} GQA {}/{}", impl, dtype == torch::kFloat ? "float32 (efficient)" : "bfloat16 (flash)",
            config.heads, kv_heads);
        const StepResult got = run_step(impl, gpu, on_gpu, *objective, kPartition);
        const auto errors = relative_errors(exact, got);
        if (impl == std::string("plain")) plain_errors = errors;
        const double loss_error = std::abs(got.loss - exact.loss) / std::abs(exact.loss);
        for (size_t i = 0; i < errors.size(); ++i) {
          const double bound = dtype == torch::kFloat ? 1e-4 : 2 * plain_errors[i] + 1e-2;
          EXPECT_LE(errors[i], bound) << what << ": gradient of " << exact.names[i];
          EXPECT_TRUE(torch::isfinite(got.grads[i]).all().item<bool>()) << what << ": " << exact.names[i];
        }
        EXPECT_LE(loss_error, dtype == torch::kFloat ? 1e-5 : 1e-2) << what << ": loss";
      }
    }
  }
}

// Multi-head latent attention on the GPU (tiny-deepseek with a head of 12 + 4 and values of 8, so that
// bfloat16 runs flash and float32 the efficient kernel on the expanded, padded K and V): every strategy
// against float64 plain BP on the CPU, streambp through the latent (latent_attention.h: the partial kernels,
// flash's in bfloat16, the math form in float32, and the expansion's backward inside the node's).
TEST(DeviceFused, LatentAttentionEveryStrategyMatchesFloat64PlainBp) {
  REQUIRE_GPU();
  const auto objective = make_objective("sft");
  ModelConfig config = find_model_preset("tiny-deepseek");
  config.head_dim = 16;
  config.mla->v_head_dim = 8;
  config.validate();
  Model cpu = Model::random(config, torch::TensorOptions().dtype(torch::kDouble), 7);
  const Batch batch = padded_sft_batch(cpu, *objective, kSeqLen);
  const StepResult exact = run_step("plain", cpu, batch, *objective, kPartition);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    Model gpu = on_cuda(config, dtype, 7);
    const Batch on_gpu = batch_on_cuda(batch);
    std::vector<double> plain_errors;
    for (const std::string impl : kStrategies) {
      const std::string what = fmt::format("{} {} latent attention", impl, c10::toString(dtype));
      const StepResult got = run_step(impl, gpu, on_gpu, *objective, kPartition);
      const auto errors = relative_errors(exact, got);
      if (impl == std::string("plain")) plain_errors = errors;
      for (size_t i = 0; i < errors.size(); ++i) {
        const double bound = dtype == torch::kFloat ? 1e-4 : 2 * plain_errors[i] + 1e-2;
        EXPECT_LE(errors[i], bound) << what << ": gradient of " << exact.names[i];
      }
      EXPECT_LE(std::abs(got.loss - exact.loss) / std::abs(exact.loss), dtype == torch::kFloat ? 1e-5 : 1e-2)
          << what << ": loss";
    }
  }
}

// Hybrid linear attention on the GPU (tiny-qwen3.5 with heads of 64, so that its gated full layer runs flash
// in bfloat16 and the efficient kernel in float32): every strategy against float64 plain BP on the CPU,
// streambp through the recurrence (the gated delta rule's triangular solves on CUDA, its state in float32)
// with a short last chunk.
TEST(DeviceFused, HybridLinearAttentionEveryStrategyMatchesFloat64PlainBp) {
  REQUIRE_GPU();
  const auto objective = make_objective("sft");
  ModelConfig config = find_model_preset("tiny-qwen3.5");
  config.head_dim = kHeadDim;
  config.rotary_dim = kHeadDim / 4;
  config.validate();
  Model cpu = Model::random(config, torch::TensorOptions().dtype(torch::kDouble), 7);
  const Batch batch = padded_sft_batch(cpu, *objective, kSeqLen);
  const StepResult exact = run_step("plain", cpu, batch, *objective, kPartition);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    Model gpu = on_cuda(config, dtype, 7);
    const Batch on_gpu = batch_on_cuda(batch);
    std::vector<double> plain_errors;
    for (const std::string impl : kStrategies) {
      const std::string what = fmt::format("{} {} hybrid linear attention", impl, c10::toString(dtype));
      const StepResult got = run_step(impl, gpu, on_gpu, *objective, kPartition);
      const auto errors = relative_errors(exact, got);
      if (impl == std::string("plain")) plain_errors = errors;
      for (size_t i = 0; i < errors.size(); ++i) {
        const double bound = dtype == torch::kFloat ? 1e-4 : 2 * plain_errors[i] + 1e-2;
        EXPECT_LE(errors[i], bound) << what << ": gradient of " << exact.names[i];
      }
      EXPECT_LE(std::abs(got.loss - exact.loss) / std::abs(exact.loss), dtype == torch::kFloat ? 1e-5 : 1e-2)
          << what << ": loss";
    }
  }
}

}  // namespace
}  // namespace bpbench::testing::test_device_fused_strategies
