// test_recurrent_streambp.cpp: StreamBP through a Gated DeltaNet layer keeps the state entering each chunk
// and nothing of the T rows (Note [StreamBP through the recurrence], impls/machinery/recurrent_layer.h). One
// linear layer's backward of tiny-qwen3.5 at two lengths, under the tracking allocator, in chunks of 16 rows:
// what its carried side (category kv) holds and what the whole layer backward holds above its inputs both
// grow by the boundary states and conv halos of the added chunks, N (Hv dk dv f + (K - 1) C s) bytes each,
// and by nothing else; the layer's checkpointed forward (Model::layer_in_chunks) grows by its output alone.
// That streambp stays exact through the recurrence is tests/model/test_hf_oracle.cpp's (against transformers)
// and tests/impls/test_hybrid_exactness.cpp's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>

#include "harness/model/model.h"
#include "impls/machinery/recurrent_layer.h"
#include "profiles/memory.h"

namespace bpbench::test_recurrent_streambp {
namespace {

using profiles::Category;
using profiles::MemoryRecorder;

constexpr int64_t kN = 2, kChunk = 16, kT1 = 64, kT2 = 160;

struct LayerBackwardBytes {
  int64_t kv_high = 0;     // the most the carried side (category kv) held at once
  int64_t above_base = 0;  // the layer backward's peak above what was alive when it began
};

LayerBackwardBytes layer_backward_bytes(const Model& m, int64_t layer, int64_t T) {
  torch::manual_seed(7);
  const auto options = torch::TensorOptions().dtype(m.dtype());
  auto x = torch::randn({kN, T, m.config.hidden}, options).requires_grad_(true);
  auto dy = torch::randn({kN, T, m.config.hidden}, options);
  MemoryRecorder& rec = MemoryRecorder::instance();
  rec.reset_peak();
  const int64_t base = rec.live_bytes();
  rec.start_timeline();
  {
    const torch::Tensor dx = streambp_recurrent_layer_backward(m, layer, x, dy, kChunk);
    EXPECT_TRUE(dx.defined());
  }
  const auto timeline = rec.stop_timeline();
  LayerBackwardBytes out;
  for (const auto& point : timeline.points)
    out.kv_high = std::max(out.kv_high, point.by_category[static_cast<int>(Category::kv)]);
  out.above_base = rec.peak_bytes() - base;
  return out;
}

int64_t layer_forward_bytes(const Model& m, int64_t layer, int64_t T) {
  torch::manual_seed(7);
  auto x = torch::randn({kN, T, m.config.hidden}, torch::TensorOptions().dtype(m.dtype()));
  MemoryRecorder& rec = MemoryRecorder::instance();
  rec.reset_peak();
  const int64_t base = rec.live_bytes();
  { const torch::Tensor y = m.layer_in_chunks(layer, x, kChunk); }
  return rec.peak_bytes() - base;
}

TEST(RecurrentStreamBP, ALinearLayerBackwardHoldsABoundaryStateAChunkAndNoRows) {
  const ModelConfig c = find_model_preset("tiny-qwen3.5");
  const ModelConfig::LinearAttention& la = *c.linear_attention;
  ASSERT_TRUE(c.is_linear_layer(0));
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    Model m = Model::random(c, torch::TensorOptions().dtype(dtype), 11);
    const int64_t s = dtype == torch::kFloat ? 4 : 2, f = 4;  // the state is float32 under bfloat16
    // A first run makes the weights' .grad, which then belong to the base of both measured runs.
    layer_backward_bytes(m, 0, kT1);
    const LayerBackwardBytes short_run = layer_backward_bytes(m, 0, kT1);
    const LayerBackwardBytes long_run = layer_backward_bytes(m, 0, kT2);
    const int64_t per_boundary = kN * la.value_heads * la.key_dim * la.value_dim * f +
                                 kN * (la.conv_kernel - 1) * la.conv_channels() * s;
    const int64_t added_chunks = (kT2 - kT1) / kChunk;
    SCOPED_TRACE(c10::toString(dtype));
    // The kv category holds the kept states and halos alone, D = T / 16 of them.
    EXPECT_EQ(short_run.kv_high, (kT1 / kChunk) * per_boundary);
    EXPECT_EQ(long_run.kv_high - short_run.kv_high, added_chunks * per_boundary);
    EXPECT_EQ(long_run.above_base - short_run.above_base, added_chunks * per_boundary);
    // The rows a chunk's states stand in for: the layer's input and its gradient would be N c d s a chunk
    // each, its intermediates several times that.
    std::cout << c10::toString(dtype) << ": carried side " << short_run.kv_high << " -> " << long_run.kv_high
              << " bytes, layer backward above its inputs " << short_run.above_base << " -> "
              << long_run.above_base << " (T " << kT1 << " -> " << kT2 << ", " << per_boundary
              << " bytes a boundary)\n";
  }
}

TEST(RecurrentStreamBP, TheCheckpointedForwardOfALinearLayerHoldsItsOutputAlone) {
  const ModelConfig c = find_model_preset("tiny-qwen3.5");
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const Model m = Model::random(c, torch::TensorOptions().dtype(dtype), 11);
    const int64_t s = dtype == torch::kFloat ? 4 : 2;
    SCOPED_TRACE(c10::toString(dtype));
    EXPECT_EQ(layer_forward_bytes(m, 0, kT2) - layer_forward_bytes(m, 0, kT1),
              (kT2 - kT1) * kN * c.hidden * s);
  }
}

}  // namespace
}  // namespace bpbench::test_recurrent_streambp
