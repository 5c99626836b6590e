// test_attention.cpp: the model's one attention contract (harness/model/ops.h, causal_attention) against
// plainly written masked attention, values and gradients, in float64: whole sequences (c = e), StreamBP
// chunks (c < e, bottom-right aligned: query row i sees keys j <= i + e - c), single rows (c = 1), and GQA
// groups of 1, 2 and 4. Whatever kernel implements the contract must pass (on the CPU, PyTorch's fused
// kernel: attention_cpu.cpp); tests/device/test_device_backend.cpp checks the CUDA kernels the same way.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "harness/model/attention_kernels.h"
#include "harness/model/attention_partial.h"
#include "harness/model/attention_sinks.h"
#include "harness/model/ops.h"
#include "profiles/memory.h"
#include "tests/support/attention_reference.h"

namespace bpbench::testing::test_attention {
namespace {

// causal_attention against masked_attention in float64 on random inputs of these shapes: values, and dQ, dK
// and dV under one upstream gradient (so dK/dV summed over each GQA group are compared directly). Fills
// `used`, when given, with the inputs and the reference's output for further checks.
struct AttentionCase {
  torch::Tensor q, k, v, expected;
};
void expect_matches_masked_attention(int64_t c, int64_t e, int64_t group, int64_t window, uint64_t seed,
                                     AttentionCase* used = nullptr) {
  const int64_t n = 2, kv_heads = 2, hd = 8;
  torch::manual_seed(seed);
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  auto q = torch::randn({n, kv_heads * group, c, hd}, options).requires_grad_();
  auto k = torch::randn({n, kv_heads, e, hd}, options).requires_grad_();
  auto v = torch::randn({n, kv_heads, e, hd}, options).requires_grad_();
  auto q_ref = q.detach().clone().requires_grad_(), k_ref = k.detach().clone().requires_grad_(),
       v_ref = v.detach().clone().requires_grad_();
  auto out = causal_attention(q, k, v, window);
  auto expected = masked_attention(q_ref, k_ref, v_ref, window);
  if (used) *used = {q.detach(), k.detach(), v.detach(), expected.detach()};
  ASSERT_EQ(out.sizes(), expected.sizes());
  EXPECT_TRUE(torch::allclose(out, expected, 1e-12, 1e-12)) << (out - expected).abs().max().item<double>();
  auto upstream = torch::randn(out.sizes(), options);
  out.backward(upstream);
  expected.backward(upstream);
  for (const auto& [name, got, want] : {std::tuple{"dQ", q.grad(), q_ref.grad()},
                                        {"dK", k.grad(), k_ref.grad()},
                                        {"dV", v.grad(), v_ref.grad()}})
    EXPECT_TRUE(torch::allclose(got, want, 1e-12, 1e-12))
        << name << " max error " << (got - want).abs().max().item<double>();
}

// (c, e, query heads per kv head)
class CausalAttention : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t>> {};

TEST_P(CausalAttention, EqualsMaskedAttentionInValuesAndGradients) {
  const auto [c, e, group] = GetParam();
  expect_matches_masked_attention(c, e, group, /*window=*/0, /*seed=*/7);
}

// Sliding windows (Gemma 3's local layers): narrower than, equal to and wider than the queries, 1 (each row
// sees itself only), and as wide as the keys (no window in effect); whole sequences and chunks; GQA; query
// counts past the CPU kernel's banded block of 256 rows. Values and dQ/dK/dV in float64.
class WindowedAttention : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, int64_t>> {};

TEST_P(WindowedAttention, EqualsMaskedAttentionInValuesAndGradients) {
  const auto [c, e, group, window] = GetParam();
  AttentionCase t;
  expect_matches_masked_attention(c, e, group, window, /*seed=*/11, &t);
  // The same on the math kernel (CUDA's for float32 windows), run here on the CPU.
  auto math = math_attention(t.q, t.k, t.v, 1.0 / std::sqrt(8.0), window, {})
                  .transpose(1, 2)
                  .reshape(t.expected.sizes());
  EXPECT_TRUE(torch::allclose(math, t.expected, 1e-12, 1e-12)) << "math kernel";
}

INSTANTIATE_TEST_SUITE_P(Shapes, WindowedAttention,
                         ::testing::Values(std::tuple{13, 13, 2, 4}, std::tuple{13, 13, 1, 1},
                                           std::tuple{13, 13, 4, 13}, std::tuple{5, 17, 2, 3},
                                           std::tuple{5, 17, 2, 5}, std::tuple{5, 17, 1, 9},
                                           std::tuple{1, 9, 2, 4}, std::tuple{300, 300, 2, 37},
                                           std::tuple{290, 333, 2, 300}));

// gpt-oss's attention sinks (attention_sinks.h) through every CPU path: whole sequences, StreamBP chunks,
// windows, single rows, GQA, and dK, dV into a KvGradSink (StreamBP's backward, key block by key block)
// or through autograd. Values and every gradient, the sink logits' included, against the reference's sink
// column in float64; then the math kernel (CUDA's for float32 with sinks) the same.
struct SinksCase {
  int64_t c, e, group, window;
  bool kv_grad_sink;
};
class AttentionSinks : public ::testing::TestWithParam<SinksCase> {};

TEST_P(AttentionSinks, EqualTheSoftmaxWithASinkColumnInValuesAndEveryGradient) {
  const auto [c, e, group, window, kv_grad_sink] = GetParam();
  const int64_t n = 2, kv_heads = 2, hd = 8, hq = kv_heads * group;
  torch::manual_seed(17);
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  auto q = torch::randn({n, hq, c, hd}, options), k = torch::randn({n, kv_heads, e, hd}, options),
       v = torch::randn({n, kv_heads, e, hd}, options);
  const auto sinks = torch::randn({hq}, options) * 2;  // some sinks large, some small against the scores
  const auto upstream = torch::randn({n, c, hq * hd}, options);
  auto leaf = [](const torch::Tensor& t) { return t.detach().clone().requires_grad_(); };
  auto q_ref = leaf(q), k_ref = leaf(k), v_ref = leaf(v), sinks_ref = leaf(sinks);
  auto expected = masked_attention(q_ref, k_ref, v_ref, window, sinks_ref);
  expected.backward(upstream);
  auto expect_close = [](const char* what, const torch::Tensor& got, const torch::Tensor& want) {
    ASSERT_TRUE(got.defined()) << what;
    EXPECT_TRUE(torch::allclose(got, want, 1e-12, 1e-12))
        << what << " max error " << (got - want).abs().max().item<double>();
  };
  for (const bool math : {false, true}) {
    SCOPED_TRACE(math ? "math kernel" : "causal_attention");
    auto q_got = leaf(q), sinks_got = leaf(sinks);
    torch::Tensor k_got = leaf(k), v_got = leaf(v), out;
    KvGradSink sink;
    if (kv_grad_sink && !math) {
      k_got = k.clone();
      v_got = v.clone();
      sink = {torch::zeros_like(k), torch::zeros_like(v)};
    }
    if (math)
      out = math_attention(q_got, k_got, v_got, 1.0 / std::sqrt(8.0), window, sinks_got)
                .transpose(1, 2)
                .reshape(expected.sizes());
    else
      out = causal_attention(q_got, k_got, v_got, window, 0.0, sink, sinks_got);
    expect_close("output", out, expected);
    out.backward(upstream);
    expect_close("dQ", q_got.grad(), q_ref.grad());
    expect_close("dK", sink.defined() ? sink.dk : k_got.grad(), k_ref.grad());
    expect_close("dV", sink.defined() ? sink.dv : v_got.grad(), v_ref.grad());
    expect_close("d sinks", sinks_got.grad(), sinks_ref.grad());
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionSinks,
                         ::testing::Values(SinksCase{13, 13, 2, 0, false}, SinksCase{5, 17, 2, 0, false},
                                           SinksCase{5, 17, 1, 0, true}, SinksCase{13, 13, 4, 0, true},
                                           SinksCase{1, 9, 2, 0, false}, SinksCase{13, 13, 2, 4, false},
                                           SinksCase{5, 17, 2, 3, true}, SinksCase{300, 300, 1, 37, false}));

// The rule CUDA's flash path runs (attention_gpu.cpp), written with the CPU's pieces: the kernel's (out, lse)
// without the sink, the sink merged in (merge_attention_sinks), the kernel's backward handed the merged out
// and lse, and the sink logits' gradient (attention_sinks_grad). The same numbers as the sink column.
TEST(AttentionSinks, MergedIntoTheLogsumexpTheKernelsBackwardIsExact) {
  const int64_t n = 2, hq = 4, kv_heads = 2, c = 7, e = 7, hd = 8;
  torch::manual_seed(23);
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  const auto q = torch::randn({n, hq, c, hd}, options), k = torch::randn({n, kv_heads, e, hd}, options),
             v = torch::randn({n, kv_heads, e, hd}, options), sinks = torch::randn({hq}, options);
  const auto upstream = torch::randn({n, hq, c, hd}, options);
  auto q_ref = q.clone().requires_grad_(), k_ref = k.clone().requires_grad_(),
       v_ref = v.clone().requires_grad_(), sinks_ref = sinks.clone().requires_grad_();
  masked_attention(q_ref, k_ref, v_ref, 0, sinks_ref).backward(upstream.transpose(1, 2).reshape({n, c, -1}));
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (const auto kernel : {PartialKernel::cpu_fused, PartialKernel::math}) {
    PartialAttention merged = partial_attention(q, k, v, scale, KeyBlockMask::causal, kernel);
    merge_attention_sinks(merged.out, merged.lse, sinks);
    const auto want = masked_attention(q, k, v, 0, sinks).view({n, c, hq, hd}).transpose(1, 2);
    EXPECT_TRUE(torch::allclose(merged.out, want, 1e-12, 1e-12));
    auto [dq, dk, dv] = partial_attention_backward(upstream, q, k, v, merged.out, merged.lse, scale,
                                                   KeyBlockMask::causal, kernel);
    const auto d_sinks = attention_sinks_grad(upstream, merged.out, merged.lse, sinks);
    for (const auto& [name, got, ref] : {std::tuple{"dQ", dq, q_ref.grad()},
                                         {"dK", dk, k_ref.grad()},
                                         {"dV", dv, v_ref.grad()},
                                         {"d sinks", d_sinks, sinks_ref.grad()}})
      EXPECT_TRUE(torch::allclose(got, ref, 1e-12, 1e-12))
          << name << " max error " << (got - ref).abs().max().item<double>();
  }
}

// Where no kernel is fused for them, sinks take the math kernel: CUDA float32 (the efficient kernel's node
// has no place for them); bfloat16 keeps flash.
TEST(AttentionSinks, KernelChoice) {
  const torch::Device cuda(torch::kCUDA, 0);
  EXPECT_EQ(attention_kernel_for(cuda, torch::kFloat, 64, 0, /*sinks=*/true), AttentionKernel::math);
  EXPECT_EQ(attention_kernel_for(cuda, torch::kBFloat16, 64, 128, /*sinks=*/true), AttentionKernel::flash);
  EXPECT_EQ(attention_kernel_for(torch::Device(torch::kCPU), torch::kFloat, 64, 0, true),
            AttentionKernel::cpu_fused);
}

// A sliding chunk needs keys only from its first row's window start: cut there, it equals the same rows of
// the whole sequence, which is what StreamBP will rely on.
TEST(WindowedAttention, AChunkWithKeysCutAtItsWindowEqualsItsRowsOfTheWholeSequence) {
  const int64_t e = 29, window = 6;
  torch::manual_seed(5);
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  auto q = torch::randn({1, 4, e, 8}, options), k = torch::randn({1, 2, e, 8}, options),
       v = torch::randn({1, 2, e, 8}, options);
  auto whole = causal_attention(q, k, v, window);  // (1, e, 4 * 8)
  for (int64_t s : {0, 3, 10, 23}) {
    const int64_t end = std::min<int64_t>(e, s + 7), key0 = std::max<int64_t>(0, s - window + 1);
    auto chunk = causal_attention(q.narrow(2, s, end - s), k.narrow(2, key0, end - key0),
                                  v.narrow(2, key0, end - key0), window);
    EXPECT_TRUE(torch::allclose(chunk, whole.narrow(1, s, end - s), 1e-12, 1e-12)) << "chunk at " << s;
  }
}

TEST(WindowedAttention, VisiblePairsCountEachRowsWindow) {
  for (int64_t c : {1, 4, 13})
    for (int64_t e : {13, 20})
      for (int64_t w : {0, 1, 3, 13, 40}) {
        if (c > e) continue;
        int64_t pairs = 0;
        for (int64_t i = 0; i < c; ++i) {
          const int64_t p = e - c + i;
          pairs += w > 0 ? std::min(w, p + 1) : p + 1;
        }
        EXPECT_EQ(visible_pairs(c, e, w), pairs) << c << " " << e << " " << w;
        EXPECT_GE(executed_pairs(AttentionKernel::cpu_fused, c, e, w), pairs);
      }
}

// A StreamBP chunk, rows [s, e) against keys [0, e), is exactly those rows of whole-sequence attention over
// [0, e): the alignment checked against the model itself, independently of the reference above.
TEST(CausalAttention, AChunkEqualsItsRowsOfTheWholeSequence) {
  const int64_t e = 11;
  torch::manual_seed(3);
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  auto q = torch::randn({1, 4, e, 8}, options), k = torch::randn({1, 2, e, 8}, options),
       v = torch::randn({1, 2, e, 8}, options);
  auto whole = causal_attention(q, k, v);  // (1, e, 4 * 8)
  for (int64_t s : {0, 1, 6, 10}) {
    auto chunk = causal_attention(q.narrow(2, s, e - s), k, v);
    EXPECT_TRUE(torch::allclose(chunk, whole.narrow(1, s, e - s), 1e-12, 1e-12)) << "rows from " << s;
  }
}

// The point of the fused kernels: no score matrix. A chunk of 64 queries over 4096 keys with 8 heads would
// need 16 MiB for one float64 score matrix; forward and backward together must stay far below it (what they
// do allocate: output, logsumexp, dQ/dK/dV and a per-thread scratch block of at most 256 x 512).
TEST(CausalAttention, NeverAllocatesAScoreMatrix) {
  auto& recorder = profiles::MemoryRecorder::instance();
  const int64_t n = 1, heads = 8, kv_heads = 2, c = 64, e = 4096, hd = 16;
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  auto q = torch::randn({n, heads, c, hd}, options).requires_grad_();
  auto k = torch::randn({n, kv_heads, e, hd}, options).requires_grad_();
  auto v = torch::randn({n, kv_heads, e, hd}, options).requires_grad_();
  auto upstream = torch::randn({n, c, heads * hd}, options);
  recorder.reset_peak();
  const int64_t before = recorder.live_bytes();
  causal_attention(q, k, v).backward(upstream);
  const int64_t scores = n * heads * c * e * 8;
  EXPECT_LT(recorder.peak_bytes() - before, scores / 4)
      << "attention allocated " << recorder.peak_bytes() - before << " bytes; one score matrix is " << scores;

  // The bound tells the kernels apart: the math kernel (kept for float64 on CUDA) goes above it.
  q.mutable_grad().reset();
  recorder.reset_peak();
  const int64_t before_math = recorder.live_bytes();
  math_attention(q, k, v, 0.25, 0, {}).transpose(1, 2).reshape({n, c, heads * hd}).backward(upstream);
  EXPECT_GE(recorder.peak_bytes() - before_math, scores);
}

// Which kernel runs where: the CPU always fuses; CUDA picks flash for half precision, the memory-efficient
// kernel for float32 (and half-precision head sizes flash does not take), and math for float64 only.
TEST(CausalAttention, KernelChoiceByDeviceAndDtype) {
  const torch::Device cpu(torch::kCPU), cuda(torch::kCUDA, 0);
  for (auto dtype : {torch::kDouble, torch::kFloat, torch::kBFloat16})
    EXPECT_EQ(attention_kernel_for(cpu, dtype, 6), AttentionKernel::cpu_fused);
  EXPECT_EQ(attention_kernel_for(cuda, torch::kBFloat16, 128), AttentionKernel::flash);
  EXPECT_EQ(attention_kernel_for(cuda, torch::kHalf, 64), AttentionKernel::flash);
  EXPECT_EQ(attention_kernel_for(cuda, torch::kBFloat16, 512), AttentionKernel::efficient);
  EXPECT_EQ(attention_kernel_for(cuda, torch::kFloat, 128), AttentionKernel::efficient);
  EXPECT_EQ(attention_kernel_for(cuda, torch::kDouble, 128), AttentionKernel::math);
  EXPECT_EQ(attention_kernel_for(cuda, torch::kBFloat16, 6), AttentionKernel::math);
  EXPECT_STREQ(attention_kernel_name(AttentionKernel::flash), "flash");
}

// A chunk's dQ is a sum over key blocks when its dK, dV go to a sink (StreamBP's backward): in bfloat16 that
// sum is kept in float32 and rounded once, so its error against float64 does not grow with the number of
// blocks. Summed in bfloat16, each block would add a rounding of the partial sum: about sqrt(blocks / 2)
// times one rounding, 4 times at 32 blocks. Softmax near uniform (small q, k) spreads dQ over every block.
double sink_dq_error_in_bfloat16(int64_t blocks) {
  const int64_t c = 16, heads = 2, hd = 8,
                e = c + (blocks - 1) * kMinSinkKeyBlock;  // prefix blocks + diagonal
  torch::manual_seed(11);
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  // The inputs as bfloat16 holds them, so that the reference starts from the very same numbers.
  auto as_bf16 = [](const torch::Tensor& t) { return t.to(torch::kBFloat16).to(torch::kDouble); };
  const auto q = as_bf16(0.1 * torch::randn({1, heads, c, hd}, f64));
  const auto k = as_bf16(0.1 * torch::randn({1, heads, e, hd}, f64));
  const auto v = as_bf16(torch::randn({1, heads, e, hd}, f64));
  const auto upstream = as_bf16(torch::randn({1, c, heads * hd}, f64));
  auto q_ref = q.clone().requires_grad_();
  masked_attention(q_ref, k, v).backward(upstream);
  auto q_bf16 = q.to(torch::kBFloat16).requires_grad_();
  const auto k_bf16 = k.to(torch::kBFloat16), v_bf16 = v.to(torch::kBFloat16);
  const KvGradSink sink{torch::zeros_like(k_bf16), torch::zeros_like(v_bf16)};
  causal_attention(q_bf16, k_bf16, v_bf16, 0, 0.0, sink).backward(upstream.to(torch::kBFloat16));
  EXPECT_EQ(q_bf16.grad().scalar_type(), torch::kBFloat16);
  return ((q_bf16.grad().to(torch::kDouble) - q_ref.grad()).norm() / q_ref.grad().norm()).item<double>();
}

TEST(CausalAttention, ASinksDqInBfloat16IsRoundedOnceWhateverTheNumberOfKeyBlocks) {
  const double two_blocks = sink_dq_error_in_bfloat16(2), many_blocks = sink_dq_error_in_bfloat16(32);
  EXPECT_LT(many_blocks, 1.5 * two_blocks) << "2 blocks: " << two_blocks << ", 32 blocks: " << many_blocks;
  EXPECT_LT(many_blocks, 4e-3);  // about one bfloat16 rounding (2^-8 = 3.9e-3 relative)
}

std::string name_of(const ::testing::TestParamInfo<std::tuple<int64_t, int64_t, int64_t>>& info) {
  const auto [c, e, group] = info.param;
  return "c" + std::to_string(c) + "_e" + std::to_string(e) + "_gqa" + std::to_string(group);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CausalAttention,
                         ::testing::Values(std::tuple{int64_t{13}, int64_t{13}, int64_t{1}},  // c = e
                                           std::tuple{int64_t{13}, int64_t{13}, int64_t{2}},
                                           std::tuple{int64_t{13}, int64_t{13}, int64_t{4}},
                                           std::tuple{int64_t{5}, int64_t{13}, int64_t{1}},  // c < e
                                           std::tuple{int64_t{5}, int64_t{13}, int64_t{2}},
                                           std::tuple{int64_t{5}, int64_t{13}, int64_t{4}},
                                           std::tuple{int64_t{1}, int64_t{13}, int64_t{1}},  // c = 1
                                           std::tuple{int64_t{1}, int64_t{13}, int64_t{2}},
                                           std::tuple{int64_t{1}, int64_t{13}, int64_t{4}},
                                           std::tuple{int64_t{1}, int64_t{1}, int64_t{4}}),
                         name_of);

}  // namespace
}  // namespace bpbench::testing::test_attention
