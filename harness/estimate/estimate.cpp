// estimate.cpp: the analytic peak memory of one step of a strategy (formulas and their derivation:
// docs/estimate.md). The model's shared terms (dimensions, what its operations and attention kernels keep)
// are harness/model/memory_terms.h's; the phases each strategy goes through are its own (impls/, the
// strategy's memory_phases()). Here: the checks, the kernel the cell runs, the base (weights, gradients,
// batch), a training run's optimizer state, the peak, and the readable breakdown.
#include "harness/estimate/estimate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness/estimate/estimate_training.h"
#include "harness/model/attention_kernels.h"
#include "harness/model/attention_partial.h"
#include "harness/objectives/objective.h"
#include "impls/interface/strategy.h"
#include "impls/machinery/dist_common.h"
#include "impls/machinery/layerwise_estimate.h"

namespace bpbench {

using namespace estimate_detail;

namespace {

int64_t element_bytes(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat:
      return 4;
    case torch::kBFloat16:
      return 2;
    case torch::kDouble:
      return 8;
    default:
      throw std::invalid_argument(fmt::format(
          "estimate: unsupported dtype {} (valid: float32, bfloat16, float64)", c10::toString(t)));
  }
}

const char* dtype_name(torch::ScalarType t) {
  return t == torch::kBFloat16 ? "bfloat16" : t == torch::kDouble ? "float64" : "float32";
}

int64_t clamp_rows(int64_t rows, int64_t T) {
  return rows <= 0 || rows > T ? T : rows;
}

int64_t lora_adapter_params(const ModelConfig& c, int64_t r) {
  const int64_t d = c.hidden, Aq = c.heads * c.head_dim, Akv = c.kv_heads * c.head_dim;
  // q, k, v, o, gate, up, down: r * (in + out) each; a routed layer's gate, up and down are every expert's
  // (the router is never adapted: Model::add_lora).
  // in + out of each adapted attention projection: q, k, v, o; or MLA's q_a and q_b (or q), kv_a, kv_b, o.
  int64_t attention_adapted = (d + Aq) + 2 * (d + Akv) + (Aq + d);
  if (c.mla) {
    const ModelConfig::Mla& m = *c.mla;
    const int64_t rq = m.q_lora_rank, kv_out = c.heads * (c.qk_nope_head_dim() + m.v_head_dim);
    attention_adapted = (rq > 0 ? (d + rq) + (rq + Aq) : d + Aq) + (d + m.kv_lora_rank + m.qk_rope_head_dim) +
                        (m.kv_lora_rank + kv_out) + (c.heads * m.v_head_dim + d);
  }
  // Qwen3.5's gate on the attention output (output_gate, d -> Aq); a Gated DeltaNet layer's in_qkv, in_z,
  // in_b, in_a and out_proj in its attention's place.
  if (c.attention_output_gate) attention_adapted += d + Aq;
  int64_t linear_adapted = 0;
  if (c.linear_attention) {
    const ModelConfig::LinearAttention& la = *c.linear_attention;
    const int64_t values = la.value_heads * la.value_dim;
    linear_adapted = (d + la.conv_channels()) + (d + values) + 2 * (d + la.value_heads) + (values + d);
  }
  int64_t params = 0;
  for (int64_t i = 0; i < c.layers; ++i) {
    if (c.is_linear_layer(i)) params += r * (linear_adapted - attention_adapted);
    const bool routed = c.is_moe_layer(i);
    const int64_t I = routed ? c.expert_intermediate : c.intermediate, mlps = routed ? c.experts : 1;
    params += r * (attention_adapted + mlps * (2 * (d + I) + (I + d)));
    const int64_t Ish = routed ? c.shared_expert_intermediate : 0;  // DeepSeek's shared expert
    if (Ish > 0) params += r * (2 * (d + Ish) + (Ish + d));
  }
  return params;
}

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

}  // namespace

namespace {
// Over a process group, one rank estimated: its gradient buckets and shards, no pre-allocated gradients.
bool distributed(const Strategy& s) {
  return s.data_parallel() || s.sequence_parallel();
}

std::vector<std::string> estimated_names(bool data_parallel) {
  std::vector<std::string> names;
  for (const auto& name : estimated_strategy_names())
    if (distributed(*make_strategy(name)) == data_parallel) names.push_back(name);
  return names;
}
}  // namespace

const std::vector<std::string>& estimated_impls() {
  static const std::vector<std::string> names = estimated_names(false);
  return names;
}

const std::vector<std::string>& estimated_data_parallel_impls() {
  static const std::vector<std::string> names = estimated_names(true);
  return names;
}

namespace {
// The estimate's objective: make_objective's one-line error, said as the estimate's.
std::unique_ptr<Objective> estimated_objective(const std::string& name) {
  try {
    return make_objective(name);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("estimate: {}", e.what()));
  }
}
}  // namespace

bool offloads_to_host(const EstimateInput& in) {
  return in.offload || (in.train && in.train->offload_optimizer) || in.offload_params;
}

std::string offload_value(const EstimateInput& in) {
  std::vector<std::string> parts;
  if (in.offload) parts.push_back("checkpoints");
  if (in.train && in.train->offload_optimizer) parts.push_back("optimizer");
  if (in.offload_params) parts.push_back("parameters");
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, ","));
}

int64_t sequences_for(const std::string& objective, int64_t batch, int64_t group) {
  return batch * estimated_objective(objective)->sequences_per_example(group);
}

namespace {
// What of `c` the sequence-parallel strategies' own layer terms (sequence_parallel_estimate.cpp,
// ring_estimate.cpp) do not model yet; empty where they do.
std::string sequence_parallel_gap(const ModelConfig& c) {
  std::vector<std::string> gaps;
  if (c.mla) gaps.push_back("multi-head latent attention");
  if (c.grouped_routing() || c.shared_expert_intermediate > 0)
    gaps.push_back("DeepSeek's routing or shared experts");
  if (c.rotary_dim > 0) gaps.push_back("partial RoPE");
  if (c.is_moe() && c.moe_layer_count() < c.layers) gaps.push_back("dense layers among routed ones");
  return fmt::format("{}", fmt::join(gaps, ", "));
}
}  // namespace

bool latent_attention_in_math(const ModelConfig& c, const std::string& impl, const std::string& device,
                              at::ScalarType dtype) {
  return device == "cuda" && c.mla && impl != "plain" &&
         partial_kernel_for(torch::Device(torch::kCUDA), dtype, c.head_dim) == PartialKernel::math;
}

std::optional<std::string> hybrid_gap(const ModelConfig& c, const std::string& impl) {
  if (!c.linear_attention) return std::nullopt;
  std::vector<std::string> gaps;
  if (const auto& one = estimated_impls(); std::find(one.begin(), one.end(), impl) == one.end())
    gaps.push_back("Gated DeltaNet layers under the distributed strategies");
  if (c.is_moe()) gaps.push_back("Qwen3-Next's and Qwen3.5-MoE's gated experts");
  if (c.linear_layer_count() == c.layers) gaps.push_back("no full-attention layer");
  if (gaps.empty()) return std::nullopt;
  return fmt::format("{}", fmt::join(gaps, ", "));
}

bool estimated_for_model(const ModelConfig& c, const std::string& impl) {
  if (c.linear_attention) return !hybrid_gap(c, impl);
  return !make_strategy(impl)->sequence_parallel() || sequence_parallel_gap(c).empty();
}

void check_estimate_sharding(const std::string& sharding) {
  if (const auto names = dist::sharding_names();
      std::find(names.begin(), names.end(), sharding) == names.end())
    throw std::invalid_argument(
        fmt::format("estimate: unknown sharding '{}' (valid: {})", sharding, fmt::join(names, ", ")));
}

void check_estimate_input(const EstimateInput& in) {
  // The blocks whose memory and FLOP terms are not written yet (docs/models.md): refused, never estimated as
  // another network.
  const ModelConfig& c = in.config;
  const auto& impls = estimated_impls();
  const auto& parallel = estimated_data_parallel_impls();
  const bool one_process = std::find(impls.begin(), impls.end(), in.impl) != impls.end();
  const bool data_parallel = std::find(parallel.begin(), parallel.end(), in.impl) != parallel.end();
  if (!one_process && !data_parallel)
    throw std::invalid_argument(
        fmt::format("estimate: no estimate for impl '{}' (valid: {}; with ranks >= 2: {})", in.impl,
                    fmt::join(impls, ", "), fmt::join(parallel, ", ")));
  if (const auto gap = hybrid_gap(c, in.impl))
    throw std::invalid_argument(fmt::format(
        "estimate: {} on {} ({}) is not estimated yet (valid: {} on a dense hybrid; such a cell is "
        "measured, not estimated)",
        in.impl, c.name, *gap, fmt::join(impls, ", ")));
  if (!estimated_for_model(c, in.impl))  // the data-parallel ones are valid with ranks: one process's terms
    throw std::invalid_argument(fmt::format(
        "estimate: {} on {} ({}) is not estimated yet: the sequence-parallel strategies' terms "
        "for it are not written (valid: {}, and with ranks {}; such a cell is measured, not estimated)",
        in.impl, c.name, sequence_parallel_gap(c), fmt::join(impls, ", "),
        fmt::join(strategies_where_sequence_parallel(parallel, false), ", ")));
  if (one_process && in.ranks != 1)
    throw std::invalid_argument(fmt::format("estimate: {} runs in one process (valid with {} ranks: {})",
                                            in.impl, in.ranks, fmt::join(parallel, ", ")));
  if (data_parallel && in.ranks < 2)
    throw std::invalid_argument(
        fmt::format("estimate: {} is distributed: one rank of ranks >= 2 is estimated (--ranks)", in.impl));
  check_estimate_sharding(in.sharding);
  if (in.offload_params && (in.sharding != "zero3" || in.ranks < 2))
    throw std::invalid_argument(
        fmt::format("estimate: offload parameters keeps ZeRO-3's layer shards in host memory (valid with it: "
                    "{} with ranks >= 2 and sharding zero3)",
                    fmt::join(parallel, ", ")));
  if (in.offload_params && in.train && !in.train->offload_optimizer)
    throw std::invalid_argument(
        "estimate: offload parameters in a training run updates the host shards with the host's optimizer "
        "(valid: optimizer,parameters or checkpoints,optimizer,parameters)");
  if (in.sharding == "zero3" && in.ranks < 2)
    throw std::invalid_argument(
        fmt::format("estimate: sharding zero3 shards the layers over ranks >= 2 (valid: {} with --ranks)",
                    fmt::join(parallel, ", ")));
  if (data_parallel && in.config.has_sliding_layers())
    throw std::invalid_argument(fmt::format(
        "estimate: {} on a model with sliding-window layers is not estimated (valid: a model without them)",
        in.impl));
  if (in.ulysses_degree != 1) {
    if (!make_strategy(in.impl)->runs_on_mesh())
      throw std::invalid_argument(
          fmt::format("estimate: --ulysses-degree {} is the ring strategies' 2-D mesh (valid with it: {})",
                      in.ulysses_degree, fmt::join(mesh_strategy_names(), ", ")));
    if (in.ulysses_degree < 1 || in.ranks % in.ulysses_degree != 0)
      throw std::invalid_argument(fmt::format("estimate: --ulysses-degree {} does not divide --ranks {}",
                                              in.ulysses_degree, in.ranks));
  }
  estimated_objective(in.objective);
  if (const auto gap = make_strategy(in.impl)->estimate_gap(in.device, in.dtype, in.config))
    throw std::invalid_argument("estimate: " + *gap);
  if (in.offload && !make_strategy(in.impl)->uses_offload()) {
    std::vector<std::string> offloading;  // of those the estimate knows, at this many ranks
    const auto& known = in.ranks > 1 ? parallel : impls;
    for (const auto& name : offloading_strategy_names())
      if (std::find(known.begin(), known.end(), name) != known.end()) offloading.push_back(name);
    throw std::invalid_argument(
        fmt::format("estimate: {} keeps no layer checkpoints to offload (valid with offload: {})", in.impl,
                    fmt::join(offloading, ", ")));
  }
  if (in.seq_len <= 0 || in.sequences <= 0 || in.lora_rank < 0 || in.threads <= 0)
    throw std::invalid_argument("estimate: seq_len, sequences and threads must be > 0, lora_rank >= 0");
  if (in.device != "cpu" && in.device != "cuda")
    throw std::invalid_argument(fmt::format("estimate: unknown device '{}' (valid: cpu, cuda)", in.device));
  if (!estimate_bytes_fit_in_int64(in))
    throw std::invalid_argument(fmt::format(
        "estimate: T = {} with N = {} on {} needs more bytes than bpbench counts exactly (about 1.4e17: "
        "int64 with margin) (valid: a shorter length)",
        in.seq_len, in.sequences, in.config.name));
  if (in.train && (in.train->steps < 1 || in.train->batches < 1))
    throw std::invalid_argument("estimate: a training run needs steps >= 1 and batches >= 1");
  in.config.validate();
  element_bytes(in.dtype);  // throws for a dtype the estimate does not take
}

bool estimate_bytes_fit_in_int64(const EstimateInput& in) {
  const ModelConfig& c = in.config;
  const double N = static_cast<double>(in.sequences), T = static_cast<double>(in.seq_len);
  const double scores = N * static_cast<double>(c.heads) * T * T;
  const double logits = N * T * static_cast<double>(c.vocab);
  const double per_row = static_cast<double>(4 * c.hidden + 2 * c.intermediate + c.heads * c.head_dim +
                                             2 * c.kv_heads * c.head_dim);
  const double activations = N * T * static_cast<double>(c.layers) * per_row;
  const double parameters = 4.0 * static_cast<double>(c.parameter_count());
  return 64.0 * 8.0 * (scores + logits + activations + parameters) < 9.2e18;
}

namespace {
// A routed model's dense first layers (MemoryTerms::dense_layers): their layer phases and forward are those
// of the model cut after them, whose top layer is the last dense one (the checkpoints below it, its own
// graph), with the dense MLP; added beside the routed top layer's, the peak the highest of all.
void add_dense_layer_phases(const Strategy& strategy, const MemoryTerms& D, const Partitioning& partition,
                            std::vector<PhaseEstimate>& phases) {
  for (auto phase : strategy.memory_phases(D.dense_kind(), partition)) {
    if (phase.name != "forward" && phase.name.rfind("layer", 0) != 0)
      continue;  // the head: the whole model's
    phase.name += " (dense layers)";
    phases.push_back(std::move(phase));
  }
}

torch::Device device_of(const EstimateInput& in) {
  return torch::Device(in.device == "cuda" ? torch::kCUDA : torch::kCPU);
}

// The kernel causal_attention runs for the cell's full-attention layers, by the model's own rule
// (attention.cpp).
AttentionKernel kernel_of(const EstimateInput& in) {
  return attention_kernel_for(device_of(in), in.dtype, in.config.head_dim, 0, in.config.attention_sinks);
}
}  // namespace

MemoryTerms estimate_terms(const EstimateInput& in) {
  const ModelConfig& c = in.config;
  const int64_t dense_layers = c.is_moe() ? c.layers - c.moe_layer_count() : 0;
  const AttentionKernel kernel = kernel_of(in);
  MemoryTerms D{};
  D.N = in.sequences;
  D.T = in.seq_len;
  D.d = c.hidden;
  D.I = c.intermediate;
  if (c.is_moe()) {
    D.E = c.experts;
    D.k = c.experts_per_token;
    D.Ie = c.expert_intermediate;
    D.norm_topk = c.norm_topk_prob;
    D.topk_then_softmax = c.routing == ModelConfig::Routing::topk_then_softmax;
    D.clamped_swiglu = c.activation == Activation::clamped_swiglu;
    D.grouped_routing = c.grouped_routing();
    D.Ish = c.shared_expert_intermediate;
    D.dense_layers = dense_layers;
  }
  D.rotary = c.rotary_dim;
  if (c.mla) {
    D.mla = true;
    D.mla_rq = c.mla->q_lora_rank;
    D.mla_r = c.mla->kv_lora_rank;
    D.mla_dr = c.mla->qk_rope_head_dim;
    D.mla_dv = c.mla->v_head_dim;
    D.rotary = c.mla->qk_rope_head_dim;
  }
  D.V = c.vocab;
  D.L = c.layers;
  D.Hq = c.heads;
  D.Hkv = c.kv_heads;
  D.hd = c.head_dim;
  D.Aq = c.heads * c.head_dim;
  D.Akv = c.kv_heads * c.head_dim;
  D.P = in.threads;
  D.s = element_bytes(in.dtype);
  D.f = in.dtype == torch::kDouble ? 8 : 4;
  D.up = D.s != D.f;
  D.qk = c.qk_norm;
  D.r = in.lora_rank;
  D.full = in.lora_rank == 0;
  D.offload = in.offload;
  D.norms_scaled_before_cast = c.unit_offset_norms || c.norms_scale_before_cast;
  D.sandwich = c.sandwich_norms;
  D.input_norms = c.block_input_norms;
  D.qk_rsqrt_q = c.qk_norm_whole ? 1 : c.heads;
  D.qk_rsqrt_k = c.qk_norm_whole ? 1 : c.kv_heads;
  D.rope_layers = c.rope_layer_count();
  // The topmost layer of each attention type: the topmost attention layer's, then the other type's topmost
  // if any. Hybrid linear attention: the topmost Gated DeltaNet layer, whose phases are its own.
  int64_t top_attention = c.layers - 1;
  while (top_attention > 0 && c.is_linear_layer(top_attention)) --top_attention;
  D.attention_layers.push_back({top_attention, c.window_of(top_attention)});
  D.rope_top = c.has_rope(top_attention);
  if (c.linear_attention) {
    const ModelConfig::LinearAttention& la = *c.linear_attention;
    D.la_Hk = la.key_heads;
    D.la_Hv = la.value_heads;
    D.la_dk = la.key_dim;
    D.la_dv = la.value_dim;
    D.la_K = la.conv_kernel;
    D.la_C = la.conv_channels();
    for (int64_t i = 0; i < c.layers; ++i) D.linear_layers.push_back(c.is_linear_layer(i));
    for (int64_t i = c.layers - 1; i >= 0 && D.linear_top < 0; --i)
      if (c.is_linear_layer(i)) D.linear_top = i;
  }
  D.gated = c.attention_output_gate;
  for (int64_t i = top_attention - 1; i >= 0; --i)
    if (!c.is_linear_layer(i) && (c.window_of(i) > 0) != (D.attention_layers.front().window > 0)) {
      D.attention_layers.push_back({i, c.window_of(i)});
      break;
    }
  // Data parallel: the trainable elements of each gradient group (impls/machinery/dist_common.h).
  D.ranks = in.ranks;
  D.whole_gradients = dist::DistOptions::of_sharding(in.sharding).whole_gradients;
  D.accumulating = in.train && in.train->grad_accum > 1 && in.ranks > 1;
  D.ulysses = in.ulysses_degree;
  D.tied = c.tie_embeddings;
  if (D.full) {
    D.embedding_group = c.vocab * c.hidden;
    D.head_group = c.hidden + (c.tie_embeddings ? 0 : c.vocab * c.hidden);
  }
  // One layer's group: a routed model's dense first layers have their own (the model made all routed or
  // all dense gives each kind's, every layer of it alike).
  auto layer_group_of = [&](const ModelConfig& kind) {
    return D.full ? (kind.parameter_count() - D.embedding_group - D.head_group) / kind.layers
                  : lora_adapter_params(kind, in.lora_rank) / kind.layers;
  };
  if (D.dense_layers > 0) {
    ModelConfig routed = c, dense = c;
    routed.dense_layers.clear();
    dense.dense_layers.clear();
    for (int64_t i = 0; i < c.layers; ++i) dense.dense_layers.push_back(i);
    D.layer_group = layer_group_of(routed);
    D.dense_layer_group = layer_group_of(dense);
  } else {
    D.layer_group = layer_group_of(c);
  }
  D.flash = kernel == AttentionKernel::flash;
  D.efficient = kernel == AttentionKernel::efficient;
  return D;
}

MemoryEstimate estimate_peak(const EstimateInput& in) {
  check_estimate_input(in);
  const MemoryTerms D = estimate_terms(in);
  // Dense layers in a routed model: the first ones only (DeepSeek's first_k_dense_replace), one process.
  const int64_t dense_layers = D.dense_layers;
  bool dense_first = true;
  for (int64_t i = 0; i < dense_layers; ++i) dense_first = dense_first && !in.config.is_moe_layer(i);
  if (dense_layers > 0 && !dense_first)
    throw std::invalid_argument(fmt::format(
        "estimate: {} mixes dense and mixture-of-experts layers ({} of {} routed), whose memory the estimate "
        "does not model with dense layers above routed ones (valid: every layer dense, every layer routed, "
        "or the dense ones first in one process or data parallel; such a cell is measured, not estimated)",
        in.config.name, in.config.moe_layer_count(), in.config.layers));

  // A sliding layer may get another kernel than kernel_of's (float32 on CUDA: math).
  const torch::Device device = device_of(in);
  const bool sinks = in.config.attention_sinks;
  const AttentionKernel kernel = kernel_of(in);
  if (in.config.has_sliding_layers() &&
      attention_kernel_for(device, in.dtype, in.config.head_dim, in.config.sliding_window, sinks) != kernel)
    throw std::invalid_argument(fmt::format(
        "estimate: on cuda, {} sliding-window layers run the math attention kernel (N x Hq x c x e scores; "
        "the memory-efficient kernel's backward drops the window), which the estimate does not model "
        "(modelled: bfloat16 on flash)",
        dtype_name(in.dtype)));
  if (in.device == "cuda" && kernel == AttentionKernel::math)
    throw std::invalid_argument(
        fmt::format("estimate: on cuda, {} with head dim {} runs the math attention kernel (N x Hq x c x e "
                    "scores), which the estimate does not model (modelled on cuda: bfloat16 on flash, "
                    "float32 on the memory-efficient kernel, head dim a multiple of 8)",
                    dtype_name(in.dtype), in.config.head_dim));
  // MLA's latent attention (every strategy's checkpointed forward, StreamBP's backward) runs attention by key
  // blocks through attention_partial.h, whose CUDA kernel is flash or the math form.
  if (latent_attention_in_math(in.config, in.impl, in.device, in.dtype))
    throw std::invalid_argument(
        fmt::format("estimate: on cuda, {} on {} runs its latent attention by key blocks in the math form "
                    "(N x Hq x c x e scores), which the estimate does not model (modelled: bfloat16 on "
                    "flash, or plain)",
                    in.impl, dtype_name(in.dtype)));
  if (kernel == AttentionKernel::efficient && in.dtype != torch::kFloat)
    throw std::invalid_argument(
        fmt::format("estimate: on cuda, {} with head dim {} runs the memory-efficient kernel in half "
                    "precision, which the estimate does not model (flash takes head dims up to 256)",
                    dtype_name(in.dtype), in.config.head_dim));

  const ModelConfig& c = in.config;
  const int64_t cp = clamp_rows(in.partition, D.T), cl = clamp_rows(in.logits_partition, D.T);

  MemoryEstimate e;
  e.attention_kernel = attention_kernel_name(kernel);
  const int64_t base_params = c.parameter_count(), adapters = D.full ? 0 : lora_adapter_params(c, D.r);
  // DeepSeek's router correction biases: buffers (E) a routed layer, float32 (float64 in a float64 model).
  const int64_t buffers = c.routing == ModelConfig::Routing::sigmoid_grouped
                              ? c.moe_layer_count() * c.experts * (D.s == 8 ? 8 : 4)
                              : 0;
  e.params = (base_params + adapters) * D.s + buffers;
  e.grads = (D.full ? base_params : adapters) * D.s;
  // input_ids and targets (N, T) int64; DPO: reference sums (N) float64; GRPO: reference and old log-probs
  // (N, T), advantages and token weights (N), float64.
  const auto strategy = make_strategy(in.impl);
  // A sequence-parallel rank holds its share of T padded to the strategy's multiple (Ulysses' ceil(T / P)
  // rows, sequence_parallel.h; the rings' 2 ceil(T / 2P), ring_attention.h, the mesh's the same).
  const auto* dist_strategy = dynamic_cast<const dist::DistStrategy*>(strategy.get());
  const int64_t multiple = dist_strategy ? dist_strategy->unpadded_multiple(D.ranks) : D.ranks;
  const int64_t batch_rows =
      strategy->sequence_parallel() ? (D.T + multiple - 1) / multiple * multiple / D.ranks : D.T;
  e.batch = 2 * D.N * batch_rows * 8 + estimated_objective(in.objective)->extra_batch_bytes(D.N, batch_rows);
  e.base = e.params + e.grads + e.batch;

  e.phases = strategy->memory_phases(D, Partitioning{cp, cl});
  if (D.dense_layers > 0) add_dense_layer_phases(*strategy, D, Partitioning{cp, cl}, e.phases);
  // Data parallel: no gradient is pre-allocated, and the phases count the buckets and shards of the step
  // above params + batch; at the step's start the previous step's shards are alive (the measured base).
  if (distributed(*strategy)) {
    e.grads = D.shard(D.embedding_group) + D.shard(D.head_group) + D.layer_shards();
    if (in.sharding == "zero3") shard_layer_parameters(D, layer_parameters(c, adapters), e);
    if (in.offload_params) offload_layer_shards(D, layer_parameters(c, adapters), e);
    e.base = e.params + e.grads + e.batch;
  }

  for (const auto& p : e.phases) {
    int64_t ckpt = 0;
    for (const auto& t : p.terms) ckpt += t.checkpoint ? t.bytes : 0;
    if (p.name.rfind("head", 0) == 0)
      e.head_working_set = std::max(e.head_working_set, p.bytes - ckpt);
    else if (p.name.rfind("layer", 0) == 0)
      e.layer_working_set = std::max(e.layer_working_set, p.bytes - ckpt);
  }
  if (in.train && distributed(*strategy)) {
    dist::DistOptions sharding = dist::DistOptions::of_sharding(in.sharding);
    sharding.offload_params = in.offload_params;
    add_sharded_training_run(*in.train, D, e.grads, largest_layer_numel(D), in.device == "cuda", sharding, e);
  } else if (in.train)
    add_training_run(*in.train, D, D.full ? base_params : adapters, largest_trainable_numel(D), e);
  const PhaseEstimate* top = &e.phases.front();
  for (const auto& p : e.phases)
    if (p.bytes > top->bytes) top = &p;
  e.dominant_phase = top->name;
  for (const auto& t : top->terms) e.checkpoints += t.checkpoint ? t.bytes : 0;
  const int64_t phases_above = distributed(*strategy) ? e.params + e.batch : e.base;
  e.peak_bytes = phases_above + top->bytes;
  e.peak_above_base = e.peak_bytes - e.base;
  if (D.offload) {
    // One pinned buffer per stored layer input, reused every step.
    MemoryTerms rank_rows = D;  // a sequence-parallel rank's checkpoints are its rows'
    rank_rows.T = batch_rows;
    const int64_t checkpoints = checkpoints_bytes(rank_rows, strategy->keeps_first_input() ? D.L : D.L - 1);
    e.host_bytes += checkpoints;                     // beside the optimizer's, where it is offloaded too
    e.micro_batch_traffic_bytes += 2 * checkpoints;  // each out in the forward, back in the backward
    e.offload_traffic_bytes += 2 * checkpoints;
  }
  // A training step's micro-batches each copy their checkpoints and shards; the optimizer's copies are once.
  if (in.train) e.offload_traffic_bytes += (in.train->grad_accum - 1) * e.micro_batch_traffic_bytes;
  return e;
}

std::string format_estimate(const EstimateInput& in, const MemoryEstimate& e) {
  std::ostringstream o;
  o << fmt::format("{} on {} ({}), T={}, N={}, partition={}, logits_partition={}, objective {}{}{}{}\n",
                   in.impl, in.config.name, dtype_name(in.dtype), in.seq_len, in.sequences,
                   clamp_rows(in.partition, in.seq_len), clamp_rows(in.logits_partition, in.seq_len),
                   in.objective, in.lora_rank > 0 ? fmt::format(", LoRA r={}", in.lora_rank) : "",
                   in.offload ? ", checkpoints offloaded" : "",
                   in.device == "cuda" ? fmt::format(", on cuda ({} attention)", e.attention_kernel) : "");
  o << fmt::format("  base {:>14} bytes ({}): params {}, grads {}, batch {}{}\n", e.base, mib(e.base),
                   e.params, e.grads, e.batch,
                   in.train ? fmt::format(" ({} batches)", in.train->batches) : "");
  if (in.ranks > 1)
    o << fmt::format(
        "  one rank of {}: the phases are above params + batch; base also holds the previous step's\n"
        "  gradient shards, which are freed as the step starts\n",
        in.ranks);
  if (in.train)
    o << fmt::format("  training run of {} AdamW steps, precision {}: optimizer {} bytes ({})\n",
                     in.train->steps, in.train->mixed ? "mixed" : "model", e.optimizer, mib(e.optimizer));
  for (const auto& p : e.phases) {
    o << fmt::format("  {}{:<26} {:>14} bytes ({}) above base\n", p.name == e.dominant_phase ? "*" : " ",
                     p.name, p.bytes, mib(p.bytes));
    for (const auto& t : p.terms) o << fmt::format("      {:>14}  {}\n", t.bytes, t.name);
  }
  o << fmt::format("  peak {:>14} bytes ({}), {} above base, in the {}\n", e.peak_bytes, mib(e.peak_bytes),
                   mib(e.peak_above_base), e.dominant_phase);
  if (in.offload)
    o << fmt::format("  host {:>14} bytes ({}) of offloaded checkpoints; {} bytes ({}) copied per step\n",
                     e.host_bytes, mib(e.host_bytes), e.offload_traffic_bytes, mib(e.offload_traffic_bytes));
  return o.str();
}

}  // namespace bpbench
