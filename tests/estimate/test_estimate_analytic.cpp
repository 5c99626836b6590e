// test_estimate_analytic.cpp: the estimate checked without running a step: what it refuses, its base, its
// phases and their order, the command's output, a training run's terms, and the CUDA variant (device "cuda")
// whose attention terms each test states by hand from PyTorch's CUDA kernels. test_estimate.cpp holds the
// estimate against the tracking allocator's measurements.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/cli/estimate_command.h"
#include "harness/estimate/estimate.h"
#include "harness/model/model_config.h"
#include "harness/objectives/objective.h"
#include "impls/interface/strategy.h"

namespace bpbench::test_estimate_analytic {
namespace {

// ---- the estimate itself ---------------------------------------------------------------------------------

TEST(Estimate, RejectsWhatItCannotEstimate) {
  EstimateInput in;
  in.config = find_model_preset("tiny");
  in.seq_len = 64;
  in.impl = "no-such-impl";
  EXPECT_THROW(estimate_peak(in), std::invalid_argument);
  in.impl = "streambp-dist";
  EXPECT_THROW(estimate_peak(in), std::invalid_argument);
  in.impl = "streambp";
  in.objective = "ppo";
  EXPECT_THROW(estimate_peak(in), std::invalid_argument);
  in.objective = "sft";
  in.dtype = torch::kHalf;
  EXPECT_THROW(estimate_peak(in), std::invalid_argument);
  in.dtype = torch::kFloat;
  in.seq_len = 0;
  EXPECT_THROW(estimate_peak(in), std::invalid_argument);
  in.seq_len = 64;
  EXPECT_NO_THROW(estimate_peak(in));
  EXPECT_EQ(sequences_for("sft", 3, 8), 3);
  EXPECT_EQ(sequences_for("dpo", 3, 8), 6);
  EXPECT_EQ(sequences_for("grpo", 3, 8), 24);
  EXPECT_THROW(sequences_for("ppo", 1, 1), std::invalid_argument);
}

TEST(Estimate, BaseIsTheModelsOwnTensors) {
  for (const int64_t rank : {0, 4}) {
    for (const bool tied : {false, true}) {
      for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble}) {
        ModelConfig config = find_model_preset("tiny");
        config.tie_embeddings = tied;
        config.attention_bias = true;
        Model m = Model::random(config, torch::TensorOptions().dtype(dtype), 0);
        if (rank > 0) m.add_lora(rank, 8.0, 0);
        int64_t params = 0, grads = 0;
        for (const auto& p : m.named_parameters()) params += p.tensor.nbytes();
        for (const auto& p : m.trainable_parameters()) grads += p.tensor.nbytes();
        EstimateInput in;
        in.config = config;
        in.seq_len = 32;
        in.sequences = 2;
        in.dtype = dtype;
        in.impl = "plain";
        in.lora_rank = rank;
        const MemoryEstimate e = estimate_peak(in);
        EXPECT_EQ(e.params, params) << "rank " << rank << " tied " << tied << " " << c10::toString(dtype);
        EXPECT_EQ(e.grads, grads) << "rank " << rank << " tied " << tied << " " << c10::toString(dtype);
        EXPECT_EQ(e.base, e.params + e.grads + e.batch);
        EXPECT_EQ(e.peak_bytes, e.base + e.peak_above_base);
      }
    }
  }
}

TEST(Estimate, PhasesAndOrderingOnSmall) {
  EstimateInput in;
  in.config = find_model_preset("small");
  in.seq_len = 8192;
  in.partition = 256;
  in.logits_partition = 256;
  auto est = [&](const std::string& impl) {
    in.impl = impl;
    return estimate_peak(in);
  };
  const auto plain = est("plain"), ckpt = est("checkpoint"), chunked = est("checkpoint-chunked-head"),
             mst = est("mst"), sbp = est("streambp");
  // The paper's ordering at long T: StreamBP far below every checkpointing variant, plain above them all.
  EXPECT_LT(sbp.peak_bytes, mst.peak_bytes);
  EXPECT_LT(mst.peak_bytes, chunked.peak_bytes);  // fused attention: MsT's MLP chunking shows, as on a GPU
  EXPECT_LE(chunked.peak_bytes, ckpt.peak_bytes);
  EXPECT_LT(ckpt.peak_bytes, plain.peak_bytes);
  // With no T x T scores, what sets each peak at 8192: the full (T, V) logits; the whole-sequence MLP
  // backward; the whole-sequence no-grad forward, whose MLP holds four (T, I) temporaries at once (measured
  // to the byte by EstimateSmall mst_T8192); one head chunk. StreamBP's layers take over by 65536: what a
  // layer's backward holds per token (dy, K, V, dK, dV: 3 KB) is 2 KB above the head's (x_L becoming dx:
  // 1 KB), so the head chunk's logits (98 MB) set the peak up to about 48k.
  EXPECT_EQ(ckpt.dominant_phase, "head");
  EXPECT_EQ(chunked.dominant_phase, "layer mlp backward");
  EXPECT_EQ(mst.dominant_phase, "forward");
  EXPECT_EQ(sbp.dominant_phase, "head chunk");
  in.seq_len = 32768;
  EXPECT_EQ(est("streambp").dominant_phase, "head chunk");
  in.seq_len = 65536;
  EXPECT_EQ(est("streambp").dominant_phase, "layer mlp backward");
  in.seq_len = 1024;
  EXPECT_EQ(est("checkpoint").dominant_phase, "head");  // full (T, V) logits at 1024
  EXPECT_EQ(est("streambp").dominant_phase, "head chunk");
  for (const auto& e : {plain, ckpt, chunked, mst, sbp}) {
    EXPECT_FALSE(e.phases.empty());
    int64_t top = 0;
    for (const auto& p : e.phases) {
      int64_t sum = 0;
      for (const auto& t : p.terms) sum += t.bytes;
      EXPECT_EQ(sum, p.bytes) << p.name;
      top = std::max(top, p.bytes);
    }
    EXPECT_EQ(top, e.peak_above_base);
    EXPECT_GT(e.checkpoints, 0);
    EXPECT_GT(e.layer_working_set, 0);
    EXPECT_GT(e.head_working_set, 0);
  }
}

// A sequence-parallel rank streams its head over its own Ts = ceil(T / P) rows: a logits partition larger
// than Ts is a chunk of Ts rows, as the strategy runs it. (It once counted min(c_l, T) rows: on `small` at
// T = 256 over 4 ranks with c_l = 128 the estimate was 160,708,096 bytes, 3.6% above the measured
// 155,138,820 of RunnerFeatures' per-rank scenario at that length, whose peak is the embedding backward.)
TEST(Estimate, SequenceParallelHeadChunkIsAtMostTheRanksRows) {
  EstimateInput in;
  in.config = find_model_preset("small");
  in.impl = "streambp-ulysses";
  in.ranks = 4;
  in.seq_len = 256;  // Ts = 64
  in.partition = 128;
  auto head_chunk = [&](int64_t logits_partition) {
    in.logits_partition = logits_partition;
    const MemoryEstimate e = estimate_peak(in);
    const auto phase = std::find_if(e.phases.begin(), e.phases.end(),
                                    [](const PhaseEstimate& p) { return p.name == "head chunk"; });
    EXPECT_NE(phase, e.phases.end());
    return phase == e.phases.end() ? int64_t{-1} : phase->bytes;
  };
  const int64_t at_rows = head_chunk(64);
  EXPECT_EQ(head_chunk(128), at_rows);
  EXPECT_EQ(head_chunk(256), at_rows);
  EXPECT_LT(head_chunk(32), at_rows);  // a smaller chunk is still a smaller phase
  in.logits_partition = 128;
  EXPECT_EQ(estimate_peak(in).dominant_phase, "embedding backward");
}

TEST(Estimate, CommandPrintsEveryImpl) {
  std::ostringstream out;
  EXPECT_EQ(
      estimate_command(
          {"--model", "small", "--seq-len", "4096", "--partition", "256", "--logits-partition", "256"}, out),
      0);
  for (const auto& impl : estimated_impls()) EXPECT_NE(out.str().find(impl), std::string::npos) << out.str();
  std::ostringstream verbose;
  estimate_command({"--model", "tiny", "--seq-len", "64", "--impl", "streambp", "--dtype", "bfloat16",
                    "--objective", "grpo", "--batch", "2", "--group", "4", "--lora-rank", "4", "--verbose"},
                   verbose);
  EXPECT_NE(verbose.str().find("N=8"), std::string::npos) << verbose.str();
  EXPECT_NE(verbose.str().find("layer attention backward"), std::string::npos) << verbose.str();
  std::ostringstream sink;
  EXPECT_THROW(estimate_command({"--model", "small"}, sink), std::invalid_argument);
  EXPECT_THROW(estimate_command({"--model", "small", "--seq-len", "x"}, sink), std::invalid_argument);
  EXPECT_THROW(estimate_command({"--model", "small", "--seq-len", "64", "--impl", "nope"}, sink),
               std::invalid_argument);
  EXPECT_THROW(estimate_command({"--model", "small", "--seq-len", "64", "--dtype", "fp8"}, sink),
               std::invalid_argument);
  EXPECT_THROW(estimate_command({"--model", "nope", "--seq-len", "64"}, sink), std::invalid_argument);
}

// A training run: AdamW's state on every phase from step 2 on, and the optimizer's own step (measured
// against the run's peak in test_train.cpp, TrainEstimate).
TEST(Estimate, TrainingRunAddsTheOptimizerStateAndStep) {
  EstimateInput in;
  in.config = find_model_preset("small");
  in.seq_len = 256;
  in.impl = "streambp";
  in.partition = 64;
  in.logits_partition = 64;
  in.dtype = torch::kBFloat16;
  const MemoryEstimate step = estimate_peak(in);
  in.train = TrainEstimate{/*steps=*/5, /*batches=*/3, /*mixed=*/true};
  const MemoryEstimate run = estimate_peak(in);
  const int64_t P = in.config.parameter_count();
  EXPECT_EQ(run.optimizer, 16 * P);  // float32 masters, their gradients, exp_avg, exp_avg_sq
  EXPECT_EQ(run.batch, 3 * step.batch);
  const int64_t largest = in.config.vocab * in.config.hidden;  // the embedding
  EXPECT_EQ(run.phases.back().name, "optimizer step");
  EXPECT_EQ(run.phases.back().bytes, 16 * P + 2 * largest * 4);
  for (size_t i = 0; i + 1 < run.phases.size(); ++i)
    EXPECT_EQ(run.phases[i].bytes, step.phases[i].bytes + 16 * P) << run.phases[i].name;
  in.train->steps = 1;  // one step: only the masters are alive in its forward + backward
  EXPECT_EQ(estimate_peak(in).phases.front().bytes, step.phases.front().bytes + 8 * P);
  in.train = TrainEstimate{2, 1, /*mixed=*/false};  // moments in bfloat16
  EXPECT_EQ(estimate_peak(in).optimizer, 2 * P * 2);

  std::ostringstream out;
  EXPECT_EQ(estimate_command({"--model", "tiny", "--seq-len", "32", "--dtype", "bfloat16", "--train", "mixed",
                              "--verbose"},
                             out),
            0);
  EXPECT_NE(out.str().find("optimizer step"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("training run of 2 AdamW steps, precision mixed"), std::string::npos) << out.str();
  std::ostringstream sink;
  EXPECT_THROW(estimate_command({"--model", "tiny", "--seq-len", "32", "--train", "mixed"}, sink),
               std::invalid_argument);  // float32 weights have no float32 masters to keep
  EXPECT_THROW(estimate_command({"--model", "tiny", "--seq-len", "32", "--train", "fp8"}, sink),
               std::invalid_argument);
}

// ---- the CUDA variant (device "cuda"): analytic, checked here against the formulas of docs/estimate.md
// --
//
// Only the attention terms differ from the CPU variant: PyTorch's CUDA kernels allocate other buffers in
// their backward (flash_api.cpp mha_bwd; attention_backward.cu _efficient_attention_backward), and the
// memory-efficient kernel takes K and V repeated to Hq heads (attention_gpu.cpp). Each test states the bytes
// by hand from the shapes. `small` has GQA (Hq 4, Hkv 2, hd 64, Aq 256, Akv 128) with a head dim both CUDA
// kernels take; T = 200 is not a multiple of 128, so flash's rounding shows.

const PhaseEstimate& phase_named(const MemoryEstimate& e, const std::string& name) {
  for (const auto& p : e.phases)
    if (p.name == name) return p;
  throw std::runtime_error("no phase '" + name + "'");
}

// Bytes of the terms of `p` whose name starts with `prefix` (0: none).
int64_t term_bytes(const PhaseEstimate& p, const std::string& prefix) {
  int64_t bytes = 0;
  for (const auto& t : p.terms)
    if (t.name.rfind(prefix, 0) == 0) bytes += t.bytes;
  return bytes;
}

EstimateInput small_cell(torch::ScalarType dtype, const std::string& impl, int64_t T,
                         const std::string& device) {
  EstimateInput in;
  in.config = find_model_preset("small");
  in.seq_len = T;
  in.sequences = 2;
  in.dtype = dtype;
  in.impl = impl;
  in.threads = 1;
  in.device = device;
  return in;
}

// The CPU fused kernel's backward scratch with one thread over R = E = T (what the CUDA variant drops): query
// blocks of qb = 64 rows (T in [192, 768)) by kb = min(T, 512) keys; scores and their gradient in float32
// (plus bfloat16 copies for a bfloat16 model) and a float32 row sum.
int64_t cpu_backward_scratch(int64_t T, int64_t s) {
  const int64_t qb = 64, kb = std::min<int64_t>(T, 512);
  return 2 * qb * kb * (4 + (s == 2 ? s : 0)) + qb * 4;
}

// bfloat16 runs FlashAttention-2. Its backward holds, beside dQ, dK, dV, a float32 dq accumulator
// (N, round128(T), Hq, hd_r) and softmax_d (N, Hq, round128(T)) float32, and with GQA dK/dV expanded to Hq
// heads (N, T, Hq, hd) each; it has no per-thread scratch. Flash saves what the CPU kernel saves, so nothing
// else changes.
// offload parameters (ZeRO-Infinity): zero3's L layer shards move from the device's base to the host, and
// every step copies each in twice (its two gathers); refused outside zero3 and, training, without the
// optimizer offloaded.
TEST(Estimate, OffloadedParametersMoveTheLayerShardsToTheHost) {
  EstimateInput in;
  in.config = find_model_preset("small");
  in.seq_len = 512;
  in.impl = "streambp-ring";
  in.partition = 128;
  in.logits_partition = 128;
  in.ranks = 3;
  in.sharding = "zero3";
  const MemoryEstimate kept = estimate_peak(in);
  in.offload_params = true;
  const MemoryEstimate offloaded = estimate_peak(in);
  const ModelConfig& c = in.config;
  const int64_t layer = (c.parameter_count() - 2 * c.vocab * c.hidden - c.hidden) / c.layers;  // untied
  const int64_t shards = c.layers * (layer + 2) / 3 * 4;  // padded to a multiple of 3, float32
  EXPECT_EQ(kept.peak_bytes - offloaded.peak_bytes, shards);
  EXPECT_EQ(kept.base - offloaded.base, shards);
  EXPECT_EQ(offloaded.host_bytes, shards);
  EXPECT_EQ(offloaded.offload_traffic_bytes, 2 * shards);
  EXPECT_EQ(offloaded.dominant_phase, kept.dominant_phase);
  in.sharding = "zero2";
  EXPECT_THROW(estimate_peak(in), std::invalid_argument);
  in.sharding = "zero3";
  in.train = TrainEstimate{};
  try {
    estimate_peak(in);
    ADD_FAILURE() << "a training run with the parameters offloaded and the optimizer on the device";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "estimate: offload parameters in a training run updates the host shards with the host's "
              "optimizer (valid: optimizer,parameters or checkpoints,optimizer,parameters)");
  }
  in.train->offload_optimizer = true;
  const MemoryEstimate run = estimate_peak(in);
  EXPECT_EQ(run.host_bytes - shards, [&] {
    EstimateInput optimizer_only = in;
    optimizer_only.offload_params = false;
    return estimate_peak(optimizer_only).host_bytes;
  }());
}

TEST(EstimateCuda, FlashBackwardHoldsDqAccumulatorAndExpandedDkDv) {
  const int64_t N = 2, T = 200, T128 = 256, Hq = 4, hd = 64, Aq = 256, s = 2;
  const MemoryEstimate cpu = estimate_peak(small_cell(torch::kBFloat16, "checkpoint", T, "cpu"));
  const MemoryEstimate cuda = estimate_peak(small_cell(torch::kBFloat16, "checkpoint", T, "cuda"));
  EXPECT_EQ(cpu.attention_kernel, "cpu-fused");
  EXPECT_EQ(cuda.attention_kernel, "flash");
  const int64_t dq_accum = N * T128 * Hq * hd * 4;  // hd_r = 64, already a multiple of 32
  const int64_t softmax_d = N * Hq * T128 * 4;
  const int64_t expanded = 2 * N * T * Aq * s;  // dk_expanded, dv_expanded
  EXPECT_EQ(dq_accum, 524288);
  EXPECT_EQ(softmax_d, 8192);
  EXPECT_EQ(expanded, 409600);
  const auto &cuda_attn = phase_named(cuda, "layer attention backward"),
             &cpu_attn = phase_named(cpu, "layer attention backward");
  EXPECT_EQ(term_bytes(cuda_attn, "flash backward: float32 dq accumulator"), dq_accum);
  EXPECT_EQ(term_bytes(cuda_attn, "flash backward: softmax_d"), softmax_d);
  EXPECT_EQ(term_bytes(cuda_attn, "flash backward, GQA: dK, dV expanded to Hq heads"), expanded);
  EXPECT_EQ(cuda_attn.bytes - cpu_attn.bytes, dq_accum + softmax_d + expanded - cpu_backward_scratch(T, s));
  for (const char* name : {"head", "layer mlp backward"})
    EXPECT_EQ(phase_named(cuda, name).bytes, phase_named(cpu, name).bytes) << name;
  EXPECT_EQ(cuda.base, cpu.base);

  // Without GQA dk_expanded and dv_expanded are dK and dV themselves: no term.
  EstimateInput mha = small_cell(torch::kBFloat16, "checkpoint", T, "cuda");
  mha.config.kv_heads = mha.config.heads;
  EXPECT_EQ(term_bytes(phase_named(estimate_peak(mha), "layer attention backward"), "flash backward, GQA"),
            0);

  // A StreamBP chunk's forward is one call of c queries over its e keys (flash is bottom-right causal); its
  // backward adds dK, dV into StreamBP's accumulators by key blocks (attention_gpu.cpp: FlashSinkAttention)
  // and the blocks' dQ into a float32 sum: the prefix's 192 keys in one block (up to 8192 keys a block), then
  // the diagonal 64. T = 256, c = 64, the last chunk sees all 256 keys; its accumulator is 128 rows; flash's
  // GQA expansion covers one block.
  EstimateInput chunked = small_cell(torch::kBFloat16, "streambp", 256, "cuda");
  chunked.partition = 64;
  chunked.logits_partition = 64;
  const MemoryEstimate streamed = estimate_peak(chunked);
  const auto& chunk = phase_named(streamed, "layer attention backward");
  const int64_t c = 64, widest_block = 192;
  EXPECT_EQ(term_bytes(chunk, "attention backward (flash) into dK, dV by key blocks"),
            N * (2 * c * Aq + 2 * widest_block * 128) * s);
  EXPECT_EQ(term_bytes(chunk, "the blocks' dQ summed in float32"), N * c * Aq * 4);
  EXPECT_EQ(term_bytes(chunk, "flash backward: float32 dq accumulator"), N * 128 * Hq * hd * 4);
  EXPECT_EQ(term_bytes(chunk, "flash backward, GQA: one block's dK, dV expanded to Hq heads"),
            2 * N * widest_block * Aq * s);
  EXPECT_EQ(term_bytes(chunk, "flash backward, GQA: dK, dV expanded to Hq heads"), 0);  // all e keys' no more
  EXPECT_EQ(term_bytes(chunk, "attention backward, two calls"), 0);                     // the CPU kernel's
}

// float32 runs the memory-efficient kernel, which takes K and V repeated to Hq heads: the graph saves those
// copies instead of K and V (2 x N*T*(Aq - Akv)*s more wherever a layer's graph is alive), its backward
// returns dK/dV per query head (as much again), and it allocates delta and a float32 dQ workspace instead of
// the CPU kernel's scratch. StreamBP holds K and V itself, so its chunk graph adds the repeated K[:e], V[:e];
// the no-grad forward holds them for each chunk's call.
TEST(EstimateCuda, EfficientFloat32RepeatsKvToQueryHeads) {
  const int64_t N = 2, T = 200, Hq = 4, Aq = 256, Akv = 128, s = 4;
  const MemoryEstimate cpu = estimate_peak(small_cell(torch::kFloat, "checkpoint", T, "cpu"));
  const MemoryEstimate cuda = estimate_peak(small_cell(torch::kFloat, "checkpoint", T, "cuda"));
  EXPECT_EQ(cuda.attention_kernel, "efficient");
  const int64_t repeat_extra = 2 * N * T * (Aq - Akv) * s;  // repeated K, V (Hq heads) in place of K, V
  EXPECT_EQ(repeat_extra, 409600);
  // kernel_backward.h, float32 on sm80+, hd 64: the 64x64 kernel; per (sequence, head) ceil(T/64) = 4
  // GradQTempStorage tiles of 16 + 64*64*4 bytes. delta: (N, Hq, T) float32; building it for float32 holds a
  // float32 (N, T, Hq, hd) product, its sum and the copy at once.
  const int64_t workspace = N * Hq * 4 * (16 + 64 * 64 * 4), delta = N * Hq * T * 4;
  const int64_t scratch = std::max(N * T * Aq * 4 + 2 * delta, delta + workspace);
  EXPECT_EQ(scratch, 531200);
  const auto &cuda_attn = phase_named(cuda, "layer attention backward"),
             &cpu_attn = phase_named(cpu, "layer attention backward");
  EXPECT_EQ(term_bytes(cuda_attn, "K path saved + K, V repeated to Hq heads"),
            term_bytes(cpu_attn, "K path saved + K + dV") + repeat_extra);
  EXPECT_EQ(term_bytes(cuda_attn, "attention backward (efficient): dO, dQ, and dK, dV per query head"),
            N * (2 * T * Aq + 2 * T * Aq) * s);
  EXPECT_EQ(term_bytes(cuda_attn, "efficient backward: delta and float32 dQ workspace"), scratch);
  EXPECT_EQ(cuda_attn.bytes - cpu_attn.bytes,
            repeat_extra + repeat_extra + scratch - cpu_backward_scratch(T, s));
  EXPECT_EQ(phase_named(cuda, "layer mlp backward").bytes - phase_named(cpu, "layer mlp backward").bytes,
            repeat_extra);
  // plain: every layer's graph holds the repeated K and V.
  const MemoryEstimate plain_cpu = estimate_peak(small_cell(torch::kFloat, "plain", T, "cpu"));
  const MemoryEstimate plain_cuda = estimate_peak(small_cell(torch::kFloat, "plain", T, "cuda"));
  EXPECT_EQ(phase_named(plain_cuda, "head").bytes - phase_named(plain_cpu, "head").bytes,
            find_model_preset("small").layers * repeat_extra);

  // StreamBP, T = 4096, c = 256: the no-grad forward's last chunk holds K, V repeated over all T keys, and
  // each chunk's graph the repeated K[:e], V[:e] (e = T for the last one) beside StreamBP's own K and V.
  EstimateInput sbp = small_cell(torch::kFloat, "streambp", 4096, "cuda");
  sbp.partition = 256;
  sbp.logits_partition = 256;
  const MemoryEstimate streamed = estimate_peak(sbp);
  const int64_t repeat_all = 2 * N * 4096 * Aq * s;
  EXPECT_EQ(repeat_all, 16777216);
  EXPECT_EQ(term_bytes(phase_named(streamed, "forward"), "the efficient kernel's K and V repeated"),
            repeat_all);
  EXPECT_EQ(
      term_bytes(phase_named(streamed, "layer attention backward"), "chunk graph: the efficient kernel's"),
      repeat_all);
  EXPECT_EQ(term_bytes(phase_named(streamed, "layer mlp backward"), "chunk graph: the efficient kernel's"),
            repeat_all);
  sbp.device = "cpu";
  EXPECT_EQ(term_bytes(phase_named(estimate_peak(sbp), "forward"), "the efficient kernel's"), 0);

  // Without GQA the kernel gets K and V as they are (views, no copy): no repeat anywhere.
  EstimateInput mha = small_cell(torch::kFloat, "streambp", 4096, "cuda");
  mha.config.kv_heads = mha.config.heads;
  mha.partition = 256;
  mha.logits_partition = 256;
  const MemoryEstimate no_gqa = estimate_peak(mha);
  for (const auto& p : no_gqa.phases)
    EXPECT_EQ(term_bytes(p, "chunk graph: the efficient kernel's") + term_bytes(p, "the efficient kernel's"),
              0)
        << p.name;
}

TEST(EstimateCuda, RejectsDevicesAndKernelsItDoesNotModel) {
  auto message = [](const EstimateInput& in) -> std::string {
    try {
      estimate_peak(in);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(no exception)";
  };
  EstimateInput in = small_cell(torch::kFloat, "streambp", 256, "gpu");
  EXPECT_EQ(message(in), "estimate: unknown device 'gpu' (valid: cpu, cuda)");
  in.device = "cuda";
  in.dtype = torch::kDouble;  // CUDA float64: the math kernel, scores materialised
  EXPECT_NE(message(in).find("runs the math attention kernel"), std::string::npos) << message(in);
  in.dtype = torch::kBFloat16;
  in.config = find_model_preset("tiny");  // hd 6: not a multiple of 8, math again
  EXPECT_NE(message(in).find("runs the math attention kernel"), std::string::npos) << message(in);
  in.config = find_model_preset("small");
  in.config.head_dim = 264;  // beyond flash's 256: the efficient kernel in bfloat16
  EXPECT_NE(message(in).find("memory-efficient kernel in half precision"), std::string::npos) << message(in);
  in.config = find_model_preset("tiny");
  in.device = "cpu";  // on CPU every kernel case is the fused kernel
  in.dtype = torch::kDouble;
  EXPECT_NO_THROW(estimate_peak(in));
}

TEST(EstimateCuda, CommandTakesDevice) {
  std::ostringstream cuda, cpu;
  const std::vector<std::string> args = {"--model",     "small",   "--seq-len",          "1024",
                                         "--partition", "256",     "--logits-partition", "256",
                                         "--dtype",     "bfloat16"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = args;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  EXPECT_EQ(estimate_command(with({"--device", "cuda"}), cuda), 0);
  EXPECT_EQ(estimate_command(args, cpu), 0);
  EXPECT_NE(cuda.str().find("on cuda: flash attention"), std::string::npos) << cuda.str();
  EXPECT_EQ(cpu.str().find("cuda"), std::string::npos) << cpu.str();  // the CPU output is as it was
  std::ostringstream verbose;
  estimate_command(with({"--device", "cuda", "--impl", "checkpoint", "--verbose"}), verbose);
  EXPECT_NE(verbose.str().find("flash backward: float32 dq accumulator"), std::string::npos) << verbose.str();
  std::ostringstream sink;
  try {
    estimate_command(with({"--device", "gpu"}), sink);
    ADD_FAILURE() << "--device gpu was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "estimate: unknown device 'gpu' (valid: cpu, cuda)");
  }
}

}  // namespace
}  // namespace bpbench::test_estimate_analytic
