// test_exactness.cpp: every strategy equals plain backpropagation in float64 (loss and every parameter's
// gradient, relative error < 1e-10) over odd shapes: T prime, partitions {1, 7, T-1, T, T+5}, logits
// partitions {1, 3, T}, GQA ratios 1, 2 and 4, tied and untied heads, batch 2 with right padding, DPO/GRPO
// prompts longer than a chunk, GRPO with G = 3; with the layer checkpoints offloaded to host memory too. Also
// plain's gradients against central finite differences.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness/estimate/estimate.h"
#include "harness/estimate/estimate_flops.h"
#include "harness/model/flop_count.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_exactness {
namespace {

constexpr int64_t kT = 13;  // prime
constexpr double kTol = 1e-10;

struct Case {
  std::string impl, objective;
  int64_t kv_heads;
  bool tied;
  int64_t partition, logits_partition;
  Offload offload = Offload::none;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return test_name(fmt::format("{}_{}_gqa{}_{}_p{}_lp{}{}", c.impl, c.objective, 4 / c.kv_heads,
                               c.tied ? "tied" : "untied", c.partition, c.logits_partition,
                               c.offload == Offload::none ? "" : "_offloaded"));
}

BatchSpec spec_for(const std::string& objective, int64_t vocab) {
  return padded_batch_spec(objective, vocab, kT, /*prompt_len=*/8);  // longer than partitions 1 and 7
}

class Exactness : public ::testing::TestWithParam<Case> {};

TEST_P(Exactness, MatchesPlainInFloat64) {
  const Case& c = GetParam();
  Model model = tiny_model({c.kv_heads, c.tied});
  auto objective = make_objective(c.objective);
  Batch batch = objective->make_batch(spec_for(c.objective, model.config.vocab), model, 5);
  auto ref = run_step("plain", model, batch, *objective, {kT, kT});
  auto store = make_checkpoint_store(c.offload, torch::kCPU);
  auto got = run_step(c.impl, model, batch, *objective, {c.partition, c.logits_partition}, store.get());
  expect_same_gradients(ref, got, kTol, case_name({c, 0}));
  if (c.offload == Offload::none) return;
  // The runner keeps one store per cell: a second step reuses its host buffers and must be exact too.
  auto again = run_step(c.impl, model, batch, *objective, {c.partition, c.logits_partition}, store.get());
  expect_same_gradients(ref, again, kTol, case_name({c, 0}) + ", second step");
}

std::vector<Case> streaming_matrix(const std::string& impl, const std::vector<std::string>& objectives) {
  std::vector<Case> cases;
  for (const auto& obj : objectives)
    for (int64_t kv : {4, 2, 1})
      for (bool tied : {false, true})
        for (int64_t p : {int64_t{1}, int64_t{7}, kT - 1, kT, kT + 5})
          for (int64_t lp : {int64_t{1}, int64_t{3}, kT}) cases.push_back({impl, obj, kv, tied, p, lp});
  return cases;
}

std::vector<Case> layerwise_matrix(const std::string& impl) {
  std::vector<Case> cases;
  for (const auto& obj : {"sft", "dpo", "grpo"})
    for (int64_t kv : {4, 2, 1})
      for (bool tied : {false, true}) cases.push_back({impl, obj, kv, tied, 5, 3});
  return cases;
}

// Offloaded checkpoints (impls/machinery/offload.h) through the CPU's host store: every objective each
// strategy runs, partitions that leave a short last chunk.
std::vector<Case> offloaded_matrix() {
  std::vector<Case> cases;
  for (const std::string impl : {"checkpoint", "checkpoint-chunked-head", "streambp", "mst"})
    for (const std::string obj : {"sft", "dpo", "grpo"}) {
      if (impl == "mst" && obj == "dpo") continue;  // mst refuses DPO
      for (int64_t kv : {4, 1}) cases.push_back({impl, obj, kv, kv == 1, 5, 3, Offload::checkpoints});
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Offloaded, Exactness, ::testing::ValuesIn(offloaded_matrix()), case_name);
INSTANTIATE_TEST_SUITE_P(Checkpoint, Exactness, ::testing::ValuesIn(layerwise_matrix("checkpoint")),
                         case_name);
INSTANTIATE_TEST_SUITE_P(CheckpointChunkedHead, Exactness,
                         ::testing::ValuesIn(streaming_matrix("checkpoint-chunked-head", {"sft", "dpo"})),
                         case_name);
INSTANTIATE_TEST_SUITE_P(StreamBP, Exactness,
                         ::testing::ValuesIn(streaming_matrix("streambp", {"sft", "dpo", "grpo"})),
                         case_name);
INSTANTIATE_TEST_SUITE_P(MsT, Exactness, ::testing::ValuesIn(streaming_matrix("mst", {"sft", "grpo"})),
                         case_name);

// Sliding-window layers (Gemma 3's local attention): layer 0 slides, layer 1 attends over the whole prefix.
// Windows narrower than, equal to and wider than the partition, 2 and as long as T (window 1, where each row
// sees only itself, makes dQ and dK exactly zero: round-off against zero, which a relative test cannot judge;
// tests/model/test_attention.cpp covers it);
// StreamBP's chunks then take K/V from their window start only, and dK/dV must still be exact. Every
// objective each strategy runs; the strategies' counted FLOPs equal the estimate's under the window too.
class WindowedExactness : public ::testing::TestWithParam<std::tuple<std::string, int64_t, int64_t>> {};

TEST_P(WindowedExactness, EveryStrategyMatchesPlainInFloat64) {
  const auto& [objective_name, window, partition] = GetParam();
  Model model = tiny_model({2, false});
  model.config.sliding_window = window;
  model.config.sliding_layers = {true, false};
  auto objective = make_objective(objective_name);
  Batch batch = objective->make_batch(spec_for(objective_name, model.config.vocab), model, 5);
  auto ref = run_step("plain", model, batch, *objective, {kT, kT});
  EstimateInput in;
  in.config = model.config;
  in.seq_len = kT;
  in.sequences = batch.sequences();
  in.partition = partition;
  in.logits_partition = 3;
  in.dtype = torch::kDouble;
  in.objective = objective_name;
  for (const std::string impl : {"plain", "checkpoint", "checkpoint-chunked-head", "mst", "streambp"}) {
    if (make_strategy(impl)->unsupported({objective_name, 1})) continue;
    const std::string what =
        fmt::format("{} {} window {} partition {}", impl, objective_name, window, partition);
    FlopCounter counter;
    expect_same_gradients(ref, run_step(impl, model, batch, *objective, {partition, 3}), kTol, what);
    in.impl = impl;
    EXPECT_EQ(counter.counts().hardware(), estimate_flops(in).hardware()) << what;
    EXPECT_EQ(counter.counts().model(), estimate_flops(in).model()) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Windows, WindowedExactness,
                         ::testing::Values(std::tuple{"sft", 3, 5}, std::tuple{"sft", 5, 5},
                                           std::tuple{"sft", 8, 5}, std::tuple{"sft", 2, 4},
                                           std::tuple{"sft", kT, 7}, std::tuple{"dpo", 4, 7},
                                           std::tuple{"grpo", 6, 4}, std::tuple{"sft", 2, 1}),
                         [](const auto& info) {
                           return fmt::format("{}_w{}_p{}", std::get<0>(info.param), std::get<1>(info.param),
                                              std::get<2>(info.param));
                         });

// A sliding window makes a StreamBP chunk's attention smaller: it sees min(w, p + 1) keys per row, so the
// model's attention FLOPs fall, and so does (or stays) the estimated peak (test_estimate.cpp measures it).
TEST(WindowedExactness, WindowsCutAttentionFlopsAndEstimatedMemory) {
  Model model = tiny_model({2, false});
  auto objective = make_objective("sft");
  Batch batch = objective->make_batch(spec_for("sft", model.config.vocab), model, 5);
  auto attention = [&] {
    FlopCounter counter;
    run_step("streambp", model, batch, *objective, {4, 3});
    return counter.counts().model_attention();
  };
  const int64_t full = attention();
  model.config.sliding_window = 3;
  model.config.sliding_layers = {true, true};
  const int64_t windowed = attention();
  EXPECT_LT(windowed, full);
  EstimateInput in;
  in.config = model.config;
  in.seq_len = kT;
  in.impl = "streambp";
  EstimateInput no_window = in;
  no_window.config.sliding_layers = {false, false};
  EXPECT_LT(estimate_flops(in).model_attention(), estimate_flops(no_window).model_attention());
  EXPECT_LE(estimate_peak(in).peak_bytes, estimate_peak(no_window).peak_bytes);
  model.config.sliding_layers = {true};  // not one flag per layer
  EXPECT_THROW(model.config.validate(), std::invalid_argument);
}

// Attention bias (Qwen2.5) and no q/k norm (Llama) take other code paths in the pieces.
TEST(Exactness, StreamBPWithAttentionBiasAndNoQkNorm) {
  Model model = tiny_model({2, false, /*attention_bias=*/true, /*qk_norm=*/false});
  auto objective = make_objective("sft");
  Batch batch = objective->make_batch(spec_for("sft", model.config.vocab), model, 5);
  auto ref = run_step("plain", model, batch, *objective, {kT, kT});
  for (const std::string impl : {"checkpoint", "mst", "streambp"})
    expect_same_gradients(ref, run_step(impl, model, batch, *objective, {4, 3}), kTol, impl);
}

// Central differences on a sample of entries of EVERY parameter tensor: plain BP itself is right.
TEST(Exactness, PlainMatchesFiniteDifferences) {
  Model model = tiny_model({2, false});
  auto objective = make_objective("sft");
  Batch batch = objective->make_batch(spec_for("sft", model.config.vocab), model, 5);
  auto grads = run_step("plain", model, batch, *objective, {kT, kT});
  auto loss_now = [&] {
    torch::NoGradGuard no_grad;
    auto x = model.embed(batch.input_ids);
    for (int64_t i = 0; i < model.config.layers; ++i) x = model.layer(i, x);
    return objective->loss(model.head_logits(x), batch).item<double>();
  };
  const double h = 1e-5;
  torch::manual_seed(11);
  auto params = model.trainable_parameters();
  for (size_t p = 0; p < params.size(); ++p) {
    auto flat = params[p].tensor.detach().view({-1});
    for (int k = 0; k < 3; ++k) {
      const int64_t idx = torch::randint(flat.numel(), {1}).item<int64_t>();
      const double orig = flat[idx].item<double>();
      flat[idx].fill_(orig + h);
      const double up = loss_now();
      flat[idx].fill_(orig - h);
      const double down = loss_now();
      flat[idx].fill_(orig);
      const double numeric = (up - down) / (2 * h);
      const double analytic = grads.grads[p].view({-1})[idx].item<double>();
      EXPECT_NEAR(analytic, numeric, 1e-7 + 1e-6 * std::abs(numeric)) << params[p].name << "[" << idx << "]";
    }
  }
}

}  // namespace
}  // namespace bpbench::testing::test_exactness
