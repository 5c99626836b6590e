// cell_in_process.cpp: one cell in this process, the measured steps: build the model and batch, pre-allocate
// gradients, warm up, measure memory on the first measured run and time on every one, then compare the
// gradients with plain BP in float64. Also the hidden `run-cell` subcommand that a child process runs.
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
#include "harness/run/gpu_peak.h"
#include "harness/run/grad_error.h"
#include "harness/run/run_detail.h"
#include "harness/run/runner.h"
#include "harness/run/train_data.h"
#include "harness/run/train_loop.h"
#include "impls/dist_common.h"
#include "impls/offload.h"
#include "impls/strategy.h"
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

void sync_device(const torch::Device& device) {
  if (device.is_cuda() && torch::cuda::is_available()) torch::cuda::synchronize();
}

// The budget applies to the measured run only, and must be lifted on every exit path (an OOM thrown from deep
// inside a strategy included), or the reference run and the next cell would inherit it.
class BudgetGuard {
 public:
  BudgetGuard(profiles::Recorder& recorder, std::optional<int64_t> bytes)
      : recorder_(recorder), active_(bytes.has_value()) {
    if (active_) recorder_.set_budget(bytes);
  }
  ~BudgetGuard() {
    if (active_) recorder_.set_budget(std::nullopt);
  }
  BudgetGuard(const BudgetGuard&) = delete;
  BudgetGuard& operator=(const BudgetGuard&) = delete;

 private:
  profiles::Recorder& recorder_;
  bool active_;
};

std::map<std::string, int64_t> category_map(const profiles::CategoryBytes& bytes) {
  std::map<std::string, int64_t> out;
  for (int i = 0; i < profiles::kCategoryCount; ++i)
    out[profiles::category_name(static_cast<Category>(i))] = bytes[static_cast<size_t>(i)];
  return out;
}

TimeResult time_stats(std::vector<double> runs, int64_t warmup) {
  TimeResult t;
  t.runs_s = runs;
  t.warmup = warmup;
  std::sort(runs.begin(), runs.end());
  const size_t n = runs.size();
  t.min_s = runs.front();
  t.max_s = runs.back();
  t.median_s = n % 2 ? runs[n / 2] : 0.5 * (runs[n / 2 - 1] + runs[n / 2]);
  return t;
}

// Before each run: a single-process strategy accumulates into zeroed, pre-allocated gradients (as a training
// loop that zeroes rather than frees them: they are base). A distributed one owns its gradient buckets and
// starts from none.
void prepare_grads(const std::vector<NamedParameter>& params, bool distributed) {
  torch::NoGradGuard no_grad;
  for (const auto& p : params) {
    auto& g = p.tensor.mutable_grad();
    if (distributed) {
      g.reset();
    } else if (g.defined()) {
      g.zero_();
    } else {  // a strategy dropped it: put it back so it counts as base, not as part of the step's peak
      MemoryScope scope(Category::grads);
      g = torch::zeros_like(p.tensor);
    }
  }
}

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
    ge.reference_loss =
        reference->forward_backward(StepInputs{ref, ref_batch, objective, {T, T}}).item<double>();
    ge.loss_abs_error = std::abs(loss - ge.reference_loss);
    ge.groups = gradient_error(ref.trainable_parameters(), model.trainable_parameters());
  } catch (const c10::Error& e) {
    ge.error = one_line(e.what_without_backtrace());
  } catch (const std::exception& e) {
    ge.error = one_line(e.what());
  }
  return ge;
}

// Stops a timeline on every exit path, so an OOM inside the step cannot leave one recording.
class TimelineGuard {
 public:
  TimelineGuard(profiles::Recorder& recorder, bool on) : recorder_(recorder), on_(on) {
    if (on_) recorder_.start_timeline(0.0);
  }
  ~TimelineGuard() {
    if (on_) recorder_.stop_timeline();
  }
  profiles::Timeline stop() {
    on_ = false;
    return recorder_.stop_timeline();
  }
  TimelineGuard(const TimelineGuard&) = delete;
  TimelineGuard& operator=(const TimelineGuard&) = delete;

 private:
  profiles::Recorder& recorder_;
  bool on_;
};

// Where the allocator's state goes (CUDA: recorder.writes_snapshots()), DIR/NAME.memory_viz.pickle: written
// when an allocation fails, and after the step when a timeline was asked for. Unset again when the cell ends,
// however it ends.
class SnapshotGuard {
 public:
  SnapshotGuard(profiles::Recorder& recorder, const CellJob& job) : recorder_(recorder) {
    if (!recorder.writes_snapshots() || job.timeline_dir.empty() || job.timeline_name.empty()) return;
    name_ = job.timeline_name + ".memory_viz.pickle";
    path_ = (std::filesystem::path(job.timeline_dir) / name_).string();
    std::filesystem::create_directories(std::filesystem::path(path_).parent_path());
    recorder_.set_oom_snapshot_path(path_);
  }
  ~SnapshotGuard() {
    if (!path_.empty()) recorder_.set_oom_snapshot_path("");
  }
  SnapshotGuard(const SnapshotGuard&) = delete;
  SnapshotGuard& operator=(const SnapshotGuard&) = delete;

  // The step ran out of memory: name the snapshot the allocator's hook wrote, if it did.
  void after_oom(MemoryResult& mem) const {
    if (!path_.empty() && std::filesystem::exists(path_)) mem.snapshot_file = name_;
  }
  void write_now(MemoryResult& mem) {
    if (!path_.empty() && recorder_.write_snapshot(path_)) mem.snapshot_file = name_;
  }

 private:
  profiles::Recorder& recorder_;
  std::string name_, path_;
};

// CUPTI's records of the traced step (measure.device_activity), stopped on every exit path.
class DeviceActivityGuard {
 public:
  explicit DeviceActivityGuard(bool on) {
    if (!on) return;
    std::string why;
    on_ = profiles::start_device_activity(&why);
    if (!on_) result_ = json{{"error", why}};
  }
  ~DeviceActivityGuard() {
    if (on_) profiles::stop_device_activity(profiles::TraceClock::now());
  }
  DeviceActivityGuard(const DeviceActivityGuard&) = delete;
  DeviceActivityGuard& operator=(const DeviceActivityGuard&) = delete;

  // The records on `timeline`'s clock; counts them (or keeps why there are none) in `mem`.
  std::vector<profiles::DeviceActivity> stop(const profiles::Timeline& timeline, MemoryResult& mem) {
    std::vector<profiles::DeviceActivity> records;
    if (on_) {
      on_ = false;
      records = profiles::stop_device_activity(timeline.origin);
      json counts = {{"kernels", 0}, {"memcpys", 0}, {"memsets", 0}};
      for (const auto& a : records) counts[a.kind + "s"] = counts[a.kind + "s"].get<int64_t>() + 1;
      // What the trace lacks, said beside what it holds (device_activity.h).
      const auto losses = profiles::last_device_activity_losses();
      counts["dropped"] = losses.dropped;
      counts["incomplete"] = losses.incomplete;
      result_ = counts;
    }
    mem.device_activity = result_;
    return records;
  }

 private:
  bool on_ = false;
  json result_;
};

// DIR/NAME.json (plain timeline, read by `bpbench report`) and DIR/NAME.trace.json (Perfetto), with the
// device's own activity (CUPTI) in the trace when it was collected.
void write_timeline(const CellJob& job, const profiles::Timeline& timeline, MemoryResult& mem,
                    const std::vector<profiles::DeviceActivity>& device = {}) {
  if (job.timeline_dir.empty() || job.timeline_name.empty()) return;
  namespace fs = std::filesystem;
  const fs::path dir = job.timeline_dir;
  fs::create_directories((dir / job.timeline_name).parent_path());
  const std::string label = job.cell.label({"model", "impl", "objective", "seq_len", "partition"});
  write_json_atomically(dir / (job.timeline_name + ".json"),
                        json{{"cell", job.cell.axes()}, {"timeline", profiles::timeline_to_json(timeline)}});
  write_json_atomically(dir / (job.timeline_name + ".trace.json"),
                        profiles::chrome_trace(timeline, label, device));
  mem.timeline_file = job.timeline_name + ".json";
  mem.trace_file = job.timeline_name + ".trace.json";
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

// Where a measurement starts: an empty cache (blocks cached by a warm-up would be reused without the budget's
// check, which a caching allocator makes only when it reserves a segment, so a step over the budget is "oom"
// here exactly as in a max-length probe, which starts with none), fresh peaks, and the bytes live now.
void start_measurement(profiles::Recorder& rec, MemoryResult& mem) {
  rec.release_cached();
  rec.reset_peak();
  profiles::reset_host_peak();
  mem.base_bytes = rec.live_bytes();
}

// The measurement's high points, read where it ends and where it runs out of memory alike.
void read_peaks(const profiles::Recorder& rec, bool offloads, MemoryResult& mem) {
  mem.peak_bytes = rec.peak_bytes();
  mem.peak_by_category = category_map(rec.peak_by_category());
  mem.reserved_peak_bytes = rec.reserved_peak_bytes();
  mem.alloc_retries = rec.alloc_retries();
  if (offloads) mem.host_peak_bytes = profiles::host_peak_bytes();
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
void measure_training(const CellJob& job, const Strategy& strategy, Model& model, const Objective& objective,
                      const BatchSpec& spec, const torch::Device& device, profiles::Recorder& rec,
                      profiles::StepTimer& timer, CellResult& r) {
  const Cell& c = job.cell;
  const MeasureSpec& m = job.settings.measure;
  TrainData data;
  {
    MemoryScope scope(Category::other);
    json data_record;
    data = make_train_data(*m.train, spec, model, objective, c.logits_partition, job.settings.data_path,
                           data_record);
    if (!data_record.is_null()) r.data = data_record;
  }
  prepare_grads(model.trainable_parameters(), /*distributed=*/false);
  const auto store = make_checkpoint_store(parse_offload(c.offload), device);
  const bool offloads = store->offload() != Offload::none;
  MemoryResult mem;
  start_measurement(rec, mem);
  TrainRun run;
  {
    BudgetGuard budget(rec, m.budget_bytes);
    try {
      run = train_model(
          *m.train, strategy, model, objective, data, Partitioning{c.partition, c.logits_partition},
          strategy.uses_offload() ? store.get() : nullptr,
          [&] {
            sync_device(device);
            timer.start();
          },
          [&] { return timer.stop_seconds(); });
    } catch (...) {
      read_peaks(rec, offloads, mem);
      if (m.memory) r.memory = mem;
      throw;
    }
  }
  read_peaks(rec, offloads, mem);
  if (m.memory) {
    const TrainEstimate run_shape{m.train->steps, static_cast<int64_t>(data.train.size() + data.eval.size()),
                                  m.train->precision == "mixed"};
    if (auto e = estimate_cell(c, at::get_num_threads(), job.settings.device, run_shape))
      mem.estimate_bytes = e->peak_bytes;
    r.memory = mem;
  }
  std::vector<double> seconds;
  for (const auto& s : run.steps) seconds.push_back(s.time_s);
  r.time = time_stats(seconds, 0);
  r.loss = run.steps.back().loss;
  r.train = run.to_json();
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
    return built;
  }();

  // The batch is built before measurement: DPO and GRPO run a no-grad reference pass here. A distributed
  // cell builds the global batch (batch examples per rank) and keeps its rank's rows.
  auto objective = make_objective(c.objective);
  BatchSpec spec;
  spec.examples = c.batch * world;
  spec.seq_len = c.seq_len;
  spec.prompt_len = c.prompt_len;
  spec.group = c.group;
  spec.padding = c.padding;
  spec.beta = c.beta;
  spec.epsilon = c.epsilon;
  spec.seed = job.settings.seed;
  spec.vocab = model.config.vocab;
  if (m.train) {  // its own batches, one per step (train_data.h)
    measure_training(job, strategy, model, *objective, spec, device, rec, *timer, r);
    return;
  }
  Batch batch;
  {
    MemoryScope scope(Category::other);
    if (!job.settings.data_path.empty())
      spec.data_tokens = data_tokens(job, spec.examples, model.config.vocab, r);
    batch = objective->make_batch(spec, model, c.logits_partition);
    if (world > 1) batch = dist::rank_batch(batch, rank, world);
  }

  const auto params = model.trainable_parameters();

  const bool timed = m.time.enabled;
  const int64_t warmup = timed ? m.time.warmup : 0, repeat = timed ? m.time.repeat : 1;
  // One checkpoint store for every step of the cell: offloaded, its host buffers are allocated by the first
  // step (warm-up) and reused.
  const auto store = make_checkpoint_store(parse_offload(c.offload), device);
  const bool offloads = store->offload() != Offload::none;
  const StepInputs in{model, batch, *objective, Partitioning{c.partition, c.logits_partition},
                      strategy.uses_offload() ? store.get() : nullptr};
  std::vector<double> seconds;
  MemoryResult mem;
  double loss = std::numeric_limits<double>::quiet_NaN();
  std::optional<FlopCounts> flops;
  // The memory step runs first after warm-up. It is timed too, unless it is slower than the others: where
  // CUPTI traces it, or where the cache was emptied before it (its blocks are reserved afresh). Then it runs
  // once more than `repeat` and is left out of the time statistics.
  const bool trace_device = m.timeline && m.device_activity && device.is_cuda();
  const bool memory_step_timed = !trace_device && !rec.caches_blocks();
  const int64_t runs = warmup + repeat + (timed && !memory_step_timed ? 1 : 0);
  for (int64_t run = 0; run < runs; ++run) {
    prepare_grads(params, dist_strategy != nullptr);
    if (comm) comm->barrier("before step");  // every rank starts its clock together
    const bool first_measured = run == warmup;
    // FLOPs are counted on the first run (a warm-up where there is one): every run executes the same ops.
    std::optional<FlopCounter> counter;
    if (run == 0) counter.emplace();
    torch::Tensor loss_t;
    double dt = 0;
    if (first_measured) {
      start_measurement(rec, mem);
      BudgetGuard budget(rec, m.budget_bytes);
      SnapshotGuard snapshot(rec, job);
      TimelineGuard timeline(rec, m.timeline);
      DeviceActivityGuard device_activity(trace_device);
      try {
        sync_device(device);
        timer->start();
        loss_t = strategy.forward_backward(in);
        dt = timer->stop_seconds();
      } catch (...) {
        // Where the step stood when it ran out: its base and the highest point it reached within the budget.
        read_peaks(rec, offloads, mem);
        snapshot.after_oom(mem);
        if (m.timeline) {
          const profiles::Timeline tl = timeline.stop();
          write_timeline(job, tl, mem, device_activity.stop(tl, mem));
        }
        if (m.memory) r.memory = mem;
        throw;
      }
      read_peaks(rec, offloads, mem);
      if (m.timeline) {
        snapshot.write_now(mem);  // while the allocator's history is on: stopping the timeline ends it
        const profiles::Timeline tl = timeline.stop();
        write_timeline(job, tl, mem, device_activity.stop(tl, mem));
      }
    } else {
      sync_device(device);
      timer->start();
      loss_t = strategy.forward_backward(in);
      dt = timer->stop_seconds();
    }
    loss = loss_t.item<double>();
    if (counter) flops = counter->counts();  // complete: backward() returns once autograd ran every node
    if (run >= warmup && (memory_step_timed || !first_measured)) seconds.push_back(dt);
  }
  r.loss = loss;
  if (m.memory) {
    if (world == 1)
      if (auto e = estimate_cell(c, at::get_num_threads(), job.settings.device)) {
        mem.estimate_bytes = e->peak_bytes;
        if (offloads) mem.estimate_host_bytes = e->host_bytes;
      }
    r.memory = mem;
  }
  if (timed) r.time = time_stats(seconds, warmup);
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
    // The step's tensors are gone with measure_cell's frame; give their cached blocks back so the next cell
    // (or grad-error reference) starts from an empty cache.
    profiles::recorder_for(job.settings.device).release_cached();
  } catch (const c10::Error& e) {
    const std::string msg = one_line(e.what_without_backtrace());
    // The default CPU allocator reports a failed malloc as a plain c10::Error.
    r.status = msg.find("not enough memory") != std::string::npos ? "oom" : "error";
    r.reason = msg;
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
  return 0;
}

}  // namespace bpbench
