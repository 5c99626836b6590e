// test_estimate.cpp: the analytic peak (harness/estimate/estimate.h) against the tracking allocator's
// measurement.
//
// Each measurement is what the runner does for a cell: build the model (params) and batch, pre-allocate every
// trainable parameter's .grad (zeros), reset the peak, run one forward_backward. base = live at step start;
// peak = the recorder's peak. The estimate must match both the total peak and the peak above base.
//
// EstimateSmall/PeakWithinTenPercent, the estimate's acceptance grid: every strategy on `small`, float32 SFT,
// batch 1, partition 256, logits_partition 256, T in 512..8192, within 10% (total and above base; each cell
// records both errors as properties). The tracking allocator counts exactly at any length and each
// strategy's peak phase is the same from 512 to 8192 (the head for all but plain, whose activations grow with
// T), so by default T is 512 and 1024, two lengths that pin plain's growth; T = 2048, 4096 and 8192 (5 s to
// minutes a cell on 2 cores, plain ~4 GB at 8192) run with BPBENCH_ESTIMATE_LONG=1 and are reported as
// skipped otherwise. The layer phases' lengths are Estimate.MatchesSmallVocab's, within 2%.
//
// Estimate.MatchesTiny / MatchesSmallVocab: fast grids over dtype, objective, batch, LoRA and partitions with
// a tighter bound (2%), so that every phase's formula (head, MLP and attention backward) is exercised.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "harness/cli/estimate_command.h"
#include "harness/estimate/estimate.h"
#include "harness/model/model.h"
#include "harness/objectives/objective.h"
#include "impls/interface/strategy.h"
#include "impls/machinery/offload.h"
#include "profiles/host_memory.h"
#include "profiles/memory.h"
#include "tests/support/test_support.h"

namespace bpbench::test_estimate {
namespace {

using profiles::Category;
using profiles::MemoryRecorder;
using profiles::MemoryScope;
using testing::test_name;

struct CellSpec {
  ModelConfig config;
  std::string impl, objective = "sft";
  torch::ScalarType dtype = torch::kFloat;
  int64_t seq_len = 0, examples = 1, group = 2, partition = 0, logits_partition = 0, lora_rank = 0;
  bool offload =
      false;  // layer checkpoints in host memory, through a fresh store (impls/machinery/offload.h)
};

struct Measured {
  int64_t base = 0;  // live at step start, less what was live before the cell was built
  int64_t peak = 0;  // peak during the step, same origin
  int64_t sequences = 0;
  int64_t host_peak = 0;             // host bytes (profiles/host_memory.h) during the step
  std::vector<torch::Tensor> grads;  // with keep_grads: every trainable parameter's gradient
  int64_t above_base() const { return peak - base; }
};

// What the runner measures for one cell (harness/run/cell_in_process.cpp, measure_cell), in this process.
Measured measure_cell(const CellSpec& c, bool keep_grads = false) {
  auto& rec = MemoryRecorder::instance();
  const int64_t before = rec.live_bytes();
  Measured out;
  {
    Model model = [&] {
      MemoryScope scope(Category::params);
      Model m = Model::random(c.config, torch::TensorOptions().dtype(c.dtype), 0);
      if (c.lora_rank > 0) m.add_lora(c.lora_rank, 2.0 * c.lora_rank, 0);
      return m;
    }();
    auto objective = make_objective(c.objective);
    BatchSpec spec;
    spec.examples = c.examples;
    spec.seq_len = c.seq_len;
    spec.group = c.group;
    spec.vocab = c.config.vocab;
    Batch batch;
    {
      MemoryScope scope(Category::other);
      batch = objective->make_batch(spec, model, c.logits_partition);
    }
    {
      MemoryScope scope(Category::grads);
      torch::NoGradGuard no_grad;
      for (const auto& p : model.trainable_parameters())
        p.tensor.mutable_grad() = torch::zeros_like(p.tensor);
    }
    auto strategy = make_strategy(c.impl);
    auto store = make_checkpoint_store(c.offload ? Offload::checkpoints : Offload::none, torch::kCPU);
    rec.reset_peak();
    profiles::reset_host_peak();
    const int64_t host_before = profiles::host_live_bytes();
    out.base = rec.live_bytes() - before;
    strategy->step(
        StepInputs{model, batch, *objective, Partitioning{c.partition, c.logits_partition}, store.get()});
    out.peak = rec.peak_bytes() - before;
    out.host_peak = profiles::host_peak_bytes() - host_before;
    out.sequences = batch.sequences();
    if (keep_grads)
      for (const auto& p : model.trainable_parameters()) out.grads.push_back(p.tensor.grad().clone());
  }
  return out;
}

EstimateInput estimate_input(const CellSpec& c, int64_t sequences) {
  EstimateInput in;
  in.config = c.config;
  in.seq_len = c.seq_len;
  in.sequences = sequences;
  in.partition = c.partition;
  in.logits_partition = c.logits_partition;
  in.dtype = c.dtype;
  in.impl = c.impl;
  in.objective = c.objective;
  in.lora_rank = c.lora_rank;
  in.threads = at::get_num_threads();  // what measure_cell's attention kernel ran with
  in.offload = c.offload;
  return in;
}

double relative_error(int64_t estimate, int64_t measured) {
  return static_cast<double>(estimate - measured) / static_cast<double>(measured);
}

std::string describe(const CellSpec& c) {
  return fmt::format("{} {} T={} {} {} B={} p={} lp={} lora={}{}", c.impl, c.config.name, c.seq_len,
                     c10::toString(c.dtype), c.objective, c.examples, c.partition, c.logits_partition,
                     c.lora_rank, c.offload ? " offloaded" : "");
}

// Checks the estimate of cell `c`, measured as `m`: its base exactly, its total and above-base peaks within
// `tolerance`.
void check_measured(const CellSpec& c, const Measured& m, double tolerance) {
  SCOPED_TRACE(describe(c));
  const MemoryEstimate e = estimate_peak(estimate_input(c, m.sequences));
  EXPECT_EQ(e.base, m.base) << "params " << e.params << ", grads " << e.grads << ", batch " << e.batch;
  const double total = relative_error(e.peak_bytes, m.peak),
               above = relative_error(e.peak_above_base, m.above_base());
  EXPECT_LE(std::abs(total), tolerance) << "total peak: estimate " << e.peak_bytes << ", measured " << m.peak;
  EXPECT_LE(std::abs(above), tolerance) << "peak above base: estimate " << e.peak_above_base << ", measured "
                                        << m.above_base() << " (estimated phase: " << e.dominant_phase << ")";
  EXPECT_EQ(e.host_bytes, m.host_peak) << "host bytes of the offloaded checkpoints";
}

// The same, measuring the cell.
void check_cell(const CellSpec& c, double tolerance) {
  check_measured(c, measure_cell(c), tolerance);
}

// A preset with a 512-token vocabulary ("<preset>-v512"): the layer phases dominate at small T.
ModelConfig with_vocab_512(const std::string& preset) {
  ModelConfig c = find_model_preset(preset);
  c.name = preset + "-v512";
  c.vocab = 512;
  return c;
}

// ---- against the tracking allocator: fast grids
// ------------------------------------------------------------

// Every strategy x dtype x objective (of `objectives`) x LoRA on `config` (N = 2 or 4, three query chunks,
// six head chunks), each cell within tolerance(impl, dtype, LoRA rank).
template <class Tolerance>
void check_tiny_grid(const ModelConfig& config, Tolerance tolerance,
                     const std::vector<std::string>& objectives = {"sft", "dpo", "grpo"}) {
  for (const auto& impl : estimated_impls()) {
    if (!estimated_for_model(config, impl)) continue;
    for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble})
      for (const std::string& objective : objectives)
        for (const int64_t rank : {0, 4}) {
          if (impl == "mst" && objective == "dpo") continue;  // mst does not run DPO
          CellSpec c;
          c.config = config;
          c.impl = impl;
          c.dtype = dtype;
          c.objective = objective;
          c.examples = 2;
          c.seq_len = 96;
          c.partition = 32;
          c.logits_partition = 16;
          c.lora_rank = rank;
          check_cell(c, tolerance(impl, dtype, rank));
        }
  }
}

TEST(Estimate, MatchesTiny) {
  // bfloat16 + LoRA: 5%. With attention fused, two phases the estimate does not model come within a few
  // percent of the top there (docs/estimate.md, "Known gaps"): streambp's K/V-path backward (the input
  // norm over all T rows, four float32 (N, T, d) temporaries) and checkpoint's whole-layer MLP backward with
  // adapters (32 bytes a row short). Every other cell keeps 2%.
  // bfloat16 without LoRA: 5% too since StreamBP's attention backward runs by key blocks: on these
  // 96-token cells the fused CPU kernel's bfloat16 scratch is a few percent of the peak, and how much of it
  // is alive at once follows how many threads the kernel actually got (measured 153732 and above against
  // 156928 estimated for streambp, T=96, B=2, p=32, when another job loaded the cores).
  check_tiny_grid(find_model_preset("tiny"), [](const std::string&, torch::ScalarType dtype, int64_t) {
    return dtype == torch::kBFloat16 ? 0.05 : 0.02;
  });
}

// Where the layer phases (MLP and attention backward) set the peak: `impl` on `config`, two sequences under a
// partition that divides T, and one whose partition leaves a short last chunk, each cell within `tolerance`.
// The four cells of batch 1 and 2 at both shapes read the same phases; on small-v512 every one 4 to 12 bytes
// from its estimate, on small-moe-v512 the largest errors (-1.3% on checkpoint) in the cell kept at T = 640.
void check_layer_grid(const ModelConfig& config, const std::string& impl, double tolerance) {
  struct Shape {
    int64_t examples, T, p;
  };
  for (const auto& [examples, T, p] : {Shape{2, 256, 128}, Shape{1, 640, 256}}) {
    CellSpec c;
    c.config = config;
    c.impl = impl;
    c.examples = examples;
    c.seq_len = T;
    c.partition = p;
    c.logits_partition = 128;
    check_cell(c, tolerance);
  }
}

// `small` with a 512-token vocabulary, where the layer phases set the peak.
TEST(Estimate, MatchesSmallVocab) {
  for (const auto& impl : estimated_impls()) check_layer_grid(with_vocab_512("small"), impl, 0.02);
}

// Mixtures of experts (Note [Mixture-of-experts buffers]): the preset small-moe itself within 2%, where the
// head sets the peak of every strategy but plain. Where the routed layers set the peak (small-moe with a
// 512-token vocabulary, at batch 1 and 2 and a short last chunk; tiny-moe over every dtype, objective and
// LoRA) within 5%: the graph's bytes are exact whatever the routing, but one expert's transient buffers
// follow how many rows it got, which the estimate counts as evenly spread (measured: up to 4.6% under on
// tiny-moe's bfloat16 checkpoint cells, 4.2% under on checkpoint at T=640). Plain with LoRA on tiny-moe
// reads 3.2% over in its head phase: the normed MLP input, which a frozen router does not keep, offsetting
// an undercount in checkpoint's MLP backward with adapters (docs/estimate.md, "Known gaps").
TEST(Estimate, MatchesSmallMoe) {
  const ModelConfig small_moe_v512 = with_vocab_512("small-moe");
  for (const auto& impl : estimated_impls()) {
    CellSpec preset;
    preset.config = find_model_preset("small-moe");
    preset.impl = impl;
    preset.seq_len = 512;
    preset.partition = 128;
    preset.logits_partition = 128;
    check_cell(preset, 0.02);
    check_layer_grid(small_moe_v512, impl, 0.05);
  }
}

TEST(Estimate, MatchesTinyMoe) {
  check_tiny_grid(find_model_preset("tiny-moe"),
                  [](const std::string&, torch::ScalarType, int64_t) { return 0.05; });
}

// OLMo 3: no input norms (the projections keep the block inputs, a strided chunk copied once), q and k normed
// over the whole projection (one rsqrt a row), norms scaled in f before their cast (the normalised x saved in
// f), output norms, and sliding layers: every cell within 0.8% (measured 2026-12-02; the largest, streambp
// with LoRA, +0.74%). SmolLM3: its topmost layer without RoPE (no rope tables there), the lower NoPE layer's
// none in plain's graph: within 1.1%, but for two gaps of a Llama-shaped layer without q/k norms that `tiny`
// (with them) does not show, measured over the whole grid: mst with LoRA, up to 6.7% under in total and 8.3%
// of the peak above the base (the attention phase's scratch, which follows the thread count, decides which
// phase the estimate names), and checkpoint-chunked-head in bfloat16 with LoRA, 2.1% under (DPO), both the
// same with RoPE on every layer (docs/estimate.md, "Known gaps").
TEST(Estimate, MatchesTinyOlmo3AndSmolLM3) {
  ModelConfig olmo3 = find_model_preset("tiny-olmo3");
  olmo3.sliding_window = 24;  // shorter than the 32-row chunks and the 96-token sequences, as Gemma 3's
  check_tiny_grid(olmo3, [](const std::string&, torch::ScalarType, int64_t) { return 0.01; });
  // SmolLM3's NoPE layers change the layer terms only, which no objective touches: SFT alone (a third of the
  // grid's time; the GRPO cells above were measured with the whole grid).
  check_tiny_grid(find_model_preset("tiny-smollm3"),
                  [](const std::string& impl, torch::ScalarType dtype, int64_t rank) {
                    if (rank > 0 && impl == "mst") return 0.09;
                    return rank > 0 && dtype == torch::kBFloat16 ? 0.025 : 0.015;
                  },
                  {"sft"});
}

// gpt-oss: attention sinks (merged into the kernels' logsumexp, their gradient's transient in the attention
// backward), sliding and full layers, the top-k softmax router (the k weights and indices kept, no E-wide
// softmax), biased experts and the clamped SwiGLU (7 saved (Ie) tensors a routed row, 9 alive as its
// expression ends). SFT alone: the objectives sit above the layers, which the other grids cover.
// Measured 2026-12-02: plain's graph to the byte (its head phase, 8 bytes in 1.1 MB), plain with LoRA 3.6%
// over (the frozen router's normed input, as tiny-moe's); mst, whose peak is its attention backward with the
// CPU kernel's per-thread scratch, within 0.01% alone but 2.8% under with ctest's other shard beside it (the
// scratch alive follows the threads the kernel gets), and with LoRA in bfloat16 8.9% over alone, 10.5% so
// loaded (the mst-with-LoRA gap of Llama-shaped layers); the routed MLP backward, where it sets the peak
// (checkpoint's whole layer, streambp's chunks), up to 7.4% of the peak above base under: this random
// router sends 156 and 133 of 192 rows to two experts, whose transients the estimate counts at the balanced
// 48 (docs/estimate.md, "Known gaps").
TEST(Estimate, MatchesTinyGptOss) {
  ModelConfig gpt_oss = find_model_preset("tiny-gpt-oss");
  gpt_oss.sliding_window = 24;  // shorter than the 32-row chunks and the 96-token sequences, as Gemma 3's
  check_tiny_grid(gpt_oss,
                  [](const std::string& impl, torch::ScalarType, int64_t rank) {
                    if (impl == "mst") return rank > 0 ? 0.12 : 0.04;
                    return impl == "plain" ? 0.04 : 0.08;
                  },
                  {"sft"});
}

// GLM-4.5 (DeepSeek's routing without latent attention): sigmoid scores in groups, the chosen k gathered
// and renormalised, the router's float32 copies in bfloat16, each routed row weighted in float32, a shared
// expert on every row, a dense first layer (its phases the model cut after it), RoPE on half of each head.
// Measured 2026-12-02: float32 and float64 within 0.6% but mst's and streambp's chunks without LoRA (0.8%
// and 1.2% under: the shared expert's last forward moment, counted as one (R, d) beside the routed output);
// bfloat16 within 3.1% (checkpoint without LoRA 3.0% under, plain with LoRA 2.4% over).
TEST(Estimate, MatchesTinyGlm4Moe) {
  check_tiny_grid(find_model_preset("tiny-glm4-moe"),
                  [](const std::string&, torch::ScalarType dtype, int64_t) {
                    return dtype == torch::kBFloat16 ? 0.035 : 0.015;
                  },
                  {"sft"});
}

// DeepSeek-V3 shaped (multi-head latent attention: the q latent and its norm, kv_a's output kept by its
// latent norm, K and V at the qk head size, o_proj's copy of the unpadded values, released by its backward
// before the attention's) with its routing, shared expert and dense first layer; plain, checkpoint and mst
// keep the expanded form, StreamBP the latent (MatchesStreamBPThroughTheLatent below, where its attention
// sets the peak). Measured 2026-12-03: plain's graph to 8 bytes in float32 and float64, checkpoint within
// 0.25%, mst to the byte (LoRA 0.7% over); streambp, whose peak here is a chunk's routed MLP backward,
// within 1.4% (the balanced routing counted, a 64-row chunk's being uneven); bfloat16 within 3% (the
// routing's, as tiny-glm4-moe's).
TEST(Estimate, MatchesTinyDeepseek) {
  check_tiny_grid(find_model_preset("tiny-deepseek"),
                  [](const std::string& impl, torch::ScalarType dtype, int64_t) {
                    if (dtype == torch::kBFloat16) return 0.035;
                    return impl == "streambp" ? 0.02 : impl == "mst" ? 0.01 : 0.005;
                  },
                  {"sft"});
}

// StreamBP through MLA's latent (Note [StreamBP through the latent]) where attention sets the peak: a dense,
// head-heavy DeepSeek shape (16 query heads of 10 over d = 24: K and V of 320 values a token against a
// latent and RoPE key of 12), with a q latent and without (DeepSeek-V2-Lite's q_proj).
ModelConfig head_heavy_deepseek(bool q_latent) {
  ModelConfig c = find_model_preset("tiny-deepseek");
  c.name = q_latent ? "tiny-deepseek-heads16" : "tiny-deepseek-heads16-no-q-latent";
  c.heads = c.kv_heads = 16;
  c.experts = c.experts_per_token = c.expert_intermediate = c.shared_expert_intermediate = 0;
  c.routing = ModelConfig::Routing::softmax_then_topk;
  c.expert_groups = c.expert_groups_chosen = 1;
  c.routed_scaling = 1.0;
  c.norm_topk_prob = false;
  c.dense_layers.clear();
  if (!q_latent) c.mla->q_lora_rank = 0;
  return c;
}

// Over every dtype and LoRA at two lengths: the estimate equals the measured peak (measured 2026-12-03:
// without LoRA to the byte but the loss scalar; with LoRA 256 elements over, 0.1%, in the expansion's
// adapter terms), and what a token adds to the peak is the latent floor: the top layer's input and dy (2 x
// d values) and the latent rows with their gradient accumulators, (r + dr) x (s + acc) bytes, not the
// expanded K and V's 2 x Hq x hd x (s + acc).
TEST(Estimate, MatchesStreamBPThroughTheLatent) {
  for (const bool q_latent : {true, false})
    for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble})
      for (const int64_t rank : {0, 4}) {
        CellSpec c;
        c.config = head_heavy_deepseek(q_latent);
        c.impl = "streambp";
        c.dtype = dtype;
        c.examples = 2;
        c.partition = 64;
        c.logits_partition = 64;
        c.lora_rank = rank;
        const int64_t T1 = 192, T2 = 384;
        c.seq_len = T1;
        const Measured short_run = measure_cell(c);
        check_measured(c, short_run, 0.002);
        c.seq_len = T2;
        const Measured long_run = measure_cell(c);
        check_measured(c, long_run, 0.002);
        const int64_t s = c10::elementSize(dtype), acc = dtype == torch::kBFloat16 ? 4 : s;
        const ModelConfig::Mla& mla = *c.config.mla;
        const int64_t floor =
            c.examples * (2 * c.config.hidden * s + (mla.kv_lora_rank + mla.qk_rope_head_dim) * (s + acc));
        EXPECT_EQ(long_run.above_base() - short_run.above_base(), (T2 - T1) * floor) << describe(c);
        EXPECT_LT(floor * 5, c.examples * 2 * c.config.heads * c.config.head_dim * (s + acc));
      }
}

// A dense first layer under routed ones (Qwen3-MoE's mlp_only_layers, DeepSeek's first_k_dense_replace): the
// dense layer's phases are those of the model cut after it, beside the routed top layer's.
TEST(Estimate, MatchesTinyMoeWithADenseFirstLayer) {
  ModelConfig c = find_model_preset("tiny-moe");
  c.dense_layers = {0};
  check_tiny_grid(c, [](const std::string&, torch::ScalarType, int64_t) { return 0.05; }, {"sft"});
}

// Gemma 3: (1 + w) norms saving their normalised input in f, the norms on each block's output, and sliding
// layers whose attention runs in banded blocks (whole sequences) or over K/V from the window start (StreamBP
// chunks). tiny-gemma3 over every dtype, objective and LoRA; then Gemma-shaped `small` with a 512-token
// vocabulary, where the layer phases set the peak, with windows narrower than, equal to and wider than the
// partition, and whole-sequence calls of more than one banded block (T > 256).
TEST(Estimate, MatchesTinyGemma3) {
  ModelConfig config = find_model_preset("tiny-gemma3");
  config.sliding_window = 24;  // shorter than the 32-row chunks and the 96-token sequences
  check_tiny_grid(config, [](const std::string&, torch::ScalarType, int64_t) { return 0.02; });
}

// One case per strategy and dtype, so that ctest spreads the grid over the cores. A bfloat16 cell takes 2 to
// 10 s on a CPU without native bfloat16, where the recorder turns oneDNN off and LibTorch's reference loops
// run the matmuls: bfloat16 checks a window shorter and one longer than T at T = 256 (its terms are float32's
// with 2-byte elements), float32 the whole grid.
class EstimateSmallGemma3Vocab : public ::testing::TestWithParam<std::tuple<std::string, torch::ScalarType>> {
};

TEST_P(EstimateSmallGemma3Vocab, WithinTwoPercent) {
  const auto& [impl, dtype] = GetParam();
  const bool bf16 = dtype == torch::kBFloat16;
  for (const int64_t window : bf16 ? std::vector<int64_t>{64, 300} : std::vector<int64_t>{64, 128, 300})
    for (const auto& [T, p] : bf16 ? std::vector<std::pair<int64_t, int64_t>>{{256, 128}}
                                   : std::vector<std::pair<int64_t, int64_t>>{{256, 128}, {640, 128}}) {
      CellSpec c;
      c.config = with_vocab_512("small-gemma3");
      c.config.sliding_window = window;
      c.impl = impl;
      c.dtype = dtype;
      c.examples = 1;
      c.seq_len = T;
      c.partition = p;
      c.logits_partition = 128;
      check_cell(c, 0.02);
    }
}

INSTANTIATE_TEST_SUITE_P(Strategies, EstimateSmallGemma3Vocab,
                         ::testing::Combine(::testing::ValuesIn(estimated_impls()),
                                            ::testing::Values(torch::kFloat, torch::kBFloat16)),
                         [](const ::testing::TestParamInfo<EstimateSmallGemma3Vocab::ParamType>& info) {
                           return test_name(std::get<0>(info.param) + "_" +
                                            c10::toString(std::get<1>(info.param)));
                         });

// Offloaded checkpoints: the same phases with two layer inputs on the device, the rest as host bytes (exact),
// for every strategy that offloads, objective and a short last chunk.
TEST(Estimate, MatchesOffloaded) {
  for (const auto& impl : offloading_strategy_names())
    for (const std::string objective : {"sft", "dpo", "grpo"}) {
      if (impl == "mst" && objective == "dpo") continue;
      if (make_strategy(impl)->sequence_parallel()) continue;  // needs ranks: test_runner_features.cpp
      for (const auto& config : {find_model_preset("tiny"), with_vocab_512("small")}) {
        CellSpec c;
        c.config = config;
        c.impl = impl;
        c.objective = objective;
        c.examples = 2;
        c.seq_len = config.name == "tiny" ? 96 : 320;
        c.partition = config.name == "tiny" ? 32 : 128;
        c.logits_partition = 64;
        c.offload = true;
        check_cell(c, 0.02);
      }
    }
}

TEST(Estimate, OffloadNeedsCheckpoints) {
  EstimateInput in;
  in.config = find_model_preset("tiny");
  in.seq_len = 64;
  in.impl = "plain";
  in.offload = true;
  try {
    estimate_peak(in);
    FAIL() << "plain with offload was estimated";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("plain keeps no layer checkpoints to offload"), std::string::npos)
        << e.what();
  }
  in.impl = "streambp";
  const MemoryEstimate e = estimate_peak(in);
  EXPECT_EQ(e.host_bytes, (in.config.layers - 1) * 64 * in.config.hidden * 4);  // x_0 is made again
  EXPECT_EQ(e.offload_traffic_bytes, 2 * e.host_bytes);
}

// ---- offload's acceptance: `small` at T = 2048, float32, StreamBP with and without offload ---------------
//
// The peak is in a head chunk, where without offload the L - 1 stored layer inputs (x_1..x_{L-1}; x_0 is
// made again from the ids) wait on the device beside x_L; with offload none does (layer L-1's is fetched
// after the head), so the device peak falls by (L - 1) x T*d*4 bytes exactly, and the host holds those
// bytes. The estimate predicts both (device within 5%, host
// exactly), and the gradients agree to float32 round-off. (Not bit for bit: MKL's sgemm picks its thread
// count by the machine's load, and a different split sums in a different order. Offload itself only copies
// bytes; the float64 exactness suite, Offloaded/Exactness.*, holds it to plain BP.)
TEST(OffloadSmall, DevicePeakFallsByTheCheckpointBytes) {
  CellSpec c;
  c.config = find_model_preset("small");
  c.impl = "streambp";
  c.seq_len = 2048;
  c.partition = 256;
  c.logits_partition = 256;
  const Measured on_device = measure_cell(c, true);
  c.offload = true;
  const Measured offloaded = measure_cell(c, true);
  const int64_t checkpoint = c.seq_len * c.config.hidden * 4, stored = c.config.layers - 1;
  const int64_t fall = on_device.peak - offloaded.peak;
  RecordProperty("peak_on_device_bytes", std::to_string(on_device.peak));
  RecordProperty("peak_offloaded_bytes", std::to_string(offloaded.peak));
  RecordProperty("host_bytes", std::to_string(offloaded.host_peak));
  RecordProperty("fall_bytes", std::to_string(fall));
  EXPECT_EQ(on_device.base, offloaded.base);
  EXPECT_EQ(on_device.host_peak, 0);
  EXPECT_EQ(offloaded.host_peak, stored * checkpoint);
  EXPECT_EQ(fall, stored * checkpoint) << "peak " << on_device.peak << " -> " << offloaded.peak;
  const MemoryEstimate with = estimate_peak(estimate_input(c, offloaded.sequences));
  CellSpec without_spec = c;
  without_spec.offload = false;
  const MemoryEstimate without = estimate_peak(estimate_input(without_spec, on_device.sequences));
  EXPECT_LE(std::abs(relative_error(with.peak_bytes, offloaded.peak)), 0.05)
      << "estimate " << with.peak_bytes << ", measured " << offloaded.peak;
  EXPECT_EQ(with.host_bytes, offloaded.host_peak);
  EXPECT_EQ(without.peak_bytes - with.peak_bytes, fall) << "the estimate's fall against the measured one";
  ASSERT_EQ(on_device.grads.size(), offloaded.grads.size());
  double worst = 0;
  for (size_t i = 0; i < on_device.grads.size(); ++i) {
    const auto& a = on_device.grads[i];
    const double rel = (offloaded.grads[i] - a).norm().item<double>() / (a.norm().item<double>() + 1e-30);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-5) << "gradient " << i;
  }
  RecordProperty("worst_grad_rel_l2", fmt::format("{:.3e}", worst));
}

// ---- the estimate's acceptance grid -------------------------------------------------------------------

class EstimateSmall : public ::testing::TestWithParam<std::tuple<std::string, int64_t>> {};

TEST_P(EstimateSmall, PeakWithinTenPercent) {
  const auto& [impl, T] = GetParam();
  const char* long_env = std::getenv("BPBENCH_ESTIMATE_LONG");
  const bool run_long = long_env && std::string(long_env) == "1";
  if (T > 1024 && !run_long)
    GTEST_SKIP() << "T > 1024 takes 5 s to minutes a cell on 2 cores (the same peak phase as T <= 1024): "
                    "set BPBENCH_ESTIMATE_LONG=1 to run it";
  CellSpec c;
  c.config = find_model_preset("small");
  c.impl = impl;
  c.seq_len = T;
  c.partition = 256;
  c.logits_partition = 256;
  const Measured m = measure_cell(c);
  const MemoryEstimate e = estimate_peak(estimate_input(c, m.sequences));
  const double total = relative_error(e.peak_bytes, m.peak),
               above = relative_error(e.peak_above_base, m.above_base());
  RecordProperty("measured_peak_bytes", std::to_string(m.peak));
  RecordProperty("estimated_peak_bytes", std::to_string(e.peak_bytes));
  RecordProperty("total_error_pct", fmt::format("{:+.4f}", 100 * total));
  RecordProperty("measured_above_base_bytes", std::to_string(m.above_base()));
  RecordProperty("estimated_above_base_bytes", std::to_string(e.peak_above_base));
  RecordProperty("above_base_error_pct", fmt::format("{:+.4f}", 100 * above));
  RecordProperty("dominant_phase", e.dominant_phase);
  EXPECT_LE(std::abs(total), 0.10) << "total: estimate " << e.peak_bytes << ", measured " << m.peak;
  EXPECT_LE(std::abs(above), 0.10) << "above base: estimate " << e.peak_above_base << ", measured "
                                   << m.above_base() << " (" << e.dominant_phase << ")";
  EXPECT_EQ(e.base, m.base);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, EstimateSmall,
    ::testing::Combine(::testing::Values("plain", "checkpoint", "checkpoint-chunked-head", "mst", "streambp"),
                       ::testing::Values(512, 1024, 2048, 4096, 8192)),
    [](const ::testing::TestParamInfo<EstimateSmall::ParamType>& info) {
      return test_name(std::get<0>(info.param) + "_T" + std::to_string(std::get<1>(info.param)));
    });

}  // namespace
}  // namespace bpbench::test_estimate
