// test_flops.cpp: the FLOP counter (harness/model/flop_count.h), held against PyTorch's own FLOP counter on
// transformers' network, against the analytic estimate (harness/estimate/estimate_flops.h) for every
// strategy, and against the claims the report makes: model FLOPs do not depend on the strategy, checkpointing
// adds exactly one forward of the layers, and StreamBP's attention (counted as a dense-mask kernel runs it,
// the paper's accounting) falls with the partition as (T + c) / 2T of a whole-sequence call.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "harness/cli/estimate_command.h"
#include "harness/estimate/estimate_flops.h"
#include "harness/model/attention_kernels.h"
#include "harness/model/flop_count.h"
#include "harness/model/ops.h"
#include "harness/run/gpu_peak.h"
#include "harness/run/results.h"
#include "harness/run/runner.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_flops {
namespace {

namespace fs = std::filesystem;

// One forward_backward of `impl` under a FlopCounter.
FlopCounts counted_step(const std::string& impl, Model& model, const Batch& batch, const Objective& objective,
                        Partitioning partition) {
  FlopCounter counter;
  (void)run_step(impl, model, batch, objective, partition);
  return counter.counts();
}

void expect_equal(const FlopCounts& a, const FlopCounts& b, const std::string& what) {
  EXPECT_EQ(a.forward_matmul, b.forward_matmul) << what;
  EXPECT_EQ(a.forward_attention, b.forward_attention) << what;
  EXPECT_EQ(a.backward_matmul, b.backward_matmul) << what;
  EXPECT_EQ(a.backward_attention, b.backward_attention) << what;
  EXPECT_EQ(a.recompute_matmul, b.recompute_matmul) << what;
  EXPECT_EQ(a.recompute_attention, b.recompute_attention) << what;
  EXPECT_EQ(a.attention_rescore, b.attention_rescore) << what;
  EXPECT_EQ(a.attention_masked, b.attention_masked) << what;
  EXPECT_EQ(a.attention_dense, b.attention_dense) << what;
}

// ---- the seam itself
// ----------------------------------------------------------------------------------------

TEST(FlopCounter, LinearCountsForwardAndOnlyTheBackwardAutogradRuns) {
  Linear l;
  l.weight = torch::randn({11, 7}, torch::kDouble).requires_grad_(true);
  const int64_t forward = 2 * (3 * 5) * 7 * 11;  // 2 M K N, M = 3 x 5 rows
  {
    FlopCounter counter;
    auto x = torch::randn({3, 5, 7}, torch::kDouble).requires_grad_(true);
    l(x).sum().backward();
    const FlopCounts c = counter.counts();
    EXPECT_EQ(c.forward_matmul, forward);
    EXPECT_EQ(c.backward_matmul, 2 * forward);  // dX and dW
    EXPECT_EQ(c.hardware(), 3 * forward);
  }
  {
    FlopCounter counter;
    l(torch::randn({3, 5, 7}, torch::kDouble)).sum().backward();  // the input needs no gradient: dW only
    EXPECT_EQ(counter.counts().backward_matmul, forward);
  }
  {
    FlopCounter counter;
    torch::NoGradGuard no_grad;
    (void)l(torch::randn({3, 5, 7}, torch::kDouble));
    const FlopCounts c = counter.counts();
    EXPECT_EQ(c.recompute_matmul, forward);
    EXPECT_EQ(c.model(), 0);
  }
  {  // no counter: nothing is tallied anywhere, and a new counter starts from zero
    (void)l(torch::randn({3, 5, 7}, torch::kDouble));
    FlopCounter counter;
    EXPECT_EQ(counter.counts().hardware(), 0);
  }
}

TEST(FlopCounter, AttentionCountsTheVisiblePairsOfAChunk) {
  const int64_t n = 2, hq = 4, hkv = 2, c = 3, e = 8, hd = 6;
  auto q = torch::randn({n, hq, c, hd}, torch::kDouble).requires_grad_(true);
  auto k = torch::randn({n, hkv, e, hd}, torch::kDouble).requires_grad_(true);
  auto v = torch::randn({n, hkv, e, hd}, torch::kDouble).requires_grad_(true);
  FlopCounter counter;
  causal_attention(q, k, v).sum().backward();
  const FlopCounts f = counter.counts();
  const int64_t pairs = c * (e - c) + c * (c + 1) / 2;  // the prefix whole, the diagonal block causal
  ASSERT_EQ(causal_pairs(c, e), pairs);
  const int64_t unit = n * hq * hd;
  EXPECT_EQ(f.forward_attention, 4 * unit * pairs);
  EXPECT_EQ(f.backward_attention, 8 * unit * pairs);
  EXPECT_EQ(f.attention_rescore, 2 * unit * pairs);  // the CPU kernel is fused: its backward rescores
  EXPECT_EQ(f.attention_masked, 0);
  EXPECT_EQ(f.attention_dense, 12 * unit * c * e);
}

// Under a sliding window the model's work is the pairs inside each row's window; the CPU kernel's banded
// blocks compute a little more (their masked corners), tallied as masked.
TEST(FlopCounter, WindowedAttentionCountsEachRowsWindow) {
  const int64_t n = 1, hq = 2, hkv = 1, c = 40, e = 50, hd = 8, window = 7;
  auto q = torch::randn({n, hq, c, hd}, torch::kDouble).requires_grad_(true);
  auto k = torch::randn({n, hkv, e, hd}, torch::kDouble).requires_grad_(true);
  auto v = torch::randn({n, hkv, e, hd}, torch::kDouble).requires_grad_(true);
  FlopCounter counter;
  causal_attention(q, k, v, window).sum().backward();
  const FlopCounts f = counter.counts();
  const int64_t unit = n * hq * hd, visible = c * window;  // every row sits past its window's start
  const int64_t executed = c * (c + window - 1);           // one block: keys [e - c - w + 1, e)
  EXPECT_EQ(visible_pairs(c, e, window), visible);
  EXPECT_EQ(f.forward_attention, 4 * unit * visible);
  EXPECT_EQ(f.backward_attention, 8 * unit * visible);
  EXPECT_EQ(f.attention_masked, 12 * unit * (executed - visible));
  EXPECT_EQ(f.attention_rescore, 2 * unit * executed);
  EXPECT_EQ(f.attention_dense, 12 * unit * c * e);
}

TEST(FlopCounter, OnlyOneCountsAtATime) {
  FlopCounter counter;
  EXPECT_THROW(FlopCounter(), std::logic_error);
}

// ---- every strategy: counted == estimated, model FLOPs invariant
// ----------------------------------------------

struct StrategyCase {
  std::string objective;
  int64_t lora_rank, partition, logits_partition;
};

class StrategyFlops : public ::testing::TestWithParam<StrategyCase> {};

TEST_P(StrategyFlops, CountedEqualsEstimateAndModelFlopsAreTheSameForEveryStrategy) {
  const StrategyCase& sc = GetParam();
  const int64_t T = 13;
  Model model = tiny_model({});
  if (sc.lora_rank > 0) model.add_lora(sc.lora_rank, 2.0 * static_cast<double>(sc.lora_rank), 11);
  auto objective = make_objective(sc.objective);
  BatchSpec spec;
  spec.examples = 2;
  spec.seq_len = T;
  spec.padding = true;
  spec.prompt_len = sc.objective == "sft" ? -1 : 6;
  spec.group = 3;
  spec.beta = 0.1;
  spec.seed = 3;
  spec.vocab = model.config.vocab;
  const Batch batch = objective->make_batch(spec, model, sc.logits_partition);

  EstimateInput in;
  in.config = model.config;
  in.seq_len = T;
  in.sequences = batch.sequences();
  in.partition = sc.partition;
  in.logits_partition = sc.logits_partition;
  in.dtype = torch::kDouble;
  in.objective = sc.objective;
  in.lora_rank = sc.lora_rank;

  std::optional<FlopCounts> plain;
  for (const auto& impl : estimated_impls()) {
    if (make_strategy(impl)->unsupported({sc.objective, 1})) continue;
    const std::string what = fmt::format("{} {} lora {} p{} lp{}", impl, sc.objective, sc.lora_rank,
                                         sc.partition, sc.logits_partition);
    const FlopCounts counted =
        counted_step(impl, model, batch, *objective, {sc.partition, sc.logits_partition});
    in.impl = impl;
    expect_equal(counted, estimate_flops(in), what + ": counted vs estimate");
    if (!plain) plain = counted;
    EXPECT_EQ(counted.model(), plain->model()) << what << ": model FLOPs differ from plain's";
    EXPECT_EQ(counted.forward_matmul, plain->forward_matmul) << what;
    EXPECT_EQ(counted.backward_attention, plain->backward_attention) << what;
    EXPECT_GE(counted.hardware(), counted.model()) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, StrategyFlops,
                         ::testing::Values(StrategyCase{"sft", 0, 5, 3}, StrategyCase{"sft", 0, 13, 13},
                                           StrategyCase{"sft", 2, 4, 6}, StrategyCase{"dpo", 0, 5, 3},
                                           StrategyCase{"dpo", 2, 1, 13}, StrategyCase{"grpo", 0, 7, 4},
                                           StrategyCase{"grpo", 3, 5, 5}),
                         [](const auto& info) {
                           const StrategyCase& c = info.param;
                           return fmt::format("{}_lora{}_p{}_lp{}", c.objective, c.lora_rank, c.partition,
                                              c.logits_partition);
                         });

// LoRA's layer 0 needs no input gradient; a strategy that re-enters the layer from a detached input must not
// compute one (or its model FLOPs would exceed plain's). Its gradients stay exact.
TEST(FlopClaims, LoraLayerZeroComputesNoInputGradient) {
  Model model = tiny_model({});
  model.add_lora(2, 4.0, 11);
  ASSERT_FALSE(model.input_gradient_needed(0));
  ASSERT_TRUE(model.input_gradient_needed(1));
  auto objective = make_objective("sft");
  const Batch batch = padded_sft_batch(model, *objective);
  const auto ref = run_step("plain", model, batch, *objective, {13, 13});
  for (const auto& impl : {"checkpoint", "checkpoint-chunked-head", "mst", "streambp"})
    expect_same_gradients(ref, run_step(impl, model, batch, *objective, {4, 5}), 1e-10, impl);
}

// ---- recomputation and the partition
// ----------------------------------------------------------------------------

TEST(FlopClaims, CheckpointingAddsExactlyOneForwardOfTheLayers) {
  Model model = tiny_model({});
  auto objective = make_objective("sft");
  const Batch batch = padded_sft_batch(model, *objective, 29);
  const int64_t T = 29, N = batch.sequences();
  const FlopCounts plain = counted_step("plain", model, batch, *objective, {T, T});
  const FlopCounts ckpt = counted_step("checkpoint", model, batch, *objective, {T, T});
  const int64_t head_forward = 2 * N * T * model.config.hidden * model.config.vocab;
  const int64_t layers_forward = plain.forward_matmul - head_forward + plain.forward_attention;
  EXPECT_EQ(plain.recompute_matmul + plain.recompute_attention, 0);
  EXPECT_EQ(ckpt.hardware() - plain.hardware(), layers_forward);
  EXPECT_EQ(ckpt.recompute_matmul + ckpt.recompute_attention, layers_forward);
}

TEST(FlopClaims, StreamBPDenseAttentionFallsWithThePartitionAsThePaperSays) {
  Model model = tiny_model({});
  auto objective = make_objective("sft");
  const int64_t T = 64;
  const Batch batch = padded_sft_batch(model, *objective, T);
  const FlopCounts whole = counted_step("checkpoint", model, batch, *objective, {T, T});
  int64_t previous = 0;
  for (int64_t c : {4, 8, 16, 32, 64}) {
    const FlopCounts s = counted_step("streambp", model, batch, *objective, {c, T});
    // The paper (Sec. 3): D = T / c partitions score (1 + D) T^2 / 2D of T^2, i.e. (T + c) / 2T.
    EXPECT_EQ(s.attention_dense * 2 * T, whole.attention_dense * (T + c)) << "partition " << c;
    EXPECT_GT(s.attention_dense, previous) << "partition " << c;
    previous = s.attention_dense;
    // A causal fused kernel already skips the masked scores: what it runs does not depend on the partition.
    // StreamBP runs checkpointing's work and, per layer, the k and v projections once more (its K, V values
    // before the chunks: impls/streambp.cpp).
    const auto& cfg = model.config;
    const int64_t kv_again =
        cfg.layers * 2 * batch.sequences() * T * cfg.hidden * 2 * cfg.kv_heads * cfg.head_dim;
    EXPECT_EQ(s.hardware() - whole.hardware(), kv_again) << "partition " << c;
    EXPECT_EQ(s.recompute_matmul - whole.recompute_matmul, kv_again) << "partition " << c;
  }
}

// `bpbench estimate` prints, per impl, the counts a run of that cell counts.
TEST(FlopClaims, EstimateCommandPrintsTheCountedFlops) {
  Model model = tiny_model({}, torch::kFloat);
  auto objective = make_objective("sft");
  BatchSpec spec;
  spec.examples = 1;
  spec.seq_len = 40;
  spec.seed = 1;
  spec.vocab = model.config.vocab;
  const Batch batch = objective->make_batch(spec, model, 40);
  std::ostringstream out;
  estimate_command({"--model", "tiny", "--seq-len", "40", "--partition", "16", "--logits-partition", "8",
                    "--threads", "1"},
                   out);
  for (const auto& impl : estimated_impls()) {
    const FlopCounts f = counted_step(impl, model, batch, *objective, {16, 8});
    EXPECT_NE(out.str().find(fmt::format("{:<24} {:>9} {:>20} {:>20}", impl, 40, f.model(), f.hardware())),
              std::string::npos)
        << impl << " counted model " << f.model() << ", hardware " << f.hardware() << "; printed:\n"
        << out.str();
  }
}

// ---- PyTorch's FlopCounterMode on transformers
// ----------------------------------------------------------------

struct FlopCase {
  std::string preset;
  int64_t sequences, seq_len;
};
const std::vector<FlopCase> kFlopCases = {{"tiny", 2, 37}, {"small", 1, 64}};

const PythonOutput& flop_counter_mode() {
  static const PythonOutput run = [] {
    const std::string python = BPBENCH_PYTHON;
    const bool has_transformers = python_has_transformers();
    std::string args;
    for (const auto& fc : kFlopCases) {
      const ModelConfig c = find_model_preset(fc.preset);
      args += fmt::format(" {}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}", fc.preset, c.vocab, c.hidden, c.intermediate,
                          c.layers, c.heads, c.kv_heads, c.head_dim, c.tie_embeddings ? 1 : 0, fc.sequences,
                          fc.seq_len);
    }
    return cached_python_output(
        "flop_counter_mode", {fs::path(BPBENCH_SOURCE_DIR) / "tests" / "oracle" / "flop_counter_mode.py"},
        args, "flops.json",
        has_transformers
            ? ""
            : fmt::format("{} cannot import transformers (run scripts/setup.sh): not run", python));
  }();
  return run;
}
const bool flop_counter_mode_made_at_build_time = made_at_build_time(&flop_counter_mode);

TEST(FlopCounterMode, PlainModelFlopsEqualPyTorchsCountOnTransformers) {
  require_python_output(flop_counter_mode(), "PyTorch's FlopCounterMode");
  const nlohmann::json theirs = json_file(flop_counter_mode().dir / "flops.json");
  for (const auto& fc : kFlopCases) {
    const ModelConfig config = find_model_preset(fc.preset);
    ASSERT_TRUE(config.qk_norm && !config.attention_bias) << "the script builds Qwen3: " << fc.preset;
    Model model = Model::random(config, torch::TensorOptions().dtype(torch::kFloat), 1);
    auto objective = make_objective("sft");
    BatchSpec spec;
    spec.examples = fc.sequences;
    spec.seq_len = fc.seq_len;
    spec.seed = 2;
    spec.vocab = config.vocab;
    const Batch batch = objective->make_batch(spec, model, fc.seq_len);
    const FlopCounts ours = counted_step("plain", model, batch, *objective, {fc.seq_len, fc.seq_len});
    const nlohmann::json& t = theirs.at(fc.preset);
    const int64_t T = fc.seq_len;
    ASSERT_EQ(t.at("total").get<int64_t>(), t.at("matmul").get<int64_t>() + t.at("attention").get<int64_t>() +
                                                t.at("rotary").get<int64_t>())
        << fc.preset << ": FlopCounterMode counted an op this test does not account for: " << t.at("ops");
    // Every linear and the LM head, forward and backward: the same matmuls, to the FLOP.
    EXPECT_EQ(ours.model_matmul(), t.at("matmul").get<int64_t>()) << fc.preset;
    // Eager attention scores all T x T pairs; the causal count keeps T (T + 1) / 2 of them.
    EXPECT_EQ(ours.model_attention() * 2 * T, t.at("attention").get<int64_t>() * (T + 1)) << fc.preset;
    // As a kernel that computes every score would run it, the same as FlopCounterMode's eager count (plain
    // BP has no recomputation; the fused kernel's backward rescoring is not in the dense count).
    EXPECT_EQ(ours.attention_dense, t.at("attention").get<int64_t>()) << fc.preset;
  }
}

// ---- the cell record
// ----------------------------------------------------------------------------------------

TEST(CellCompute, ACellRecordsItsCountsRateAndNoMfuOnTheCpu) {
  CellJob job;
  job.cell = parse_scenario_text(R"({"grid": {"model": "tiny", "impl": "streambp", "seq_len": 33,
                                             "partition": 8, "logits_partition": 8, "dtype": "float32"}})")
                 .expand()
                 .at(0);
  job.settings.threads = 1;
  job.settings.measure.time.warmup = 1;
  job.settings.measure.time.repeat = 3;
  const CellResult r = run_cell(job);
  ASSERT_EQ(r.status, "ok") << r.reason;
  ASSERT_TRUE(r.compute && r.time);
  EstimateInput in;
  in.config = find_model_preset("tiny");
  in.seq_len = 33;
  in.sequences = 1;
  in.partition = 8;
  in.logits_partition = 8;
  in.impl = "streambp";
  expect_equal(r.compute->counts, estimate_flops(in), "cell vs estimate");
  ASSERT_TRUE(r.compute->tflops_per_s.has_value());
  EXPECT_DOUBLE_EQ(*r.compute->tflops_per_s,
                   static_cast<double>(r.compute->counts.hardware()) / r.time->median_s / 1e12);
  EXPECT_FALSE(r.compute->mfu.has_value());
  EXPECT_TRUE(r.compute->peak.is_null());

  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j.at("compute").at("model_flops").get<int64_t>(), r.compute->counts.model());
  EXPECT_EQ(j.at("compute").at("hardware_flops").get<int64_t>(), r.compute->counts.hardware());
  const CellResult back = CellResult::from_json(j);
  ASSERT_TRUE(back.compute.has_value());
  expect_equal(back.compute->counts, r.compute->counts, "JSON round trip");
  EXPECT_EQ(back.compute->tflops_per_s, r.compute->tflops_per_s);
}

TEST(GpuPeak, TableByDriverNameWithSources) {
  const auto sxm = gpu_peak("NVIDIA H100 80GB HBM3", torch::kBFloat16);
  ASSERT_TRUE(sxm.has_value());
  EXPECT_EQ(sxm->gpu, "H100 SXM");
  EXPECT_DOUBLE_EQ(sxm->tflops, 989.5);
  EXPECT_FALSE(sxm->source.empty());
  EXPECT_EQ(gpu_peak("NVIDIA H100 PCIe", torch::kBFloat16)->gpu, "H100 PCIe");
  EXPECT_EQ(gpu_peak("NVIDIA H100 NVL", torch::kFloat)->gpu, "H100 NVL");
  EXPECT_DOUBLE_EQ(gpu_peak("NVIDIA H200", torch::kFloat)->tflops, 67.0);
  EXPECT_EQ(gpu_peak("NVIDIA A100-SXM4-80GB", torch::kDouble)->precision, "fp64 tensor core");
  EXPECT_FALSE(gpu_peak("NVIDIA GeForce RTX 4090", torch::kBFloat16).has_value());
  EXPECT_NE(known_gpus().find("H100 SXM"), std::string::npos);
}

}  // namespace
}  // namespace bpbench::testing::test_flops
