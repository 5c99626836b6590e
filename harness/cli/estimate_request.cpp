// estimate_request.cpp: estimate_request.h: the flags of `bpbench estimate`, and its answers.
#include "harness/cli/estimate_request.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "harness/cli/accelerators.h"
#include "harness/cli/quantities.h"
#include "harness/estimate/estimate_flops.h"
#include "harness/model/hf_model.h"
#include "harness/model/model_config.h"
#include "harness/run/gpu_peak.h"
#include "harness/run/runner.h"
#include "impls/interface/strategy.h"
#include "impls/machinery/dist_common.h"
#include "impls/machinery/offload.h"

namespace bpbench {

namespace {

// The partitions when none is given: the StreamBP paper's (layer chunks of 500 rows, LM-head chunks of 100),
// which scenarios/h100_table3_maxlen.json uses too. A length below them is one chunk.
constexpr int64_t kDefaultPartition = 500, kDefaultLogitsPartition = 100;

// `v` read whole by `parse` (std::stoll, std::stod), else one line naming the flag and `what` it expects.
template <class Parse>
auto whole(const std::string& flag, const std::string& v, const char* what, Parse parse) {
  size_t used = 0;
  decltype(parse(v, &used)) x{};
  try {
    x = parse(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty())
    throw std::invalid_argument(fmt::format("estimate: {} expects {}, got '{}'", flag, what, v));
  return x;
}

int64_t integer(const std::string& flag, const std::string& v) {
  return whole(flag, v, "an integer", [](const std::string& t, size_t* n) { return std::stoll(t, n); });
}

double number(const std::string& flag, const std::string& v) {
  return whole(flag, v, "a number", [](const std::string& t, size_t* n) { return std::stod(t, n); });
}

double positive(const std::string& flag, const std::string& v) {
  const double x = number(flag, v);
  if (!(x > 0)) throw std::invalid_argument(fmt::format("estimate: {} must be above 0, got {}", flag, v));
  return x;
}

// A utilisation: above 0, at most 1.
double fraction(const std::string& flag, const std::string& v) {
  const double x = number(flag, v);
  if (!(x > 0 && x <= 1))
    throw std::invalid_argument(fmt::format("estimate: {} must be in (0, 1], got {}", flag, v));
  return x;
}

bool is_preset_name(const std::string& name) {
  for (const auto& p : model_presets())
    if (p.name == name) return true;
  return false;
}

// A preset, a Hugging Face model directory, or a config.json: the config alone, no weights read. A model
// directory wins over a preset of the same name (a checkpoint downloaded into ./qwen3-4b is the model meant),
// as in a scenario (harness/run/cell_job.cpp); the first line of the answer says which was taken.
ModelConfig model_of(const std::string& model, std::string& source) {
  namespace fs = std::filesystem;
  if (is_preset_name(model) && !is_hf_model_dir(model)) {
    source = "preset";
    return find_model_preset(model);
  }
  std::error_code ec;
  if (!fs::exists(model, ec))
    throw std::invalid_argument(
        fmt::format("estimate: unknown model '{}' (valid: a preset: {}; a Hugging Face model directory; or "
                    "its config.json)",
                    model, model_preset_names()));
  source = "hf-config";
  try {
    return read_hf_config(model);
  } catch (const std::exception& e) {  // one line naming the file and the field (hf_model.h)
    throw std::invalid_argument(fmt::format("estimate: {}", e.what()));
  }
}

// Without --dtype: float32 on the CPU (a scenario's default); on CUDA what users train in: the dtype a model
// directory's config.json names ("dtype", or 4.x's "torch_dtype"; float16 as bfloat16, the same bytes, since
// bpbench trains no float16), else bfloat16.
std::pair<torch::ScalarType, std::string> default_dtype(const std::string& model, const std::string& source,
                                                        const std::string& device) {
  if (device != "cuda") return {torch::kFloat, "the CPU default"};
  if (source == "preset") return {torch::kBFloat16, "the CUDA default"};
  const std::string named = hf_config_dtype(model);
  if (named == "float32") return {torch::kFloat, "config.json's dtype"};
  if (named == "bfloat16") return {torch::kBFloat16, "config.json's dtype"};
  if (named == "float16") return {torch::kBFloat16, "config.json's float16 as bfloat16: the same bytes"};
  return {torch::kBFloat16, "the CUDA default"};
}

}  // namespace

EstimateRequest parse_estimate_request(const std::vector<std::string>& args) {
  EstimateRequest r;
  EstimateInput& in = r.in;
  in.threads = default_threads();
  std::string impls, gpu, device;
  std::optional<torch::ScalarType> dtype;
  std::optional<int64_t> budget, reserve, partition, logits_partition;
  bool offload_optimizer = false;  // --offload ...optimizer: applied to --train once every flag is read
  int64_t grad_accum = 1;
  TimeAssumptions rates;  // --hfu and the links; the peak from the GPU
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--verbose" || a == "--json") {
      (a == "--json" ? r.json : r.verbose) = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || i + 1 >= args.size())
      throw std::invalid_argument(fmt::format(
          "estimate: unexpected argument '{}' (valid: --model, --seq-len, --impl, --batch, --group, "
          "--partition, --logits-partition, --dtype, --objective, --lora-rank, --threads, --offload, "
          "--device, --train, --grad-accum, --ranks, --ulysses-degree, --sharding, --budget, --gpu, "
          "--reserve, "
          "--host-budget, "
          "--granularity, --upper, "
          "--plot, --hfu, --nvlink-gbps, --ib-gbps, --pcie-gbps, --gpus-per-node, "
          "each with a value; --verbose, --json)",
          a));
    const std::string& v = args[++i];
    if (a == "--model")
      r.model = v;
    else if (a == "--seq-len")
      r.seq_lens = parse_token_counts(a, v);
    else if (a == "--impl")
      impls = v;
    else if (a == "--batch")
      r.batch = integer(a, v);
    else if (a == "--group")
      r.group = integer(a, v);
    else if (a == "--partition")
      partition = parse_token_count(a, v);
    else if (a == "--logits-partition")
      logits_partition = parse_token_count(a, v);
    else if (a == "--objective")
      in.objective = v;
    else if (a == "--lora-rank")
      in.lora_rank = integer(a, v);
    else if (a == "--threads")
      in.threads = integer(a, v);
    else if (a == "--ranks")
      in.ranks = integer(a, v);
    else if (a == "--ulysses-degree")
      in.ulysses_degree = integer(a, v);
    else if (a == "--offload") {
      const OffloadPlan plan = parse_offload_plan(v);
      in.offload = plan.checkpoints;
      offload_optimizer = plan.optimizer;
      in.offload_params = plan.parameters;
    } else if (a == "--grad-accum") {
      grad_accum = integer(a, v);
    } else if (a == "--sharding") {
      const auto names = dist::sharding_names();
      if (std::find(names.begin(), names.end(), v) == names.end())
        throw std::invalid_argument(
            fmt::format("estimate: unknown --sharding '{}' (valid: {})", v, fmt::join(names, ", ")));
      in.sharding = v;
    } else if (a == "--device") {
      if (v != "cpu" && v != "cuda")
        throw std::invalid_argument(fmt::format("estimate: unknown device '{}' (valid: cpu, cuda)", v));
      device = v;
    } else if (a == "--train") {
      if (v != "model" && v != "mixed")
        throw std::invalid_argument(
            fmt::format("estimate: unknown --train precision '{}' (valid: model, mixed)", v));
      in.train = TrainEstimate{/*steps=*/2, /*batches=*/1, v == "mixed"};
    } else if (a == "--dtype")
      dtype = parse_dtype(v);  // InputError (an invalid_argument) naming the valid ones
    else if (a == "--budget")
      budget = parse_byte_size(a, v);
    else if (a == "--gpu")
      gpu = v;
    else if (a == "--reserve")
      reserve = parse_byte_size(a, v);
    else if (a == "--host-budget")
      r.host_budget = parse_byte_size(a, v), r.host_budget_source = "--host-budget";
    else if (a == "--granularity")
      r.granularity = parse_token_count(a, v);
    else if (a == "--upper")
      r.upper = parse_token_count(a, v);
    else if (a == "--plot")
      r.plot_file = v;
    else if (a == "--hfu")
      rates.hfu = fraction(a, v);
    else if (a == "--nvlink-gbps")
      rates.nvlink_gbps = positive(a, v);
    else if (a == "--ib-gbps")
      rates.ib_gbps = positive(a, v);
    else if (a == "--pcie-gbps")
      rates.pcie_gbps = positive(a, v);
    else if (a == "--gpus-per-node")
      rates.gpus_per_node = integer(a, v);
    else
      throw std::invalid_argument(fmt::format("estimate: unknown option '{}'", a));
  }
  if (r.model.empty() || (r.seq_lens.empty() && !budget && gpu.empty()))
    throw std::invalid_argument(
        "estimate: --model and --seq-len (or a memory budget: --budget or --gpu) are required");
  if (budget && !gpu.empty())
    throw std::invalid_argument("estimate: --budget and --gpu both give the memory (valid: one of them)");
  if (reserve && gpu.empty())
    throw std::invalid_argument("estimate: --reserve holds back part of a GPU's memory (valid with --gpu)");
  if (!gpu.empty() && device == "cpu")
    throw std::invalid_argument(
        "estimate: --gpu estimates a CUDA run (valid: --device cuda, or no --device)");
  if (r.granularity > r.upper)
    throw std::invalid_argument(fmt::format(
        "estimate: --granularity {} is above --upper {} (valid: at most it)", r.granularity, r.upper));
  in.device = !device.empty() ? device : gpu.empty() ? "cpu" : "cuda";
  in.partition = partition.value_or(kDefaultPartition);
  in.logits_partition = logits_partition.value_or(kDefaultLogitsPartition);
  in.config = model_of(r.model, r.source);
  std::tie(in.dtype, r.dtype_source) =
      dtype ? std::pair(*dtype, std::string("--dtype")) : default_dtype(r.model, r.source, in.device);
  if (grad_accum < 1)
    throw std::invalid_argument(fmt::format("estimate: --grad-accum must be >= 1, got {}", grad_accum));
  if (offload_optimizer && !in.train)
    throw std::invalid_argument(
        "estimate: --offload optimizer moves a training run's AdamW tensors to the host (valid with it: "
        "--train model|mixed)");
  if (in.train) {
    in.train->offload_optimizer = offload_optimizer;
    in.train->grad_accum = grad_accum;
    in.train->batches = grad_accum;  // one step's micro-batches
  }
  if (in.train && in.train->mixed && in.dtype != torch::kBFloat16)
    throw std::invalid_argument(
        "estimate: --train mixed keeps float32 masters of bfloat16 weights (valid with "
        "--dtype bfloat16; --train model otherwise)");
  in.sequences = sequences_for(in.objective, r.batch, r.group);

  if (budget)
    r.budgets.push_back({
        "budget",
        "--budget",
        *budget,
        0,
        "",
    });
  if (gpu == "all" || gpu == "ALL") {
    for (const auto& a : accelerators())
      r.budgets.push_back(
          {a.key, a.label, a.memory_bytes, reserve.value_or(default_reserve_bytes(a.memory_bytes)), a.note});
  } else if (!gpu.empty()) {
    const Accelerator& a = find_accelerator(gpu);
    r.budgets.push_back(
        {a.key, a.label, a.memory_bytes, reserve.value_or(default_reserve_bytes(a.memory_bytes)), a.note});
  }
  for (const auto& b : r.budgets)
    if (b.bytes() <= 0)
      throw std::invalid_argument(
          fmt::format("estimate: nothing is left of {} ({} bytes) after --reserve {} (valid: "
                      "a reserve below the memory)",
                      b.label, b.memory_bytes, b.reserve_bytes));
  if (rates.gpus_per_node < 1)
    throw std::invalid_argument(
        fmt::format("estimate: --gpus-per-node must be >= 1, got {}", rates.gpus_per_node));
  // The time per step: one GPU of the table, whose peak for the dtype is known.
  if (r.budgets.size() == 1 && r.budgets.front().key != "budget")
    if (const auto peak = gpu_peak(r.budgets.front().label, in.dtype)) {
      rates.gpu = fmt::format("{}, {}", peak->gpu, peak->precision);
      rates.peak_tflops = peak->tflops;
      r.time = rates;
    }
  if (!in.offload) {
    r.host_budget.reset();
    r.host_budget_source.clear();
  } else if (!r.host_budget && !budget) {
    r.host_budget_source = "not bounded (the GPU's host is another machine; --host-budget bounds it)";
  } else if (!r.host_budget) {
    r.host_budget = default_host_budget();
    r.host_budget_source =
        "this machine's available memory less a tenth and 4 GiB, as a max-length search bounds it";
  }

  if (in.ranks < 1)
    throw std::invalid_argument(fmt::format("estimate: --ranks must be >= 1, got {}", in.ranks));
  if (impls.empty()) {
    // Those that can take the request (offload; the ranks splitting the heads, for sequence parallelism; an
    // estimate that holds on the device; the model's blocks estimated for it: MLA not on the
    // sequence-parallel strategies yet).
    for (const auto& name : in.ranks > 1 ? estimated_data_parallel_impls() : estimated_impls()) {
      const auto strategy = make_strategy(name);
      if (!estimated_for_model(in.config, name) ||
          latent_attention_in_math(in.config, name, in.device, in.dtype))
        continue;
      if ((!in.offload || strategy->uses_offload()) && (in.ulysses_degree == 1 || strategy->runs_on_mesh()) &&
          !(in.ranks > 1 && strategy->unsupported(CellTraits{in.objective, in.ranks, &in.config})) &&
          !strategy->estimate_gap(in.device, in.dtype, in.config))
        r.impls.push_back(name);
    }
    if (r.impls.empty()) {
      const auto gap = hybrid_gap(in.config, "streambp");
      throw std::invalid_argument(fmt::format(
          "estimate: no strategy is estimated for {}{} (valid: a model the estimate covers, docs/estimate.md; "
          "a grid on it runs, its cells measured)",
          in.config.name, gap ? fmt::format(" ({})", *gap) : ""));
    }
  } else {
    std::stringstream ss(impls);
    for (std::string item; std::getline(ss, item, ',');)
      if (!item.empty()) r.impls.push_back(item);
  }
  return r;
}

bool flops_fit_in_int64(const EstimateInput& in) {
  const ModelConfig& c = in.config;
  const double N = static_cast<double>(in.sequences), T = static_cast<double>(in.seq_len);
  // Scores and their products (2 x 2 FLOPs per query, key and head dim), forward, recomputed and backward
  // (x 2); every parameter's multiply-add per row in the same four passes.
  const double attention = 32.0 * N * T * T * static_cast<double>(c.heads * c.head_dim) * c.layers;
  const double matmuls = 8.0 * N * T * static_cast<double>(c.parameter_count());
  // A sequence-parallel rank counts its share: its rows, and its heads' (or its ring pairs') attention.
  const double P = make_strategy(in.impl)->sequence_parallel() ? static_cast<double>(in.ranks) : 1.0;
  return (attention + matmuls) / P < 4.6e18;
}

const char* dtype_flag_name(torch::ScalarType dtype) {
  return dtype == torch::kBFloat16 ? "bfloat16" : dtype == torch::kDouble ? "float64" : "float32";
}

EstimateInput input_at(const EstimateRequest& request, const std::string& impl, int64_t seq_len) {
  EstimateInput in = request.in;
  in.impl = impl;
  in.seq_len = seq_len;
  return in;
}

EstimateAnswers answer_estimate(const EstimateRequest& request) {
  EstimateAnswers a;
  for (int64_t T : request.seq_lens)
    for (const auto& impl : request.impls) {
      const EstimateInput in = input_at(request, impl, T);
      EstimateAtLength x;
      x.impl = impl;
      x.seq_len = T;
      x.memory = estimate_peak(in);
      if (flops_fit_in_int64(in) && flops_estimated_for(in.config)) x.flops = estimate_flops(in);
      x.comm = estimate_step_comm(in);
      if (in.train) x.optimizer_comm = estimate_optimizer_comm(in);
      if (request.time && x.flops)
        x.time = estimate_step_time(in, *x.flops, x.comm, x.optimizer_comm, x.memory, *request.time);
      a.at_lengths.push_back(std::move(x));
    }
  for (size_t b = 0; b < request.budgets.size(); ++b)
    for (const auto& impl : request.impls) {
      LengthBudget limits;
      limits.device_bytes = request.budgets[b].bytes();
      limits.host_bytes = request.host_budget;
      limits.granularity = request.granularity;
      limits.upper = request.upper;
      a.longest.push_back({b, impl, longest_seq_len(input_at(request, impl, request.granularity), limits)});
    }
  return a;
}

}  // namespace bpbench
