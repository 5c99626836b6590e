// runner.cpp: one cell in this process or in a child, and the loop over a scenario's grid.
#include "harness/runner.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <new>
#include <set>
#include <sstream>
#include <thread>

#include "harness/data_file.h"
#include "harness/dist_launch.h"
#include "harness/estimate.h"
#include "harness/grad_error.h"
#include "harness/hf_model.h"
#include "harness/objective.h"
#include "harness/rope_config.h"
#include "impls/dist_common.h"
#include "impls/strategy.h"
#include "profiles/chrome_trace.h"
#include "profiles/cuda_build.h"
#include "profiles/memory.h"

extern char** environ;

namespace bpbench {

using nlohmann::json;
using profiles::Category;
using profiles::MemoryRecorder;
using profiles::MemoryScope;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Results and the console are line-oriented: an exception message must not break a line.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

void sync_device(const torch::Device& device) {
  if (device.is_cuda() && torch::cuda::is_available()) torch::cuda::synchronize();
}

// The budget applies to the measured run only, and must be lifted on every exit path (an OOM thrown from deep
// inside a strategy included), or the reference run and the next cell would inherit it.
class BudgetGuard {
 public:
  explicit BudgetGuard(std::optional<int64_t> bytes) : active_(bytes.has_value()) {
    if (active_) MemoryRecorder::instance().set_budget(bytes);
  }
  ~BudgetGuard() {
    if (active_) MemoryRecorder::instance().set_budget(std::nullopt);
  }
  BudgetGuard(const BudgetGuard&) = delete;
  BudgetGuard& operator=(const BudgetGuard&) = delete;

 private:
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

// The gradients of plain BP on a float64 copy of the same weights, same batch, compared with the cell's.
GradErrorResult reference_error(const CellJob& job, const Model& model, const Batch& batch,
                                const Objective& objective, double loss) {
  GradErrorResult ge;
  ge.reference = job.settings.measure.grad_error_reference;
  try {
    Model ref = model.converted(torch::TensorOptions().dtype(torch::kDouble).device(model.device()));
    auto plain = make_strategy("plain");
    const int64_t T = job.cell.seq_len;
    ge.reference_loss = plain->forward_backward(StepInputs{ref, batch, objective, {T, T}}).item<double>();
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
  explicit TimelineGuard(bool on) : on_(on) {
    if (on_) MemoryRecorder::instance().start_timeline();
  }
  ~TimelineGuard() {
    if (on_) MemoryRecorder::instance().stop_timeline();
  }
  profiles::Timeline stop() {
    on_ = false;
    return MemoryRecorder::instance().stop_timeline();
  }
  TimelineGuard(const TimelineGuard&) = delete;
  TimelineGuard& operator=(const TimelineGuard&) = delete;

 private:
  bool on_;
};

// DIR/NAME.json (plain timeline, read by `bpbench report`) and DIR/NAME.trace.json (Perfetto).
void write_timeline(const CellJob& job, const profiles::Timeline& timeline, MemoryResult& mem) {
  if (job.timeline_dir.empty() || job.timeline_name.empty()) return;
  namespace fs = std::filesystem;
  const fs::path dir = job.timeline_dir;
  fs::create_directories((dir / job.timeline_name).parent_path());
  const std::string label = job.cell.label({"model", "impl", "objective", "seq_len", "partition"});
  write_json_atomically(dir / (job.timeline_name + ".json"),
                        json{{"cell", job.cell.axes()}, {"timeline", profiles::timeline_to_json(timeline)}});
  write_json_atomically(dir / (job.timeline_name + ".trace.json"), profiles::chrome_trace(timeline, label));
  mem.timeline_file = job.timeline_name + ".json";
  mem.trace_file = job.timeline_name + ".trace.json";
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

// Steps 2-6 of a cell; fills `r`. Everything it builds is freed when it returns or throws.
void measure_cell(const CellJob& job, const Strategy& strategy, CellResult& r) {
  const Cell& c = job.cell;
  const MeasureSpec& m = job.settings.measure;
  const torch::Device device(job.settings.device == "cuda" ? torch::kCUDA : torch::kCPU);
  auto& rec = MemoryRecorder::instance();
  const auto* dist_strategy = dynamic_cast<const dist::DistStrategy*>(&strategy);
  dist::Communicator* comm =
      dist_strategy ? &dist::communicator_or_init_from_env(job.settings.device) : nullptr;
  const int world = comm ? comm->world_size() : 1, rank = comm ? comm->rank() : 0;

  Model model = [&] {
    MemoryScope scope(Category::params);
    Model built = load_model(c.model, torch::TensorOptions().dtype(parse_dtype(c.dtype)).device(device),
                             job.settings.seed, job.settings.rope);
    if (c.lora_rank > 0) built.add_lora(c.lora_rank, c.lora_alpha, job.settings.seed);
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
  const StepInputs in{model, batch, *objective, Partitioning{c.partition, c.logits_partition}};
  std::vector<double> seconds;
  MemoryResult mem;
  double loss = std::numeric_limits<double>::quiet_NaN();
  for (int64_t run = 0; run < warmup + repeat; ++run) {
    prepare_grads(params, dist_strategy != nullptr);
    if (comm) comm->barrier("before step");  // every rank starts its clock together
    const bool first_measured = run == warmup;
    torch::Tensor loss_t;
    double dt = 0;
    if (first_measured) {
      rec.reset_peak();
      mem.base_bytes = rec.live_bytes();
      BudgetGuard budget(m.budget_bytes);
      TimelineGuard timeline(m.timeline);
      try {
        sync_device(device);
        const auto t0 = Clock::now();
        loss_t = strategy.forward_backward(in);
        sync_device(device);
        dt = seconds_since(t0);
      } catch (...) {
        // Where the step stood when it ran out: its base and the highest point it reached within the budget.
        mem.peak_bytes = rec.peak_bytes();
        mem.peak_by_category = category_map(rec.peak_by_category());
        if (m.timeline) write_timeline(job, timeline.stop(), mem);
        if (m.memory) r.memory = mem;
        throw;
      }
      mem.peak_bytes = rec.peak_bytes();
      mem.peak_by_category = category_map(rec.peak_by_category());
      if (m.timeline) write_timeline(job, timeline.stop(), mem);
    } else {
      sync_device(device);
      const auto t0 = Clock::now();
      loss_t = strategy.forward_backward(in);
      sync_device(device);
      dt = seconds_since(t0);
    }
    loss = loss_t.item<double>();
    if (run >= warmup) seconds.push_back(dt);
  }
  r.loss = loss;
  if (m.memory) {
    mem.estimate_bytes = world == 1 ? estimate_cell_peak(c) : std::nullopt;
    r.memory = mem;
  }
  if (timed) r.time = time_stats(seconds, warmup);
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

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\n\r ");
  if (end == std::string::npos) return "";
  size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1,
                     end + 1 - (begin == std::string::npos ? 0 : begin + 1));
}

// A private temporary file; returns its path and an open descriptor.
std::pair<std::string, int> make_temp(const char* stem) {
  std::string path = (std::filesystem::temp_directory_path() / (std::string(stem) + "-XXXXXX")).string();
  const int fd = mkstemp(path.data());
  if (fd < 0)
    throw std::runtime_error(fmt::format("cannot create a temporary file: {}", std::strerror(errno)));
  return {path, fd};
}

std::string resolve_exe(const std::string& exe) {
  std::error_code ec;
  auto p = std::filesystem::read_symlink(exe, ec);  // /proc/self/exe must name *this* process's binary
  return ec ? exe : p.string();
}

bool is_distributed(const Strategy& strategy) {
  return dynamic_cast<const dist::DistStrategy*>(&strategy) != nullptr;
}

// Why a cell is not run: a CUDA cell where there is no GPU, the strategy refuses it, or a single-process
// strategy in a multi-rank scenario.
std::optional<std::string> skip_reason(const Strategy& strategy, const CellJob& job) {
  if (job.settings.device == "cuda" && profiles::cuda_device_count() == 0) return profiles::no_gpu_reason();
  if (auto why = strategy.unsupported(CellTraits{job.cell.objective, job.settings.world_size})) return why;
  if (!is_distributed(strategy) && job.settings.world_size > 1)
    return fmt::format("runs in one process; world_size {} is for the -dist strategies",
                       job.settings.world_size);
  return std::nullopt;
}

// A result for `job` before anything ran: its cell and threads, status `status`.
CellResult result_for(const CellJob& job, std::string status = "ok") {
  CellResult r;
  r.cell = job.cell;
  r.threads = job.settings.threads;
  r.status = std::move(status);
  try {
    r.rope = rope_to_json(model_config_of(job.cell.model, job.settings.rope).rope);
  } catch (const std::exception&) {  // a model that cannot be read: the cell's error says why
  }
  return r;
}

// The strategy of `job`, with what the result records about it (partition use, ranks). Null when the cell
// is not run: `r` then says "skipped" and why.
std::unique_ptr<Strategy> strategy_for(const CellJob& job, CellResult& r) {
  auto strategy = make_strategy(job.cell.impl);
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

// Checks the scenario's data file against every cell before anything runs: readable, ids within each
// model's vocabulary, enough sequences for the largest batch. One line naming the problem otherwise.
void check_data_file(const Scenario& scenario, const std::vector<Cell>& cells) {
  const std::string& path = scenario.settings.data_path;
  if (path.empty()) return;
  const std::string valid = "a JSON list of token-id lists with ids below the model's vocabulary";
  std::map<std::string, int64_t> rows_needed;  // model -> sequences its largest cell needs
  for (const auto& c : cells)
    rows_needed[c.model] = std::max(rows_needed[c.model], c.batch * scenario.settings.world_size);
  for (const auto& [model, rows] : rows_needed) {
    TokenData d;
    try {
      d = load_token_data(path, 2, model_config_of(model).vocab);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      input_error(fmt::format("data: {}", one_line(e.what())), valid);
    }
    if (d.sequences < rows)
      input_error(fmt::format("data: '{}' has {} sequences; model {} needs {} (batch x world_size)", path,
                              d.sequences, model, rows),
                  "a batch no larger than the file's sequences");
  }
}

}  // namespace

// ---- public
// -------------------------------------------------------------------------------------------------

namespace {
bool is_preset(const std::string& name) {
  for (const auto& p : model_presets())
    if (p.name == name) return true;
  return false;
}
}  // namespace

Model load_model(const std::string& name, const torch::TensorOptions& options, uint64_t seed,
                 const json& rope) {
  // RoPE holds no weights and the random init does not read it: the override is config alone.
  const ModelConfig config = model_config_of(name, rope);
  Model model = !is_preset(name) && is_hf_model_dir(name) ? load_hf_model(name, options)
                                                          : Model::random(config, options, seed);
  model.config = config;
  return model;
}

ModelConfig model_config_of(const std::string& name, const json& rope) {
  ModelConfig config =
      !is_preset(name) && is_hf_model_dir(name) ? read_hf_config(name) : find_model_preset(name);
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

std::optional<int64_t> estimate_cell_peak(const Cell& c) {
  const auto& known = estimated_impls();
  if (c.seq_len < 1 || std::find(known.begin(), known.end(), c.impl) == known.end()) return std::nullopt;
  try {
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
    return estimate_peak(in).peak_bytes;
  } catch (const std::exception&) {  // a model that cannot be read: no estimate, and the cell says why
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
  job.timeline_dir = text("timeline_dir");
  job.timeline_name = text("timeline_name");
  job.result_file = text("result_file");
  if (j.contains("world_size")) {
    if (!j.at("world_size").is_number_integer() || j.at("world_size").get<int64_t>() < 1)
      input_error("run-cell: bad world_size", "integers >= 1");
    job.settings.world_size = j.at("world_size").get<int64_t>();
  }
  if (j.contains("rope")) job.settings.rope = j.at("rope");  // checked where the model is built
  return job;
}

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

CellResult run_cell_isolated(const CellJob& job, const std::string& exe) {
  CellResult failed = result_for(job, "error");
  const auto t0 = Clock::now();

  std::string job_path, err_path;
  int err_fd = -1, pipe_fd[2] = {-1, -1};
  auto cleanup = [&] {
    for (int* fd : {&err_fd, &pipe_fd[0], &pipe_fd[1]})
      if (*fd >= 0) close(std::exchange(*fd, -1));
    if (!job_path.empty()) std::remove(job_path.c_str());
    if (!err_path.empty()) std::remove(err_path.c_str());
  };
  try {
    int job_fd;
    std::tie(job_path, job_fd) = make_temp("bpbench-job");
    const std::string text = job.to_json().dump();
    const bool wrote = write(job_fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    close(job_fd);
    if (!wrote) throw std::runtime_error("cannot write the cell's job file");
    std::tie(err_path, err_fd) = make_temp("bpbench-stderr");
    if (pipe2(pipe_fd, O_CLOEXEC) != 0)
      throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));

    // posix_spawn execs at once (no fork of this multi-threaded process is ever left running LibTorch code).
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_fd[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
    const std::string binary = resolve_exe(exe);
    std::string arg0 = binary, arg1 = "run-cell";
    std::vector<char*> argv = {arg0.data(), arg1.data(), job_path.data(), nullptr};
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(std::exchange(pipe_fd[1], -1));
    if (rc != 0) throw std::runtime_error(fmt::format("cannot start '{}': {}", binary, std::strerror(rc)));

    std::string out;
    char buf[65536];
    for (;;) {
      const ssize_t n = read(pipe_fd[0], buf, sizeof buf);
      if (n > 0) {
        out.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        break;
      }
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const std::string err_tail = one_line(last_line(read_file(err_path)));
    cleanup();
    if (WIFSIGNALED(status)) {
      const int sig = WTERMSIG(status);
      failed.reason = fmt::format("cell process killed by signal {} ({}){}", sig, strsignal(sig),
                                  sig == SIGKILL ? "; the system's out-of-memory killer sends this" : "");
    } else {
      try {
        CellResult r = CellResult::from_json(json::parse(last_line(out)));
        if (WEXITSTATUS(status) == 0) return r;
      } catch (const std::exception&) {
      }
      failed.reason = fmt::format("cell process exited with status {} and no result{}{}", WEXITSTATUS(status),
                                  err_tail.empty() ? "" : ": ", err_tail);
    }
  } catch (const std::exception& e) {
    cleanup();
    failed.reason = one_line(e.what());
  }
  failed.wall_s = seconds_since(t0);
  return failed;
}

CellResult run_cell_distributed(const CellJob& job, const std::string& exe) {
  CellResult merged = result_for(job, "error");
  merged.world_size = job.settings.world_size;
  const auto t0 = Clock::now();
  const int world = static_cast<int>(job.settings.world_size);
  std::string job_path;
  std::vector<std::string> rank_files;
  auto cleanup = [&] {
    if (!job_path.empty()) std::remove(job_path.c_str());
    for (const auto& f : rank_files) std::remove(f.c_str());
  };
  try {
    int fd;
    std::tie(job_path, fd) = make_temp("bpbench-dist-job");
    close(fd);
    CellJob rank_job = job;
    rank_job.result_file = job_path + ".result";  // each rank appends ".<rank>"
    for (int r = 0; r < world; ++r) rank_files.push_back(fmt::format("{}.{}", rank_job.result_file, r));
    std::ofstream(job_path) << rank_job.to_json().dump() << "\n";

    LaunchOptions launch;
    launch.world_size = world;
    launch.exe = resolve_exe(exe);
    launch.args = {"run-cell", job_path};
    const LaunchResult lr = launch_local_ranks(launch);

    std::vector<CellResult> ranks;
    for (int r = 0; r < world; ++r) {
      const std::string text = read_file(rank_files[r]);
      if (text.empty()) continue;
      try {
        ranks.push_back(CellResult::from_json(json::parse(text)));
      } catch (const std::exception&) {
      }
    }
    cleanup();
    if (ranks.size() != static_cast<size_t>(world)) {
      merged.reason = lr.exit_code != 0
                          ? lr.error
                          : fmt::format("{} of {} ranks wrote no result", world - ranks.size(), world);
      merged.wall_s = seconds_since(t0);
      return merged;
    }
    // Rank 0's record (loss, gradient error against plain BP on the global batch), every rank's measurements,
    // and the worst status: a rank out of memory makes the cell oom even when the others only saw it fail.
    merged = ranks[0];
    merged.world_size = world;
    merged.ranks = json::array();
    for (const auto& r : ranks) {
      if (r.status == "oom" || (r.status == "error" && merged.status != "oom")) {
        merged.status = r.status;
        merged.reason = r.reason;
      }
      merged.ranks.push_back({{"status", r.status},
                              {"peak_bytes", r.memory ? json(r.memory->peak_bytes) : json(nullptr)},
                              {"base_bytes", r.memory ? json(r.memory->base_bytes) : json(nullptr)},
                              {"time_median_s", r.time ? json(r.time->median_s) : json(nullptr)},
                              {"comm", r.comm}});
      // The cell's peak is the highest rank's: what a per-device budget must hold.
      if (r.memory && merged.memory && r.memory->peak_bytes > merged.memory->peak_bytes) {
        merged.memory->peak_bytes = r.memory->peak_bytes;
        merged.memory->base_bytes = r.memory->base_bytes;
        merged.memory->peak_by_category = r.memory->peak_by_category;
      }
    }
    for (size_t r = 0; r < merged.ranks.size(); ++r) merged.ranks[r]["rank"] = r;
    if (merged.status != "ok") {
      merged.loss.reset();
      merged.time.reset();
      merged.grad_error.reset();
    }
  } catch (const std::exception& e) {
    cleanup();
    merged.reason = one_line(e.what());
  }
  merged.wall_s = seconds_since(t0);
  return merged;
}

CellResult search_cell_max_seq_len(const CellJob& job, const std::string& exe,
                                   const std::function<void(const Probe&)>& on_probe) {
  const MeasureSpec::MaxSeqLen spec = job.settings.measure.max_seq_len.value();
  CellResult r = result_for(job);
  const auto t0 = Clock::now();
  try {
    if (!strategy_for(job, r)) {
      r.wall_s = seconds_since(t0);
      return r;
    }
  } catch (const std::exception& e) {
    r.status = "error";
    r.reason = one_line(e.what());
    return r;
  }

  // A probe: the cell at length T (null partitions follow T), one measured step, memory only, in a child.
  auto at_length = [&](int64_t T) {
    CellJob p = job;
    p.cell.seq_len = T;
    if (job.cell.partition == 0) p.cell.partition = T;
    if (job.cell.logits_partition == 0) p.cell.logits_partition = T;
    p.settings.measure.max_seq_len.reset();
    p.settings.measure.memory = true;
    p.settings.measure.time.enabled = false;
    p.settings.measure.grad_error_reference.clear();
    p.settings.measure.timeline = false;
    p.settings.measure.budget_bytes = spec.budget_bytes;  // none on a GPU: its own memory is the limit
    p.timeline_dir.clear();
    return p;
  };
  MaxLenSearch search;
  search.budget_bytes = spec.budget_bytes.value_or(0);
  search.granularity = spec.granularity;
  search.upper = spec.upper;
  // Start at the largest length the analytic estimate puts within the budget, and grow or shrink by a
  // quarter from there: the estimate is within a few percent for the strategies it knows.
  if (spec.budget_bytes) {
    auto fits = [&](int64_t T) {
      auto e = estimate_cell_peak(at_length(T).cell);
      return e && *e <= *spec.budget_bytes;
    };
    if (estimate_cell_peak(at_length(spec.granularity).cell)) {
      int64_t lo = 0, hi = spec.upper / spec.granularity;  // in units of granularity
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (fits(mid * spec.granularity))
          lo = mid;
        else
          hi = mid - 1;
      }
      search.start = std::max<int64_t>(1, lo) * spec.granularity;
      search.growth = 1.25;
    }
  }
  auto probe = [&](int64_t T) {
    const CellResult pr = job.settings.world_size > 1 ? run_cell_distributed(at_length(T), exe)
                                                      : run_cell_isolated(at_length(T), exe);
    Probe p;
    p.seq_len = T;
    p.status = pr.status == "skipped" ? "error" : pr.status;
    p.peak_bytes = pr.memory ? pr.memory->peak_bytes : 0;
    p.reason = pr.reason;
    return p;
  };
  r.max_len = MaxLenRecord{search_max_seq_len(search, probe, on_probe), search};
  if (!r.max_len->error.empty()) {
    r.status = "error";
    r.reason = r.max_len->error;
  }
  r.wall_s = seconds_since(t0);
  return r;
}

RunSummary run_scenario(const Scenario& scenario, const RunOptions& options) {
  MemoryRecorder::instance();  // installed before the first tensor, so every tensor of every cell is seen
  const int64_t threads =
      options.threads.value_or(scenario.settings.threads > 0 ? scenario.settings.threads : default_threads());
  if (threads < 1) input_error(fmt::format("threads: {} is out of range", threads), "integers >= 1");
  const bool isolate = options.isolate.value_or(scenario.isolate);
  const auto cells = scenario.expand();
  check_data_file(scenario, cells);
  // A RoPE override that some model cannot take is an input error before anything runs, not a failed cell.
  std::set<std::string> models;
  for (const auto& c : cells)
    if (models.insert(c.model).second) model_config_of(c.model, scenario.settings.rope);
  ResultsWriter writer(options.out_dir, collect_meta(scenario, options.argv, threads, isolate), cells.size());

  std::vector<std::string> label_keys = {"model", "impl", "objective", "seq_len"};
  for (const auto& key : scenario.varying_keys())
    if (std::find(label_keys.begin(), label_keys.end(), key) == label_keys.end()) label_keys.push_back(key);

  RunSummary summary;
  summary.results_path = writer.path().string();
  const auto start = Clock::now();
  const bool search = scenario.settings.measure.max_seq_len.has_value();
  if (search) label_keys.erase(std::find(label_keys.begin(), label_keys.end(), "seq_len"));
  for (size_t i = 0; i < cells.size(); ++i) {
    CellJob job;
    job.cell = cells[i];
    job.settings = scenario.settings;
    job.settings.threads = threads;
    job.timeline_dir = writer.path().parent_path().string();
    job.timeline_name = fmt::format("timelines/cell-{:03d}", i);
    if (options.progress)
      *options.progress << fmt::format("[{}/{}] {} ... ", i + 1, cells.size(), cells[i].label(label_keys))
                        << std::flush;
    auto on_probe = [&](const Probe& p) {
      if (!options.progress) return;
      *options.progress << fmt::format(
                               "\n    probe T={}: {}{} | elapsed {}", p.seq_len, p.status,
                               p.peak_bytes ? fmt::format(" {} MiB peak", format_mib(p.peak_bytes)) : "",
                               format_seconds(seconds_since(start)))
                        << std::flush;
    };
    const bool distributed = job.settings.world_size > 1 && is_distributed(*make_strategy(job.cell.impl));
    CellResult r = search        ? search_cell_max_seq_len(job, options.self_exe, on_probe)
                   : distributed ? run_cell_distributed(job, options.self_exe)
                   : isolate     ? run_cell_isolated(job, options.self_exe)
                                 : run_cell(job);
    if (search && options.progress) *options.progress << "\n    ";
    writer.add(r);
    if (r.status == "error") ++summary.errors;
    if (options.progress) {
      const double elapsed = seconds_since(start);
      const double eta = elapsed / static_cast<double>(i + 1) * static_cast<double>(cells.size() - i - 1);
      *options.progress << fmt::format("{} | elapsed {}, ETA {}\n", outcome_summary(r),
                                       format_seconds(elapsed), format_seconds(eta))
                        << std::flush;
    }
    summary.cells.push_back(std::move(r));
  }
  writer.finish();
  if (options.table) {
    *options.table << render_table(summary.cells)
                   << "\npeak: LibTorch CPU tensors only (BLAS/oneDNN scratch not "
                   << "counted); MiB = 2^20 bytes. Results: " << summary.results_path << "\n"
                   << std::flush;
  }
  return summary;
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
