// test_estimate_hybrid.cpp: the estimate through Gated DeltaNet layers (Qwen3.5) against the tracking
// allocator, and what it refuses: streambp's by partitions (Note [StreamBP through the recurrence],
// recurrent_layer.h; the layer's terms: Note [Gated DeltaNet buffers], linear_memory_terms.h) and plain's,
// checkpoint's and mst's over all rows (Note [A Gated DeltaNet block over all rows]).
//
// streambp, measured 2026-12-04 on small-qwen3.5 with a 512-token vocabulary (the layers set the peak): every
// cell 1,044 bytes under (2,088 in float64; a d-wide norm weight gradient and five scalars), but bfloat16 at
// N = 2, T = 200, c = 64, 0.9% over (linear_chunk_backward's bound above the MLP backward there); with LoRA
// (rank 4) within 0.04%, but bfloat16 at up to 64 rows a chunk, 2.0 to 5.3% over (the same bound).
// tiny-qwen3.5, whose d = 24 makes the delta rule's (n, n) gradients the chunk's high point, is over by up
// to 12.9% there (the bound, not an inventory: docs/estimate.md, "Hybrid linear attention"); its attention
// layers, which set the peak past a few hundred tokens, within 0.9% (the fused kernel's per-thread scratch,
// as for `tiny`). plain, checkpoint and mst: at the cases below.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "harness/estimate/estimate.h"
#include "harness/estimate/estimate_flops.h"
#include "harness/model/model.h"
#include "harness/objectives/objective.h"
#include "impls/interface/strategy.h"
#include "impls/machinery/offload.h"
#include "profiles/memory.h"
#include "tests/support/test_support.h"

namespace bpbench::test_estimate_hybrid {
namespace {

using profiles::Category;
using profiles::MemoryRecorder;
using profiles::MemoryScope;

struct Cell {
  ModelConfig config;
  torch::ScalarType dtype = torch::kFloat;
  int64_t examples = 1, seq_len = 0, partition = 0, logits_partition = 64, lora_rank = 0;
  std::string impl = "streambp";
};

struct Measured {
  int64_t base = 0, peak = 0;
  int64_t above() const { return peak - base; }
};

// What the runner measures for an SFT cell: parameters, batch and pre-allocated gradients as the base, then
// one step's peak.
Measured measure(const Cell& c) {
  auto& rec = MemoryRecorder::instance();
  const int64_t before = rec.live_bytes();
  Measured out;
  Model model = [&] {
    MemoryScope scope(Category::params);
    Model m = Model::random(c.config, torch::TensorOptions().dtype(c.dtype), 0);
    if (c.lora_rank > 0) m.add_lora(c.lora_rank, 2.0 * c.lora_rank, 0);
    return m;
  }();
  auto objective = make_objective("sft");
  BatchSpec spec;
  spec.examples = c.examples;
  spec.seq_len = c.seq_len;
  spec.vocab = c.config.vocab;
  Batch batch;
  {
    MemoryScope scope(Category::other);
    batch = objective->make_batch(spec, model, c.logits_partition);
  }
  {
    MemoryScope scope(Category::grads);
    torch::NoGradGuard no_grad;
    for (const auto& p : model.trainable_parameters()) p.tensor.mutable_grad() = torch::zeros_like(p.tensor);
  }
  auto store = make_checkpoint_store(Offload::none, torch::kCPU);
  rec.reset_peak();
  out.base = rec.live_bytes() - before;
  make_strategy(c.impl)->step(
      StepInputs{model, batch, *objective, Partitioning{c.partition, c.logits_partition}, store.get()});
  out.peak = rec.peak_bytes() - before;
  return out;
}

EstimateInput input_of(const Cell& c) {
  EstimateInput in;
  in.config = c.config;
  in.seq_len = c.seq_len;
  in.sequences = c.examples;
  in.partition = c.partition;
  in.logits_partition = c.logits_partition;
  in.dtype = c.dtype;
  in.impl = c.impl;
  in.lora_rank = c.lora_rank;
  in.threads = at::get_num_threads();
  return in;
}

std::string describe(const Cell& c) {
  return fmt::format("{} {} {} N={} T={} c={} LoRA r={}", c.impl, c.config.name, c10::toString(c.dtype),
                     c.examples, c.seq_len, c.partition, c.lora_rank);
}

ModelConfig small_qwen3_5_v512() {
  ModelConfig c = find_model_preset("small-qwen3.5");
  c.name = "small-qwen3.5-v512";
  c.vocab = 512;
  return c;
}

// The base exactly; the peak above it within `tolerance`.
MemoryEstimate check(const Cell& c, const Measured& m, double tolerance) {
  SCOPED_TRACE(describe(c));
  const MemoryEstimate e = estimate_peak(input_of(c));
  EXPECT_EQ(e.base, m.base);
  const double error = static_cast<double>(e.peak_above_base - m.above()) / static_cast<double>(m.above());
  EXPECT_LE(std::abs(error), tolerance)
      << "estimate " << e.peak_above_base << " (" << e.dominant_phase << "), measured " << m.above();
  return e;
}

// Where a linear layer's chunk sets the peak, every dtype, one and two sequences, a short last chunk and a
// piece longer than the delta rule's 64-row chunks.
TEST(EstimateHybrid, StreamBPMatchesSmallQwen3_5WhereItsLinearLayersSetThePeak) {
  struct Shape {
    int64_t examples, T, c;
  };
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble})
    for (const auto& [examples, T, c] : {Shape{1, 96, 32}, Shape{2, 200, 64}, Shape{1, 517, 128}}) {
      for (const int64_t rank : {0, 4}) {
        if (rank > 0 && T > 200) continue;  // the long piece without adapters only: 4 s of the case's 9
        const Cell cell{small_qwen3_5_v512(), dtype, examples, T, c, 64, rank};
        const MemoryEstimate e =
            check(cell, measure(cell), rank > 0 && dtype == torch::kBFloat16 ? 0.06 : 0.01);
        EXPECT_EQ(e.dominant_phase, "layer linear chunk backward") << describe(cell);
      }
    }
}

// What a token adds at the phase that sets the peak: at the top linear layer its input checkpoints and dy
// (a row each) and, a partition's worth of rows at a time, one boundary state and halo; at the top attention
// layer its checkpoints, dy, K, V and their accumulators. Nothing else grows with T: estimate and measurement
// move by the same bytes, which are these.
TEST(EstimateHybrid, StreamBPAddsBoundaryStatesAndKVTermsOnlyAToken) {
  {
    const ModelConfig c = small_qwen3_5_v512();
    const int64_t N = 2, rows = 32, s = 4, d = c.hidden;
    const ModelConfig::LinearAttention& la = *c.linear_attention;
    const Cell shorter{c, torch::kFloat, N, 4 * rows, rows}, longer{c, torch::kFloat, N, 8 * rows, rows};
    const Measured a = measure(shorter), b = measure(longer);
    const MemoryEstimate ea = check(shorter, a, 0.001), eb = check(longer, b, 0.001);
    ASSERT_EQ(ea.dominant_phase, "layer linear chunk backward");
    ASSERT_EQ(eb.dominant_phase, ea.dominant_phase);
    // Layer 2 (the top linear one) holds x_1, x_2 and dy; each chunk boundary a float32 state and a halo.
    const int64_t boundary = N * la.value_heads * la.key_dim * la.value_dim * 4 +
                             N * (la.conv_kernel - 1) * la.conv_channels() * s;
    const int64_t grows = (longer.seq_len - shorter.seq_len) * N * 3 * d * s + 4 * boundary;
    EXPECT_EQ(b.above() - a.above(), grows);
    EXPECT_EQ(eb.peak_above_base - ea.peak_above_base, grows);
  }
  {
    // tiny-qwen3.5 past 2048 keys + a chunk (the CPU kernel's key blocks no longer widen): layer 3, full
    // attention, holds x_1..x_3, dy, K, V, dK and dV.
    const ModelConfig c = find_model_preset("tiny-qwen3.5");
    const int64_t N = 1, rows = 32, s = 4, Akv = c.kv_heads * c.head_dim;
    const Cell shorter{c, torch::kFloat, N, 2304, rows}, longer{c, torch::kFloat, N, 3328, rows};
    const Measured a = measure(shorter), b = measure(longer);
    const MemoryEstimate ea = check(shorter, a, 0.01), eb = check(longer, b, 0.01);
    ASSERT_EQ(ea.dominant_phase, "layer attention backward");
    ASSERT_EQ(eb.dominant_phase, ea.dominant_phase);
    const int64_t grows = (longer.seq_len - shorter.seq_len) * N * (4 * c.hidden * s + 4 * Akv * s);
    EXPECT_EQ(b.above() - a.above(), grows);
    EXPECT_EQ(eb.peak_above_base - ea.peak_above_base, grows);
  }
}

// tiny-qwen3.5 (d = 24): the chunk's high point is the delta rule's backward, which the estimate bounds.
TEST(EstimateHybrid, StreamBPBoundsTinyQwen3_5) {
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble}) {
    const Cell cell{find_model_preset("tiny-qwen3.5"), dtype, 2, 96, 32};
    const Measured m = measure(cell);
    const MemoryEstimate e = check(cell, m, 0.13);
    EXPECT_GE(e.peak_above_base, m.above()) << describe(cell);
  }
}

// The one-line std::invalid_argument `f` throws ("" and a failure if none).
template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "did not refuse";
  return "";
}

// plain, checkpoint and mst run each linear layer over all T rows (Note [A Gated DeltaNet block over all
// rows], linear_memory_terms.h). On small-qwen3.5 measured 2026-12-04 within 0.13% over every dtype, one and
// two sequences, LoRA or not, T from 64 to 2100: its top linear layer sets each peak (plain's at the head,
// where every layer's graph is alive). These cells cover each phase that sets one: checkpoint's MLP backward
// above the block's graph, mst's mini-sequence MLP backward at short T and its re-forward of the block (dy
// alive) at long T.
TEST(EstimateHybrid, WholeSequenceStrategiesMatchSmallQwen3_5) {
  struct Shape {
    int64_t examples, T, c, rank;
    const char* phase;  // mst's
  };
  const Shape shapes[] = {{1, 96, 32, 0, "layer linear mlp backward"},
                          {2, 200, 64, 4, "layer linear mlp backward"},
                          {1, 1031, 64, 0, "layer linear re-forward"}};
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble})
    for (const auto& [examples, T, c, rank, mst_phase] : shapes)
      for (const std::string impl : {"plain", "checkpoint", "mst"}) {
        // The long cell, where mst's re-forward is highest, in float32 only: 1 s.
        if (T > 200 && (impl != "mst" || dtype != torch::kFloat)) continue;
        Cell cell{small_qwen3_5_v512(), dtype, examples, T, c, 64, rank, impl};
        const MemoryEstimate e = check(cell, measure(cell), 0.002);
        if (impl == "checkpoint") EXPECT_EQ(e.dominant_phase, "layer linear mlp backward") << describe(cell);
        // In bfloat16 (v and the delta rule's output cast) the re-forward passes the MLP backward sooner.
        if (impl == "mst" && dtype != torch::kBFloat16)
          EXPECT_EQ(e.dominant_phase, mst_phase) << describe(cell);
      }
}

// tiny-qwen3.5 (d = 24): the delta rule's (n, n) buffers set the block's high points, which the estimate
// bounds: measured within 0.2% under and 4.4% over (the backward's bound at two delta chunks).
TEST(EstimateHybrid, WholeSequenceStrategiesBoundTinyQwen3_5) {
  for (const auto dtype : {torch::kFloat, torch::kBFloat16})
    for (const std::string impl : {"checkpoint", "mst"}) {
      const Cell cell{find_model_preset("tiny-qwen3.5"), dtype, 2, 200, 64, 64, 0, impl};
      check(cell, measure(cell), 0.05);
    }
  const Cell cell{find_model_preset("tiny-qwen3.5"), torch::kFloat, 1, 96, 32, 64, 0, "checkpoint"};
  const Measured m = measure(cell);
  const MemoryEstimate e = check(cell, m, 0.05);
  EXPECT_GE(e.peak_above_base, m.above());
  EXPECT_EQ(e.dominant_phase, "layer linear backward");
}

TEST(EstimateHybrid, RefusesWhatItDoesNotModelInOneLine) {
  Cell cell{find_model_preset("tiny-qwen3.5"), torch::kFloat, 1, 96, 32};
  for (const std::string& impl : estimated_impls())
    EXPECT_TRUE(estimated_for_model(cell.config, impl)) << impl;
  for (const std::string& impl : estimated_data_parallel_impls()) {
    EXPECT_FALSE(estimated_for_model(cell.config, impl));
    cell.impl = impl;
    EstimateInput in = input_of(cell);
    in.ranks = 2;
    const std::string message = refusal([&] { estimate_peak(in); });
    EXPECT_NE(message.find("Gated DeltaNet layers under the distributed strategies"), std::string::npos)
        << message;
  }
  cell.impl = "streambp";
  const Cell next{find_model_preset("tiny-qwen3-next"), torch::kFloat, 1, 96, 32};
  EXPECT_FALSE(estimated_for_model(next.config, "streambp"));
  EXPECT_NE(refusal([&] { estimate_peak(input_of(next)); }).find("gated experts"), std::string::npos);
  EXPECT_NE(refusal([&] { estimate_flops(input_of(cell)); }).find("not estimated yet"), std::string::npos);
}

}  // namespace
}  // namespace bpbench::test_estimate_hybrid
