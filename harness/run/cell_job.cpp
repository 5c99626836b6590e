// cell_job.cpp: a cell as a self-contained job (its JSON for a child process), the model it names, and what
// every way of running it starts from: its result before anything ran and its strategy, or why it is skipped.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>

#include <algorithm>
#include <csignal>
#include <thread>

#include "harness/estimate/estimate.h"
#include "harness/model/hf_model.h"
#include "harness/model/rope_config.h"
#include "harness/run/run_detail.h"
#include "harness/run/runner.h"
#include "impls/machinery/dist_common.h"
#include "impls/machinery/offload.h"
#include "profiles/cuda_build.h"

namespace bpbench {

using nlohmann::json;

namespace run_detail {

bool is_distributed(const Strategy& strategy) {
  return dynamic_cast<const dist::DistStrategy*>(&strategy) != nullptr;
}

std::vector<std::string> distributed_strategy_names() {
  std::vector<std::string> names;
  for (const auto& name : strategy_names())
    if (is_distributed(*make_strategy(name))) names.push_back(name);
  return names;
}

bool killed_by_sigkill(const CellResult& r) {
  return r.status == "error" && r.reason.find(fmt::format("by signal {} (", SIGKILL)) != std::string::npos;
}

namespace {
// Why a cell is not run: a CUDA cell where there is no GPU, the strategy refuses it, or a single-process
// strategy in a multi-rank scenario.
std::optional<std::string> skip_reason(const Strategy& strategy, const CellJob& job) {
  if (job.settings.device == "cuda" && profiles::cuda_device_count() == 0) return profiles::no_gpu_reason();
  std::optional<ModelConfig> model;
  try {
    model = model_config_of(job.cell.model, job.settings.rope);
  } catch (const std::exception&) {  // a model that cannot be read: the cell's error says why
  }
  CellTraits traits{job.cell.objective, job.settings.world_size, model ? &*model : nullptr};
  traits.seq_len = job.cell.seq_len;
  traits.router_balance = job.settings.router_aux_loss_coef > 0 && model && model->is_moe();
  if (auto why = strategy.unsupported(traits)) return why;
  if (traits.router_balance && model->grouped_routing())
    return std::string(
        "DeepSeek's routing (sigmoid or group-limited) has no load-balancing loss in transformers, whose "
        "correction bias balances the experts instead; router_aux_loss_coef applies to Qwen3-MoE, Mixtral "
        "and "
        "gpt-oss (valid here: 0)");
  if (traits.router_balance && (job.cell.padding || !job.settings.data_path.empty()))
    return std::string(
        "the routers' load-balancing loss counts every row, padding rows included, where transformers "
        "leaves the rows its attention mask drops out; with padding (padding: true, or a data file's short "
        "sequences) that is not implemented");
  if (parse_offload_plan(job.cell.offload).optimizer && !job.settings.measure.train)
    return std::string(
        "offload optimizer moves a training run's AdamW tensors to the host (valid with it: measure.train)");
  if (const OffloadPlan plan = parse_offload_plan(job.cell.offload); plan.parameters) {
    if (!is_distributed(strategy) || job.cell.sharding != "zero3")
      return std::string(
          "offload parameters keeps ZeRO-3's layer shards in host memory (valid with it: a distributed "
          "strategy with sharding zero3)");
    if (job.settings.measure.train && !plan.optimizer)
      return std::string(
          "offload parameters in a training run updates the host shards with the host's optimizer (valid: "
          "optimizer,parameters or checkpoints,optimizer,parameters)");
  }
  if (parse_offload(job.cell.offload) != Offload::none && !strategy.uses_offload())
    return fmt::format("{} keeps no layer checkpoints in a store it could offload (offload applies to {})",
                       strategy.name(), fmt::join(offloading_strategy_names(), ", "));
  if (!is_distributed(strategy) && job.settings.world_size > 1)
    return fmt::format("runs in one process; world_size {} is for the distributed strategies ({})",
                       job.settings.world_size, fmt::join(distributed_strategy_names(), ", "));
  if (!is_distributed(strategy) && job.cell.sharding != "zero2")
    return fmt::format("runs in one process; sharding {} is for the distributed strategies ({})",
                       job.cell.sharding, fmt::join(distributed_strategy_names(), ", "));
  if (!is_distributed(strategy) && job.cell.ulysses_degree > 1)
    return fmt::format("runs in one process; ulysses_degree {} is the ring strategies' 2-D mesh",
                       job.cell.ulysses_degree);
  return std::nullopt;
}
}  // namespace

CellResult result_for(const CellJob& job, std::string status) {
  CellResult r;
  r.cell = job.cell;
  r.threads = job.settings.threads;
  r.status = std::move(status);
  try {
    const ModelConfig config = model_config_of(job.cell.model, job.settings.rope);
    r.rope = rope_to_json(config.rope);
    if (config.has_sliding_layers()) {
      r.sliding_window = {{"window", config.sliding_window},
                          {"layers", config.sliding_layer_count()},
                          {"of", config.layers},
                          {"rope", rope_to_json(config.sliding_rope.value_or(config.rope))}};
    }
  } catch (const std::exception&) {  // a model that cannot be read: the cell's error says why
  }
  return r;
}

std::unique_ptr<Strategy> strategy_of(const Cell& cell) {
  auto strategy = make_strategy(cell.impl);
  const bool offload_params = parse_offload_plan(cell.offload).parameters;
  if ((cell.ulysses_degree == 1 && cell.sharding == "zero2" && !offload_params) || !is_distributed(*strategy))
    return strategy;
  dist::DistOptions options = dist::default_dist_options();
  options.ulysses_degree = cell.ulysses_degree;
  const dist::DistOptions sharding = dist::DistOptions::of_sharding(cell.sharding);
  options.shard_params = sharding.shard_params;
  options.whole_gradients = sharding.whole_gradients;
  options.shard_optimizer = sharding.shard_optimizer;
  options.offload_params = offload_params && sharding.shard_params;
  return make_distributed_strategy(cell.impl, options);
}

std::unique_ptr<Strategy> strategy_for(const CellJob& job, CellResult& r) {
  auto strategy = strategy_of(job.cell);
  r.uses_partition = strategy->uses_partition();
  r.uses_logits_partition = strategy->uses_logits_partition();
  r.world_size = is_distributed(*strategy) ? job.settings.world_size : 1;
  if (auto why = skip_reason(*strategy, job)) {
    r.status = "skipped";
    r.reason = *why;
    return nullptr;
  }
  return strategy;
}

}  // namespace run_detail

// A model directory holding config.json wins over a preset of the same name (the first line of `bpbench
// estimate` and the scenario reader follow the same rule).
Model load_model(const std::string& name, const torch::TensorOptions& options, uint64_t seed,
                 const json& rope) {
  // RoPE holds no weights and the random init does not read it: the override is config alone.
  const ModelConfig config = model_config_of(name, rope);
  Model model = is_hf_model_dir(name) ? load_hf_model(name, options) : Model::random(config, options, seed);
  model.config = config;
  return model;
}

ModelConfig model_config_of(const std::string& name, const json& rope) {
  ModelConfig config = is_hf_model_dir(name) ? read_hf_config(name) : find_model_preset(name);
  if (!rope.is_null()) {
    try {
      config.rope = rope_with_parameters(config.rope, rope);
    } catch (const std::invalid_argument& e) {
      input_error(fmt::format("rope for model {}: {}", name, e.what()),
                  "a rope object that every model of the scenario accepts");
    }
  }
  config.validate();
  return config;
}

EstimateInput estimate_input_of(const Cell& c, int64_t threads, const std::string& device,
                                const std::optional<TrainEstimate>& train, int64_t ranks) {
  EstimateInput in;
  in.config = model_config_of(c.model);
  in.seq_len = c.seq_len;
  in.sequences = sequences_for(c.objective, c.batch, c.group);
  in.partition = c.partition;
  in.logits_partition = c.logits_partition;
  in.dtype = parse_dtype(c.dtype);
  in.impl = c.impl;
  in.objective = c.objective;
  in.lora_rank = c.lora_rank;
  in.threads = threads;
  in.offload = parse_offload(c.offload) != Offload::none;
  in.offload_params = parse_offload_plan(c.offload).parameters;
  in.device = device;  // cuda: the CUDA attention kernels' terms (float64 there: no estimate)
  in.train = train;
  in.ranks = ranks;
  in.ulysses_degree = c.ulysses_degree;
  if (ranks > 1) in.sharding = c.sharding;
  return in;
}

std::optional<MemoryEstimate> estimate_cell(const Cell& c, int64_t threads, const std::string& device,
                                            const std::optional<TrainEstimate>& train, int64_t ranks) {
  const auto& known = ranks > 1 ? estimated_data_parallel_impls() : estimated_impls();
  if (c.seq_len < 1 || std::find(known.begin(), known.end(), c.impl) == known.end()) return std::nullopt;
  try {
    return estimate_peak(estimate_input_of(c, threads, device, train, ranks));
  } catch (const std::exception&) {  // a model that cannot be read, or a kernel the estimate does not model
    return std::nullopt;
  }
}

torch::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32") return torch::kFloat;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float64") return torch::kDouble;
  input_error(fmt::format("unknown dtype '{}'", name), fmt::format("{}", fmt::join(dtype_names(), ", ")));
}

int64_t default_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return CPU_COUNT(&set);  // containers
  return std::max(1u, std::thread::hardware_concurrency());
}

json CellJob::to_json() const {
  return {{"axes", cell.axes()},
          {"device", settings.device},
          {"seed", settings.seed},
          {"threads", settings.threads},
          {"measure", settings.measure.to_json()},
          {"data", settings.data_path},
          {"world_size", settings.world_size},
          {"rope", settings.rope},
          {"rms_norm", settings.rms_norm},
          {"router_aux_loss_coef", settings.router_aux_loss_coef},
          {"timeline_dir", timeline_dir},
          {"timeline_name", timeline_name},
          {"result_file", result_file}};
}

CellJob CellJob::from_json(const json& j) {
  const std::string valid = "an object with keys axes, device, seed, threads, measure";
  if (!j.is_object()) input_error("run-cell: the job is not a JSON object", valid);
  for (const char* key : {"axes", "device", "seed", "threads", "measure"})
    if (!j.contains(key)) input_error(fmt::format("run-cell: the job has no '{}'", key), valid);
  CellJob job;
  job.cell = Cell::from_axes(j.at("axes"));
  if (!j.at("device").is_string() || (j.at("device") != "cpu" && j.at("device") != "cuda"))
    input_error(fmt::format("run-cell: bad device {}", j.at("device").dump()), "cpu, cuda");
  job.settings.device = j.at("device").get<std::string>();
  if (!j.at("seed").is_number_unsigned()) input_error("run-cell: bad seed", "integers >= 0");
  job.settings.seed = j.at("seed").get<uint64_t>();
  if (!j.at("threads").is_number_integer() || j.at("threads").get<int64_t>() < 1)
    input_error("run-cell: bad threads", "integers >= 1");
  job.settings.threads = j.at("threads").get<int64_t>();
  job.settings.measure = MeasureSpec::from_json(j.at("measure"));
  auto text = [&](const char* key) {  // optional string keys
    if (j.contains(key) && !j.at(key).is_string())
      input_error(fmt::format("run-cell: bad {}", key), "a string");
    return j.value(key, std::string());
  };
  job.settings.data_path = text("data");
  job.settings.rms_norm = text("rms_norm");
  if (!job.settings.rms_norm.empty() && job.settings.rms_norm != "hf" && job.settings.rms_norm != "fused")
    input_error(fmt::format("run-cell: bad rms_norm '{}'", job.settings.rms_norm), "hf, fused");
  job.timeline_dir = text("timeline_dir");
  job.timeline_name = text("timeline_name");
  job.result_file = text("result_file");
  if (j.contains("world_size")) {
    if (!j.at("world_size").is_number_integer() || j.at("world_size").get<int64_t>() < 1)
      input_error("run-cell: bad world_size", "integers >= 1");
    job.settings.world_size = j.at("world_size").get<int64_t>();
  }
  if (j.contains("rope")) job.settings.rope = j.at("rope");  // checked where the model is built
  if (j.contains("router_aux_loss_coef")) {
    const json& coef = j.at("router_aux_loss_coef");
    if (!coef.is_number() || !(coef.get<double>() >= 0))
      input_error("run-cell: bad router_aux_loss_coef", "numbers >= 0");
    job.settings.router_aux_loss_coef = coef.get<double>();
  }
  return job;
}

}  // namespace bpbench
