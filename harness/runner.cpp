// runner.cpp: one cell in this process or in a child, and the loop over a scenario's grid.
#include "harness/runner.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <fmt/format.h>
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
#include <sstream>
#include <thread>

#include "harness/compat.h"
#include "harness/grad_error.h"
#include "harness/objective.h"
#include "impls/strategy.h"
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
  if (device.is_cuda() && compat::cuda_available()) torch::cuda::synchronize();
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

void zero_grads(const std::vector<NamedParameter>& params) {
  torch::NoGradGuard no_grad;
  for (const auto& p : params) {
    auto& g = p.tensor.mutable_grad();
    if (g.defined()) {
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

// Steps 2-6 of a cell; fills `r`. Everything it builds is freed when it returns or throws.
void measure_cell(const CellJob& job, const Strategy& strategy, CellResult& r) {
  const Cell& c = job.cell;
  const MeasureSpec& m = job.settings.measure;
  const torch::Device device(job.settings.device == "cuda" ? torch::kCUDA : torch::kCPU);
  auto& rec = MemoryRecorder::instance();

  Model model = [&] {
    MemoryScope scope(Category::params);
    Model built = load_model(c.model, torch::TensorOptions().dtype(parse_dtype(c.dtype)).device(device),
                             job.settings.seed);
    if (c.lora_rank > 0) built.add_lora(c.lora_rank, c.lora_alpha, job.settings.seed);
    return built;
  }();

  // The batch is built before measurement: DPO and GRPO run a no-grad reference pass here.
  auto objective = make_objective(c.objective);
  BatchSpec spec;
  spec.examples = c.batch;
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
    batch = objective->make_batch(spec, model, c.logits_partition);
  }

  // Gradients exist before the step, as in a training loop that zeroes rather than frees them: they are base.
  const auto params = model.trainable_parameters();
  {
    MemoryScope scope(Category::grads);
    torch::NoGradGuard no_grad;
    for (const auto& p : params) p.tensor.mutable_grad() = torch::zeros_like(p.tensor);
  }

  const bool timed = m.time.enabled;
  const int64_t warmup = timed ? m.time.warmup : 0, repeat = timed ? m.time.repeat : 1;
  const StepInputs in{model, batch, *objective, Partitioning{c.partition, c.logits_partition}};
  std::vector<double> seconds;
  MemoryResult mem;
  double loss = std::numeric_limits<double>::quiet_NaN();
  for (int64_t run = 0; run < warmup + repeat; ++run) {
    zero_grads(params);
    const bool first_measured = run == warmup;
    torch::Tensor loss_t;
    double dt = 0;
    if (first_measured) {
      rec.reset_peak();
      mem.base_bytes = rec.live_bytes();
      BudgetGuard budget(m.budget_bytes);
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
        if (m.memory) r.memory = mem;
        throw;
      }
      mem.peak_bytes = rec.peak_bytes();
      mem.peak_by_category = category_map(rec.peak_by_category());
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
  if (m.memory) r.memory = mem;
  if (timed) r.time = time_stats(seconds, warmup);
  if (!m.grad_error_reference.empty()) r.grad_error = reference_error(job, model, batch, *objective, loss);
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

}  // namespace

// ---- public
// -------------------------------------------------------------------------------------------------

Model load_model(const std::string& name, const torch::TensorOptions& options, uint64_t seed) {
  ModelConfig config = find_model_preset(name);
  config.validate();
  return Model::random(config, options, seed);
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
          {"measure", settings.measure.to_json()}};
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
  return job;
}

CellResult run_cell(const CellJob& job) {
  MemoryRecorder::instance();
  CellResult r;
  r.cell = job.cell;
  r.threads = job.settings.threads;
  const auto t0 = Clock::now();
  try {
    auto strategy = make_strategy(job.cell.impl);
    r.uses_partition = strategy->uses_partition();
    r.uses_logits_partition = strategy->uses_logits_partition();
    if (auto why = strategy->unsupported(CellTraits{job.cell.objective, 1})) {
      r.status = "skipped";
      r.reason = *why;
    } else {
      if (job.settings.threads > 0) torch::set_num_threads(static_cast<int>(job.settings.threads));
      measure_cell(job, *strategy, r);
    }
  } catch (const compat::OutOfMemoryError& e) {
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
  CellResult failed;
  failed.cell = job.cell;
  failed.threads = job.settings.threads;
  failed.status = "error";
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

RunSummary run_scenario(const Scenario& scenario, const RunOptions& options) {
  MemoryRecorder::instance();  // installed before the first tensor, so every tensor of every cell is seen
  const int64_t threads =
      options.threads.value_or(scenario.settings.threads > 0 ? scenario.settings.threads : default_threads());
  if (threads < 1) input_error(fmt::format("threads: {} is out of range", threads), "integers >= 1");
  const bool isolate = options.isolate.value_or(scenario.isolate);
  const auto cells = scenario.expand();
  ResultsWriter writer(options.out_dir, collect_meta(scenario, options.argv, threads, isolate), cells.size());

  std::vector<std::string> label_keys = {"model", "impl", "objective", "seq_len"};
  for (const auto& key : scenario.varying_keys())
    if (std::find(label_keys.begin(), label_keys.end(), key) == label_keys.end()) label_keys.push_back(key);

  RunSummary summary;
  summary.results_path = writer.path().string();
  const auto start = Clock::now();
  for (size_t i = 0; i < cells.size(); ++i) {
    CellJob job{cells[i], scenario.settings};
    job.settings.threads = threads;
    if (options.progress)
      *options.progress << fmt::format("[{}/{}] {} ... ", i + 1, cells.size(), cells[i].label(label_keys))
                        << std::flush;
    CellResult r = isolate ? run_cell_isolated(job, options.self_exe) : run_cell(job);
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
  const CellResult r = run_cell(CellJob::from_json(j));
  std::cout << r.to_json().dump(-1, ' ', false, json::error_handler_t::replace) << "\n" << std::flush;
  return 0;
}

}  // namespace bpbench
