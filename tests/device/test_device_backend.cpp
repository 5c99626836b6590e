// test_device_backend.cpp: the GPU backend, on a GPU (skipped with a one-line reason elsewhere;
// compiled in every CUDA build):
//   - each CUDA attention kernel (flash for bfloat16, memory-efficient for float32, math for float64) equals
//     plainly masked attention in values and dQ/dK/dV for whole sequences, StreamBP chunks (c < e,
//     bottom-right), single rows and GQA groups of 1, 2 and 4; and under a sliding window (flash's left
//     window for bfloat16, the math kernel for float32 and float64), chunks with keys cut at their window;
//   - the CUDA recorder: live, peak and per-category bytes follow the caching allocator, block for block;
//     a budget turns an allocation past it into c10::OutOfMemoryError and writes the memory_viz snapshot;
//   - CUPTI activity: a copy and a matrix product show as a memcpy and kernels, inside the collection window.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <tuple>
#include <vector>

#include "harness/model/attention_kernels.h"
#include "harness/model/ops.h"
#include "profiles/cuda_build.h"
#include "profiles/device_activity.h"
#include "profiles/memory.h"
#include "profiles/recorder.h"
#include "tests/support/attention_reference.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_device_backend {
namespace {

#define REQUIRE_GPU() \
  if (profiles::cuda_device_count() == 0) GTEST_SKIP() << profiles::no_gpu_reason() << ": GPU test skipped"

// (dtype, c, e, query heads per kv head)
class CudaAttention : public ::testing::TestWithParam<std::tuple<at::ScalarType, int64_t, int64_t, int64_t>> {
};

// causal_attention on CUDA against masked_attention in float64 on the same rounded inputs, laid out as the
// model lays them out ((N, rows, H, hd) storage viewed as (N, H, rows, hd)): values, and dQ/dK/dV under one
// upstream gradient, relative to each gradient's scale (bfloat16 gradients sum e products).
// With `sinks`, gpt-oss's attention sinks too (random logits, their gradient compared as well), and with
// `kv_grad_sink` dK, dV into a KvGradSink (StreamBP's flash backward by key blocks).
void expect_cuda_matches_masked(at::ScalarType dtype, int64_t n, int64_t c, int64_t e, int64_t group,
                                int64_t window, uint64_t seed, bool sinks = false,
                                bool kv_grad_sink = false) {
  const int64_t kv_heads = 2, hd = 64;
  torch::manual_seed(seed);
  const auto cpu = torch::TensorOptions().dtype(torch::kDouble);
  auto on_gpu = [&](const torch::Tensor& t) { return t.to(torch::kCUDA, dtype).detach().requires_grad_(); };
  auto q = on_gpu(torch::randn({n, c, kv_heads * group, hd}, cpu).transpose(1, 2));
  auto k = on_gpu(torch::randn({n, e, kv_heads, hd}, cpu).transpose(1, 2));
  auto v = on_gpu(torch::randn({n, e, kv_heads, hd}, cpu).transpose(1, 2));
  auto sink_logits = sinks ? on_gpu(torch::randn({kv_heads * group}, cpu) * 2) : torch::Tensor();
  // The reference sees exactly the rounded inputs the kernel sees.
  auto reference = [](const torch::Tensor& t) {
    return t.defined() ? t.detach().cpu().to(torch::kDouble).requires_grad_() : torch::Tensor();
  };
  auto q_ref = reference(q), k_ref = reference(k), v_ref = reference(v), sinks_ref = reference(sink_logits);
  KvGradSink grad_sink;
  if (kv_grad_sink) {
    k = k.detach();
    v = v.detach();
    grad_sink = {torch::zeros_like(k), torch::zeros_like(v)};
  }
  auto out = causal_attention(q, k, v, window, 0.0, grad_sink, sink_logits);
  auto expected = masked_attention(q_ref, k_ref, v_ref, window, sinks_ref);
  const double tol = dtype == torch::kBFloat16 ? 2e-2 : dtype == torch::kFloat ? 1e-4 : 1e-10;
  const std::string what =
      fmt::format("{} c={} e={} w={}{}{}",
                  attention_kernel_name(attention_kernel_for(q.device(), dtype, hd, window, sinks)), c, e,
                  window, sinks ? " sinks" : "", kv_grad_sink ? " into a KvGradSink" : "");
  EXPECT_TRUE(torch::allclose(out.cpu().to(torch::kDouble), expected, tol, tol))
      << what << " max error " << (out.cpu().to(torch::kDouble) - expected).abs().max().item<double>();
  auto upstream = torch::randn(expected.sizes(), cpu);
  out.backward(upstream.to(torch::kCUDA, dtype));
  expected.backward(upstream);
  std::vector<std::tuple<const char*, torch::Tensor, torch::Tensor>> grads{
      {"dQ", q.grad(), q_ref.grad()},
      {"dK", kv_grad_sink ? grad_sink.dk : k.grad(), k_ref.grad()},
      {"dV", kv_grad_sink ? grad_sink.dv : v.grad(), v_ref.grad()}};
  if (sinks) grads.emplace_back("d sinks", sink_logits.grad(), sinks_ref.grad());
  for (const auto& [name, got, want] : grads) {
    ASSERT_TRUE(got.defined()) << what << " " << name;
    const double scale = std::max(1.0, want.abs().max().item<double>());
    EXPECT_LE((got.cpu().to(torch::kDouble) - want).abs().max().item<double>(), 4 * tol * scale)
        << what << " " << name;
  }
}

TEST_P(CudaAttention, EqualsMaskedAttentionInValuesAndGradients) {
  REQUIRE_GPU();
  const auto [dtype, c, e, group] = GetParam();
  expect_cuda_matches_masked(dtype, /*n=*/2, c, e, group, /*window=*/0, /*seed=*/11);
}

// Sliding windows on CUDA: flash (bfloat16) with window_size_left = w - 1, the math kernel for float32/64.
TEST(CudaWindowedAttention, SlidingWindowEqualsMaskedAttentionInValuesAndGradients) {
  REQUIRE_GPU();
  for (const auto dtype : {torch::kBFloat16, torch::kFloat, torch::kDouble})
    for (const auto& [c, e, window] :
         {std::tuple<int64_t, int64_t, int64_t>{97, 97, 16}, {31, 131, 40}, {64, 103, 64}, {1, 50, 7}})
      expect_cuda_matches_masked(dtype, /*n=*/1, c, e, /*group=*/2, window, /*seed=*/13);
}

// gpt-oss's attention sinks through flash's logsumexp (bfloat16: attention_gpu.cpp's FlashWithSinks and
// FlashSinkAttention) and the math kernel (float32, float64): whole sequences, chunks, a window, and dK, dV
// into a KvGradSink, against the reference's sink column.
TEST(CudaAttentionSinks, EqualTheSoftmaxWithASinkColumnInValuesAndEveryGradient) {
  REQUIRE_GPU();
  for (const auto dtype : {torch::kBFloat16, torch::kFloat, torch::kDouble})
    for (const auto& [c, e, window, into_sink] :
         {std::tuple<int64_t, int64_t, int64_t, bool>{128, 128, 0, false},
          {48, 128, 0, false},
          {48, 128, 0, true},
          {97, 97, 16, false},
          {31, 131, 40, true},
          {1, 50, 0, false}})
      expect_cuda_matches_masked(dtype, /*n=*/2, c, e, /*group=*/2, window, /*seed=*/19, /*sinks=*/true,
                                 into_sink);
}

std::string cuda_attention_name(
    const ::testing::TestParamInfo<std::tuple<at::ScalarType, int64_t, int64_t, int64_t>>& info) {
  const auto [dtype, c, e, group] = info.param;
  return std::string(dtype == torch::kBFloat16 ? "bf16"
                     : dtype == torch::kFloat  ? "f32"
                                               : "f64") +
         "_c" + std::to_string(c) + "_e" + std::to_string(e) + "_gqa" + std::to_string(group);
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, CudaAttention,
    ::testing::Combine(::testing::Values(torch::kBFloat16, torch::kFloat, torch::kDouble),
                       ::testing::Values(int64_t{1}, int64_t{48}, int64_t{128}),  // c = 1, c < e, c = e
                       ::testing::Values(int64_t{128}),
                       ::testing::Values(int64_t{1}, int64_t{2}, int64_t{4})),
    cuda_attention_name);

TEST(CudaRecorder, CategoriesAndPeakFollowTheCachingAllocator) {
  REQUIRE_GPU();
  profiles::Recorder& rec = profiles::recorder_for("cuda");
  rec.reset_peak();
  const int64_t before = rec.live_bytes();
  constexpr int64_t kMiB = 1 << 20;
  const auto before_categories = rec.peak_by_category();
  {
    torch::Tensor kv, activations;
    {
      profiles::MemoryScope scope(profiles::Category::kv);
      kv = torch::empty({8 * kMiB}, torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA));
    }
    {
      profiles::MemoryScope scope(profiles::Category::activations);
      activations =
          torch::empty({4 * kMiB}, torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA));
    }
    EXPECT_EQ(rec.live_bytes() - before, 12 * kMiB);  // multiples of 2 MiB: no rounding by the allocator
  }
  EXPECT_EQ(rec.live_bytes(), before);
  EXPECT_EQ(rec.peak_bytes() - before, 12 * kMiB);
  const auto at_peak = rec.peak_by_category();
  EXPECT_EQ(at_peak[static_cast<int>(profiles::Category::kv)] -
                before_categories[static_cast<int>(profiles::Category::kv)],
            8 * kMiB);
  EXPECT_EQ(at_peak[static_cast<int>(profiles::Category::activations)] -
                before_categories[static_cast<int>(profiles::Category::activations)],
            4 * kMiB);
  ASSERT_TRUE(rec.reserved_peak_bytes().has_value());
  EXPECT_GE(*rec.reserved_peak_bytes(), rec.peak_bytes());
}

TEST(CudaRecorder, ABudgetThrowsOutOfMemoryAndWritesTheSnapshot) {
  REQUIRE_GPU();
  profiles::Recorder& rec = profiles::recorder_for("cuda");
  TempDir tmp;
  const auto snapshot = (std::filesystem::path(tmp.path()) / "oom.memory_viz.pickle").string();
  rec.release_cached();
  rec.set_oom_snapshot_path(snapshot);
  rec.set_budget(64 << 20);
  EXPECT_THROW(torch::empty({256 << 20}, torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA)),
               c10::OutOfMemoryError);
  rec.set_budget(std::nullopt);
  rec.set_oom_snapshot_path("");
  rec.release_cached();
  ASSERT_TRUE(std::filesystem::exists(snapshot));
  EXPECT_GT(std::filesystem::file_size(snapshot), 0u);
}

TEST(DeviceActivity, CuptiSeesTheCopyAndTheKernelsInsideTheWindow) {
  REQUIRE_GPU();
  const auto host = torch::randn({512, 512});
  // cuBLAS's first matrix product creates its handle and workspace, which may copy to the device too: done
  // here, outside the window, so the window holds this test's one copy.
  const auto warm = torch::ones({64, 64}, torch::kCUDA);
  torch::mm(warm, warm);
  torch::cuda::synchronize();
  const auto origin = profiles::TraceClock::now();
  std::string why;
  ASSERT_TRUE(profiles::start_device_activity(&why)) << why;
  auto a = host.to(torch::kCUDA);
  auto b = torch::mm(a, a);
  torch::cuda::synchronize();
  const double window_ms =
      std::chrono::duration<double, std::milli>(profiles::TraceClock::now() - origin).count();
  const auto records = profiles::stop_device_activity(origin);

  int kernels = 0, copies = 0;
  for (const auto& r : records) {
    EXPECT_LE(r.begin_ms, r.end_ms) << r.name;
    // On the host's clock: inside the window (1 ms of slack for the two clocks' reading order).
    EXPECT_GE(r.begin_ms, -1.0) << r.name;
    EXPECT_LE(r.end_ms, window_ms + 1.0) << r.name;
    if (r.kind == "kernel") ++kernels;
    if (r.kind == "memcpy" && r.name == "memcpy HtoD") {
      ++copies;
      EXPECT_EQ(r.bytes, 512 * 512 * 4);
    }
  }
  EXPECT_GE(kernels, 1);
  EXPECT_EQ(copies, 1);
  EXPECT_TRUE(profiles::stop_device_activity(origin).empty());  // stopped: nothing more
}

}  // namespace
}  // namespace bpbench::testing::test_device_backend
