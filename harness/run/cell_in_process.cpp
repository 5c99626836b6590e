// cell_in_process.cpp: one cell in this process, as named steps: build the model and batch, warm up, the
// memory step (measured, never timed), the timed steps, then the gradients against plain BP in float64 (the
// reference); or a training run (measure.train). Also the hidden `run-cell` subcommand a child process runs.
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <new>
#include <sstream>

#include "harness/model/flop_count.h"
#include "harness/objectives/data_file.h"
#include "harness/objectives/objective.h"
#include "harness/run/allocation_failure.h"
#include "harness/run/cell_steps.h"
#include "harness/run/gpu_peak.h"
#include "harness/run/grad_error.h"
#include "harness/run/run_detail.h"
#include "harness/run/runner.h"
#include "harness/run/train_data.h"
#include "harness/run/train_loop.h"
#include "impls/interface/strategy.h"
#include "impls/machinery/dist_common.h"
#include "impls/machinery/offload.h"
#include "profiles/chrome_trace.h"
#include "profiles/cuda_build.h"
#include "profiles/device_activity.h"
#include "profiles/host_memory.h"
#include "profiles/memory.h"
#include "profiles/step_timer.h"

namespace bpbench {

using nlohmann::json;
using profiles::Category;
using profiles::MemoryRecorder;
using profiles::MemoryScope;
using namespace run_detail;

namespace {

// The gradients of plain BP on a float64 copy of the same weights, same batch, compared with the cell's; on
// the cell's device, or on the CPU (measure.grad_error.reference_device) where a float64 step of a long
// sequence would not fit the GPU.
GradErrorResult reference_error(const CellJob& job, const Model& model, const Batch& batch,
                                const Objective& objective, double loss) {
  GradErrorResult ge;
  const MeasureSpec& m = job.settings.measure;
  ge.reference = m.grad_error_reference;
  const torch::Device device =
      m.grad_error_reference_device == "cpu" ? torch::Device(torch::kCPU) : model.device();
  ge.reference_device = device.str();
  try {
    Model ref = model.converted(torch::TensorOptions().dtype(torch::kDouble).device(device));
    const Batch ref_batch = device == model.device() ? batch : batch_on(batch, device);
    auto reference = make_strategy(reference_strategy_name());
    const int64_t T = job.cell.seq_len;
    ge.reference_loss = reference->step(StepInputs{ref, ref_batch, objective, {T, T}}).item<double>();
    ge.loss_abs_error = std::abs(loss - ge.reference_loss);
    ge.groups = gradient_error(ref.trainable_parameters(), model.trainable_parameters());
  } catch (const c10::Error& e) {
    ge.error = one_line(e.what_without_backtrace());
  } catch (const std::exception& e) {
    ge.error = one_line(e.what());
  }
  return ge;
}

// The step's FLOPs and their rate: TFLOP/s over the median time, and on a GPU in the peak table MFU and HFU.
ComputeResult compute_result(const FlopCounts& counts, const std::optional<TimeResult>& time,
                             const torch::Device& device, at::ScalarType dtype) {
  ComputeResult c;
  c.counts = counts;
  const double seconds = time ? time->median_s : 0.0;
  if (seconds > 0) c.tflops_per_s = static_cast<double>(counts.hardware()) / seconds / 1e12;
  if (!device.is_cuda()) return c;
  const std::string name = profiles::cuda_device_name();
  if (auto peak = gpu_peak(name, dtype)) {
    c.peak = {
        {"gpu", name}, {"precision", peak->precision}, {"tflops", peak->tflops}, {"source", peak->source}};
    if (seconds > 0) {
      c.mfu = static_cast<double>(counts.model()) / seconds / 1e12 / peak->tflops;
      c.hfu = *c.tflops_per_s / peak->tflops;
    }
  } else {
    c.peak = {{"gpu", name},
              {"error", fmt::format("no peak known for '{}' (known: {})", name, known_gpus())}};
  }
  return c;
}

// Token ids from the scenario's data file for `rows` sequences of the cell's length; records what was read.
torch::Tensor data_tokens(const CellJob& job, int64_t rows, int64_t vocab, CellResult& r) {
  TokenData d = load_token_data(job.settings.data_path, job.cell.seq_len, vocab);
  if (d.sequences < rows)
    throw InputError(fmt::format("data: '{}' has {} sequences; the cell needs {} (batch x world_size)",
                                 d.file_name, d.sequences, rows));
  r.data = {{"file", d.file_name}, {"sha256", d.sha256}, {"sequences", rows}};
  return d.tokens.narrow(0, 0, rows).clone();
}

// measure.train: the cell's model trained for spec.steps AdamW steps (train_loop.h); the run's peak over
// every step, its optimizer state under Category::optimizer, the time of each step.
// A distributed strategy's rank builds the global batches and keeps its part of each (dist::local_batch).
void measure_training(const CellJob& job, const Strategy& strategy, Model& model, const Objective& objective,
                      const BatchSpec& spec, const torch::Device& device, profiles::Recorder& rec,
                      profiles::StepTimer& timer, dist::Communicator* comm, CellResult& r) {
  const Cell& c = job.cell;
  const MeasureSpec& m = job.settings.measure;
  const int world = comm ? comm->world_size() : 1;
  TrainData data;
  int64_t step_tokens = 0;
  {
    MemoryScope scope(Category::other);
    json data_record;
    data = make_train_data(*m.train, spec, model, objective, c.logits_partition, job.settings.data_path,
                           data_record);
    if (!data_record.is_null()) r.data = data_record;
    step_tokens = data.train.front().input_ids.numel() * m.train->grad_accum;  // the global micro-batches'
    if (comm)
      for (auto* batches : {&data.train, &data.eval})
        for (auto& b : *batches) b = dist::local_batch(strategy, b, comm->rank(), world);
  }
  const OffloadPlan offload = parse_offload_plan(c.offload);
  const auto store = make_checkpoint_store(parse_offload(c.offload), device);
  if (!comm) prepare_grads(model.trainable_parameters(), /*distributed=*/false);  // allocated before: base
  MemoryResult mem;
  TrainRun run;
  {
    MeasuredRegion region(rec, m.budget_bytes, offload.any(), mem);
    try {
      run = train_model(
          *m.train, strategy, model, objective, data, Partitioning{c.partition, c.logits_partition},
          strategy.uses_offload() ? store.get() : nullptr, offload.optimizer,
          [&] { start_clock(device, timer); }, [&] { return timer.stop_seconds(); });
    } catch (...) {
      region.end();
      if (m.memory) r.memory = mem;
      throw;
    }
    region.end();
  }
  if (m.memory) {
    const TrainEstimate run_shape{m.train->steps, static_cast<int64_t>(data.train.size() + data.eval.size()),
                                  m.train->precision == "mixed", m.train->grad_accum, offload.optimizer};
    if (auto e = estimate_cell(c, at::get_num_threads(), job.settings.device, run_shape, world)) {
      mem.estimate_bytes = e->peak_bytes;
      if (offload.any()) mem.estimate_host_bytes = e->host_bytes;
      if (offload.any()) mem.estimate_host_copy_bytes = e->offload_traffic_bytes;
    }
    if (offload.any() && !run.steps.empty()) mem.host_copy_bytes = run.steps.back().host_copy_bytes;
    r.memory = mem;
  }
  std::vector<double> seconds;
  for (const auto& s : run.steps) seconds.push_back(s.time_s);
  r.time = time_stats(seconds, 0, step_tokens);
  r.loss = run.steps.back().loss;
  r.train = run.to_json();
  if (const auto* d = dynamic_cast<const dist::DistStrategy*>(&strategy)) {
    r.comm = d->last_step_comm().to_json();
    d->restore_parameters(model);  // collective: ZeRO-3's layers whole again for the fingerprint
  }
  r.train["final_weights"] = weights_fingerprint(model);
}

// Steps 2-6 of a cell; fills `r`. Everything it builds is freed when it returns or throws.
void measure_cell(const CellJob& job, const Strategy& strategy, CellResult& r) {
  const Cell& c = job.cell;
  const MeasureSpec& m = job.settings.measure;
  // The communicator first: on a GPU it selects the rank's device, which the recorder and the timer follow.
  const auto* dist_strategy = dynamic_cast<const dist::DistStrategy*>(&strategy);
  dist::Communicator* comm =
      dist_strategy ? &dist::communicator_or_init_from_env(job.settings.device) : nullptr;
  const int world = comm ? comm->world_size() : 1, rank = comm ? comm->rank() : 0;
  // No index: the current device, the rank's.
  const torch::Device device(job.settings.device == "cuda" ? torch::kCUDA : torch::kCPU);
  profiles::Recorder& rec = profiles::recorder_for(job.settings.device);
  const auto timer = profiles::step_timer_for(job.settings.device);  // CUDA: events, no sync inside the step
  // Each cell starts from an empty cache, so its reserved bytes do not depend on the cells before it.
  rec.release_cached();
  rec.reset_peak();

  Model model = [&] {
    MemoryScope scope(Category::params);
    Model built = load_model(c.model, torch::TensorOptions().dtype(parse_dtype(c.dtype)).device(device),
                             job.settings.seed, job.settings.rope);
    if (c.lora_rank > 0) built.add_lora(c.lora_rank, c.lora_alpha, job.settings.seed);
    built.norm_kernel = job.settings.rms_norm.empty() ? default_norm_kernel(device)
                                                      : parse_norm_kernel(job.settings.rms_norm);
    built.router_balance = std::make_shared<RouterBalance>(job.settings.router_aux_loss_coef);
    return built;
  }();

  // The batch is built before measurement: DPO and GRPO run a no-grad reference pass here. A distributed
  // cell builds the global batch (batch examples per rank, or batch examples that sequence-parallel ranks
  // share) and keeps its rank's part.
  auto objective = make_objective(c.objective);
  BatchSpec spec;
  spec.examples = dist_strategy ? dist::global_examples(strategy, c.batch, world) : c.batch;
  spec.seq_len = c.seq_len;
  spec.prompt_len = c.prompt_len;
  spec.group = c.group;
  spec.padding = c.padding;
  spec.beta = c.beta;
  spec.epsilon = c.epsilon;
  spec.seed = job.settings.seed;
  spec.vocab = model.config.vocab;
  if (m.train) {  // its own batches, one per step (train_data.h)
    measure_training(job, strategy, model, *objective, spec, device, rec, *timer, comm, r);
    return;
  }
  Batch batch;
  int64_t step_tokens = 0;
  {
    MemoryScope scope(Category::other);
    if (!job.settings.data_path.empty())
      spec.data_tokens = data_tokens(job, spec.examples, model.config.vocab, r);
    batch = objective->make_batch(spec, model, c.logits_partition);
    step_tokens = batch.input_ids.numel();  // the global batch's: tokens per second counts every rank's
    if (world > 1) batch = dist::local_batch(strategy, batch, rank, world);
  }

  const bool timed = m.time.enabled;
  const int64_t warmup = timed ? m.time.warmup : 0, repeat = timed ? m.time.repeat : 0;
  // One checkpoint store for every step of the cell: offloaded, its host buffers are allocated by the first
  // step (warm-up) and reused.
  const auto store = make_checkpoint_store(parse_offload(c.offload), device);
  const bool offloads = parse_offload_plan(c.offload).any();  // checkpoints, or ZeRO-3's shards
  const StepInputs in{model, batch, *objective, Partitioning{c.partition, c.logits_partition},
                      strategy.uses_offload() ? store.get() : nullptr};
  const CellStep step{strategy, in, model.trainable_parameters(), device, *timer, dist_strategy != nullptr,
                      comm};
  // The path of a single-step cell, in this order: warm-up, the memory step, the timed steps, the reference.
  // FLOPs are counted on the first step of all (every step executes the same ops).
  std::optional<FlopCounts> flops;
  double loss = warm_up(step, warmup, flops);
  MemoryResult mem;
  loss = memory_step(step, job, rec, offloads, flops, mem, r);
  std::vector<double> seconds;
  if (repeat > 0) loss = timed_steps(step, repeat, seconds);
  r.loss = loss;
  if (m.memory) {
    if (auto e = estimate_cell(c, at::get_num_threads(), job.settings.device, std::nullopt, world)) {
      mem.estimate_bytes = e->peak_bytes;
      if (offloads) mem.estimate_host_bytes = e->host_bytes;
      if (offloads) mem.estimate_host_copy_bytes = e->offload_traffic_bytes;
    }
    r.memory = mem;
  }
  if (repeat > 0) r.time = time_stats(seconds, warmup, step_tokens);
  if (flops) r.compute = compute_result(*flops, r.time, device, model.dtype());
  if (dist_strategy) r.comm = dist_strategy->last_step_comm().to_json();
  if (m.grad_error_reference.empty()) return;
  if (dist_strategy) {  // collective: every rank takes part; rank 0 compares with plain BP on the global
                        // batch
    dist_strategy->restore_parameters(model);
    dist_strategy->load_full_gradients(model);
    if (rank != 0) return;
    if (world > 1) {
      MemoryScope scope(Category::other);
      batch = objective->make_batch(spec, model, c.logits_partition);
    }
  }
  r.grad_error = reference_error(job, model, batch, *objective, loss);
}

}  // namespace

CellResult run_cell(const CellJob& job) {
  MemoryRecorder::instance();
  CellResult r = result_for(job);
  const auto t0 = Clock::now();
  try {
    if (auto strategy = strategy_for(job, r)) {
      if (job.settings.threads > 0) torch::set_num_threads(static_cast<int>(job.settings.threads));
      measure_cell(job, *strategy, r);
    }
  } catch (const c10::OutOfMemoryError& e) {
    r.status = "oom";
    r.reason = one_line(e.what_without_backtrace());
    r.oom_requested_bytes = requested_bytes(r.reason);
    // The step's tensors are gone with measure_cell's frame; give their cached blocks back so the next cell
    // (or grad-error reference) starts from an empty cache.
    profiles::recorder_for(job.settings.device).release_cached();
  } catch (const c10::Error& e) {
    const std::string msg = one_line(e.what_without_backtrace());
    // The default CPU allocator reports a failed malloc as a plain c10::Error: a result (oom), with the
    // bytes it asked for.
    r.status = is_allocation_failure(msg) ? "oom" : "error";
    r.reason = msg;
    if (r.status == "oom") r.oom_requested_bytes = requested_bytes(msg);
  } catch (const std::bad_alloc& e) {
    r.status = "oom";
    r.reason = fmt::format("std::bad_alloc: {}", e.what());
  } catch (const std::exception& e) {
    r.status = "error";
    r.reason = one_line(e.what());
  }
  if (r.status != "ok") {  // a failed step leaves nothing trustworthy but where its memory stood
    r.loss.reset();
    r.time.reset();
    r.grad_error.reset();
    if (r.status != "oom") r.memory.reset();
  }
  r.wall_s = seconds_since(t0);
  return r;
}

int run_cell_main(const std::string& job_path) {
  MemoryRecorder::instance();
  std::string text;
  if (job_path == "-") {
    std::stringstream buf;
    buf << std::cin.rdbuf();
    text = buf.str();
  } else {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(job_path, ec))
      input_error(fmt::format("run-cell: cannot open job file '{}'", job_path),
                  "a job file written by bpbench run");
    text = read_file(job_path);
  }
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    input_error(fmt::format("run-cell: malformed job JSON: {}", e.what()),
                "a job file written by bpbench run");
  }
  const CellJob job = CellJob::from_json(j);
  const CellResult r = run_cell(job);
  const std::string line = r.to_json().dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  if (job.result_file.empty()) {
    std::cout << line << std::flush;
  } else {  // a rank of a distributed cell: the launcher reads RESULT_FILE.<rank>
    const char* rank = std::getenv("RANK");
    std::ofstream(fmt::format("{}.{}", job.result_file, rank ? rank : "0")) << line;
  }
  // Rank 0 holds the rendezvous store: nobody leaves while another rank may still need it.
  if (auto* comm = dist::current_communicator()) {
    try {
      comm->barrier("end of cell");
    } catch (const std::exception&) {
    }
  }
  dist::shutdown_owned_communicator();  // before exit, not in static teardown (comm.h)
  return 0;
}

}  // namespace bpbench
