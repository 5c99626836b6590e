// test_latent_streambp.cpp: StreamBP through multi-head latent attention keeps the latent (Note [StreamBP
// through the latent], harness/model/latent_attention.h). One layer's backward of tiny-deepseek at two
// lengths, under the tracking allocator: what its K/V side holds and what the whole layer backward holds
// above its inputs both grow by the latent rows and their gradients a token, (kv_lora_rank +
// qk_rope_head_dim) x (element + accumulator bytes), not by the expanded K and V (2 x Hq x hd of each). The
// checkpointed forward of a layer (Model::layer_in_chunks) likewise grows by its output and the latent rows.
// That streambp stays exact on MLA is tests/model/test_hf_oracle.cpp's (against transformers).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>

#include "harness/model/model.h"
#include "impls/machinery/layerwise.h"
#include "profiles/memory.h"

namespace bpbench::test_latent_streambp {
namespace {

using profiles::Category;
using profiles::MemoryRecorder;

struct LayerBackwardBytes {
  int64_t kv_high = 0;     // the most the K/V side (category kv) held at once
  int64_t above_base = 0;  // the layer backward's peak above what was alive when it began
};

LayerBackwardBytes layer_backward_bytes(const Model& m, int64_t layer, int64_t T, int64_t chunk) {
  const int64_t N = 2;
  torch::manual_seed(7);
  const auto options = torch::TensorOptions().dtype(m.dtype());
  auto x = torch::randn({N, T, m.config.hidden}, options).requires_grad_(true);
  auto dy = torch::randn({N, T, m.config.hidden}, options);
  MemoryRecorder& rec = MemoryRecorder::instance();
  rec.reset_peak();
  const int64_t base = rec.live_bytes();
  rec.start_timeline();
  {
    const torch::Tensor dx = streambp_layer_backward(m, layer, x, dy, chunk);
    EXPECT_TRUE(dx.defined());
  }
  const auto timeline = rec.stop_timeline();
  LayerBackwardBytes out;
  for (const auto& point : timeline.points)
    out.kv_high = std::max(out.kv_high, point.by_category[static_cast<int>(Category::kv)]);
  out.above_base = rec.peak_bytes() - base;
  return out;
}

TEST(LatentStreamBP, ALayerBackwardHoldsTheLatentRowsAndTheirGradientsAToken) {
  const ModelConfig c = find_model_preset("tiny-deepseek");
  const ModelConfig::Mla& mla = *c.mla;
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    Model m = Model::random(c, torch::TensorOptions().dtype(dtype), 11);
    const int64_t s = dtype == torch::kFloat ? 4 : 2, acc = 4;  // the accumulators: float32 for bfloat16
    const int64_t N = 2, chunk = 16, T1 = 64, T2 = 160;
    // Layer 1 is routed, layer 0 dense: the K/V side is the same for both. A first run makes the weights'
    // .grad, which then belong to the base of both measured runs.
    layer_backward_bytes(m, 1, T1, chunk);
    const LayerBackwardBytes short_run = layer_backward_bytes(m, 1, T1, chunk);
    const LayerBackwardBytes long_run = layer_backward_bytes(m, 1, T2, chunk);
    const int64_t latent_per_token = N * (mla.kv_lora_rank + mla.qk_rope_head_dim) * (s + acc);
    const int64_t expanded_per_token = N * 2 * c.heads * c.head_dim * (s + acc);
    SCOPED_TRACE(c10::toString(dtype));
    EXPECT_EQ(long_run.kv_high - short_run.kv_high, (T2 - T1) * latent_per_token);
    EXPECT_EQ(long_run.above_base - short_run.above_base, (T2 - T1) * latent_per_token);
    EXPECT_LT(latent_per_token * 4, expanded_per_token);  // tiny's latent: 12 values against 80 expanded
    std::cout << c10::toString(dtype) << ": K/V side " << short_run.kv_high << " -> " << long_run.kv_high
              << " bytes, layer backward above its inputs " << short_run.above_base << " -> "
              << long_run.above_base << " (T " << T1 << " -> " << T2 << "; expanded K, V and their "
              << "gradients would add " << (T2 - T1) * expanded_per_token << ")\n";
  }
}

// The peak above its input of one layer's no-grad forward in chunks of `chunk` rows.
int64_t layer_forward_bytes(const Model& m, int64_t layer, int64_t T, int64_t chunk) {
  const int64_t N = 2;
  torch::manual_seed(7);
  auto x = torch::randn({N, T, m.config.hidden}, torch::TensorOptions().dtype(m.dtype()));
  MemoryRecorder& rec = MemoryRecorder::instance();
  rec.reset_peak();
  const int64_t base = rec.live_bytes();
  { const torch::Tensor y = m.layer_in_chunks(layer, x, chunk); }
  return rec.peak_bytes() - base;
}

TEST(LatentStreamBP, TheCheckpointedForwardHoldsTheLatentRowsNotKAndV) {
  const ModelConfig c = find_model_preset("tiny-deepseek");
  const ModelConfig::Mla& mla = *c.mla;
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const Model m = Model::random(c, torch::TensorOptions().dtype(dtype), 11);
    const int64_t s = dtype == torch::kFloat ? 4 : 2, N = 2, chunk = 16, T1 = 64, T2 = 160;
    SCOPED_TRACE(c10::toString(dtype));
    // The layer's output and the latent rows grow with T; a chunk's key blocks, of `chunk` keys each, do not.
    EXPECT_EQ(layer_forward_bytes(m, 1, T2, chunk) - layer_forward_bytes(m, 1, T1, chunk),
              (T2 - T1) * N * (c.hidden + mla.kv_lora_rank + mla.qk_rope_head_dim) * s);
  }
}

}  // namespace
}  // namespace bpbench::test_latent_streambp
