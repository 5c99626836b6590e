// estimate.h: the analytic peak memory of one forward + backward of each strategy, from the model's
// dimensions.
//
// The estimate is an inventory: for every phase a strategy goes through (forward, head, a layer's attention
// or MLP backward) it lists the tensors alive at that phase's high point as named terms (a count times a
// shape from the dimensions, e.g. "3 x N*c_l*V*4: log-probs, their gradient, the logits' gradient"), and the
// peak is the largest phase. It is meant to match the harness's own CPU tracking allocator
// (profiles/memory.h), which counts every LibTorch tensor allocation: base (params + grads + batch, live when
// the step starts) plus the step's peak above it. The formulas, and which tensor each term is, are in
// docs/estimate.md.
//
// `device` picks the attention kernel the terms model (harness/model/attention_kernels.h): on "cpu" the fused
// CPU kernel (the variant measured to the byte); on "cuda" FlashAttention-2 (bfloat16) or the
// memory-efficient kernel (float32), whose backward buffers differ (flash: a float32 dq accumulator and, with
// GQA, dK/dV expanded to Hq heads; efficient: K/V repeated to Hq heads). Every other term is the same on
// both: the CUDA variant is derived from PyTorch's source, not yet measured.
//
// With `train` set it is the peak of a training run instead: AdamW's tensors are alive through every step
// after the first, and the optimizer's own step is one more phase (docs/estimate.md, "Training runs").
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "harness/model/memory_terms.h"
#include "harness/model/model_config.h"

namespace bpbench {

// A training run (measure.train, harness/run/train_loop.h) around the step: AdamW's moments, with precision
// "mixed" float32 master weights and their gradients, and every batch of the run built before it.
struct TrainEstimate {
  int64_t steps = 1;       // from step 2 on every forward + backward runs with the moments alive
  int64_t batches = 1;     // training + held-out batches, all alive through the run
  bool mixed = false;      // precision "mixed" (else "model": the moments in the model dtype)
  int64_t grad_accum = 1;  // micro-batches per step: distributed, the first's gradient shards live on
  // AdamW's tensors and its step in host memory (offload optimizer): host bytes, not device bytes.
  bool offload_optimizer = false;
};

struct EstimateInput {
  ModelConfig config;
  int64_t seq_len = 0;           // T
  int64_t sequences = 1;         // N rows: SFT batch B, DPO 2B, GRPO B*G (sequences_for() computes it)
  int64_t partition = 0;         // c: rows per layer chunk (<= 0 or > T: T)
  int64_t logits_partition = 0;  // c_l: rows per LM-head chunk (<= 0 or > T: T)
  torch::ScalarType dtype = torch::kFloat;  // model dtype: float32, bfloat16 or float64
  std::string impl;               // a strategy whose estimated() is true (impls/interface/strategy.h)
  std::string objective = "sft";  // sft | dpo | grpo
  int64_t lora_rank = 0;          // 0: full fine-tuning
  int64_t threads = 1;   // CPU threads: the fused attention kernel allocates a scratch block per thread
  bool offload = false;  // layer checkpoints in host memory (impls/machinery/offload.h); not for plain
  // cpu | cuda: whose attention kernel the terms model. cuda takes bfloat16 (flash) and float32 (efficient)
  // with a head dim that is a multiple of 8; float64 there runs the math kernel, which is not modelled.
  std::string device = "cpu";
  std::optional<TrainEstimate> train;  // set: the peak of a training run, not of one step
  // Processes of a data-parallel strategy (streambp-dist, checkpoint-dist; >= 2, and 1 for every other):
  // the estimate is one rank's, `sequences` its rows.
  int64_t ranks = 1;
  // The ring strategies' 2-D mesh (impls/machinery/ring_layer.h): Ulysses over groups of this many of the
  // ranks inside rings of ranks / ulysses_degree; 1 for every other strategy.
  int64_t ulysses_degree = 1;
  // With ranks >= 2, impls/machinery/dist_common.h: sharding_names(). none: whole gradients and optimizer on
  // every rank; zero1: the optimizer sharded; zero2: the gradients too; zero3: the layers' parameters too,
  // gathered per layer for the forward and the backward.
  std::string sharding = "zero2";
  // offload parameters (ZeRO-Infinity's offload_param), with sharding zero3: the layer shards in host memory,
  // each copied to the device for its gather; in a training run with the optimizer offloaded too.
  bool offload_params = false;
};

struct MemoryEstimate {
  int64_t params = 0;       // model weights (+ LoRA adapters)
  int64_t grads = 0;        // .grad of every trainable parameter (pre-allocated, as the runner does); data
                            // parallel: this rank's gradient shards, the previous step's at the step's start
  int64_t batch = 0;        // token ids, targets and objective extras (training: of every batch)
  int64_t base = 0;         // params + grads + batch: live when the step (or training run) starts
  int64_t optimizer = 0;    // training: AdamW's moments (mixed: + float32 masters and their gradients)
  int64_t checkpoints = 0;  // kept across the backward at the peak phase (layer inputs; plain: the graph)
  int64_t layer_working_set = 0;      // largest layer-backward phase, less its checkpoints
  int64_t head_working_set = 0;       // head phase (logits and their gradients), less its checkpoints
  int64_t peak_above_base = 0;        // the largest phase
  int64_t peak_bytes = 0;             // base + peak_above_base: comparable to the measured memory.peak_bytes
  std::string dominant_phase;         // the phase that sets the peak
  std::string attention_kernel;       // what the attention terms model: cpu-fused, flash or efficient
  std::vector<PhaseEstimate> phases;  // every phase considered, in the order the strategy runs them
  int64_t host_bytes = 0;             // offload: the host buffers of the layer checkpoints (else 0)
  // offload: bytes copied between device and host per step (PCIe; a training step's, its micro-batches'
  // included), what a cell measures as memory.host_copy_bytes (profiles/host_memory.h)
  int64_t offload_traffic_bytes = 0;
  int64_t micro_batch_traffic_bytes = 0;  // of them, each micro-batch's (the checkpoints', the parameter
                                          // shards'); the rest, the optimizer's, once a step
};

// The model's terms for `in` (memory_terms.h), as estimate_peak takes them: the whole step's (T, N as given,
// ranks, sharding's whole_gradients, the gradient groups) with the attention kernel of `in.device`. The
// collective estimate (estimate_comm.h) reads the same groups.
MemoryTerms estimate_terms(const EstimateInput& in);

// Throws std::invalid_argument for an impl without an estimate, a bad dtype or device, non-positive T / N, or
// a CUDA cell whose attention kernel is not modelled (math: float64 or a head dim not a multiple of 8).
MemoryEstimate estimate_peak(const EstimateInput& in);

// Whether every byte count of the estimate at in.seq_len stays far inside int64 (whose wrap would print a
// smaller peak): a coarse bound of its largest terms (every head's scores, the logits, every layer's
// activations, the parameters with their gradients and two moments), in 8-byte elements and 64 times over,
// is below 2^63 bytes: lengths up to about 1.4e17 bytes of such terms. Beyond it estimate_peak refuses the
// length, and a max-length search counts it as not fitting (no budget holds that much).
bool estimate_bytes_fit_in_int64(const EstimateInput& in);

// Throws std::invalid_argument naming what is wrong with `in` (unknown impl, objective, device or dtype,
// non-positive sizes, offload with plain). Both estimates start with it.
void check_estimate_input(const EstimateInput& in);
// Its check of `sharding` (dist_common.h: sharding_names), which the collectives' estimate shares.
void check_estimate_sharding(const std::string& sharding);
// Whether `impl`'s estimate models `c`'s blocks (not yet: the sequence-parallel strategies on multi-head
// latent attention, DeepSeek's routing, shared experts, partial RoPE or dense layers among routed ones);
// check_estimate_input refuses the others by name.
// Hybrid linear attention (Qwen3.5): streambp's phases through the recurrence are written for the dense
// models; every other strategy and the gated experts are not yet.
bool estimated_for_model(const ModelConfig& c, const std::string& impl);
// What of hybrid `c` the estimate does not model for `impl` (nullopt: modelled, or not a hybrid).
std::optional<std::string> hybrid_gap(const ModelConfig& c, const std::string& impl);
// Whether `impl` on `c` runs MLA's latent attention by key blocks in the math form on `device` in `dtype`
// (CUDA float32: scores materialised, which no estimate models; every strategy but plain runs the latent
// path in its checkpointed forward). estimate_peak refuses it by name, `estimate`'s default table leaves it
// out.
bool latent_attention_in_math(const ModelConfig& c, const std::string& impl, const std::string& device,
                              at::ScalarType dtype);

// Whether anything of `in` lives in host memory (checkpoints, or a training run's optimizer), and `in`'s
// offload as a cell writes it ("none", "checkpoints", "optimizer", "checkpoints,optimizer").
bool offloads_to_host(const EstimateInput& in);
std::string offload_value(const EstimateInput& in);

// N for an objective: sft B, dpo 2B, grpo B*G.
int64_t sequences_for(const std::string& objective, int64_t batch, int64_t group);

// The impls estimate_peak knows: one process, and distributed (data or sequence parallel: one rank of
// `ranks`).
const std::vector<std::string>& estimated_impls();
const std::vector<std::string>& estimated_data_parallel_impls();

// A readable breakdown: base, every phase with its terms, the peak. For `bpbench estimate`.
std::string format_estimate(const EstimateInput& in, const MemoryEstimate& e);

}  // namespace bpbench
