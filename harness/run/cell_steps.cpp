// cell_steps.cpp: cell_steps.h.
#include "harness/run/cell_steps.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <string>

#include "harness/model/flop_count.h"
#include "profiles/chrome_trace.h"
#include "profiles/device_activity.h"
#include "profiles/host_memory.h"
#include "profiles/memory.h"
#include "profiles/memory_viz.h"

namespace bpbench {

using nlohmann::json;
using profiles::Category;
using profiles::MemoryScope;

namespace {

std::map<std::string, int64_t> category_map(const profiles::CategoryBytes& bytes) {
  std::map<std::string, int64_t> out;
  for (int i = 0; i < profiles::kCategoryCount; ++i)
    out[profiles::category_name(static_cast<Category>(i))] = bytes[static_cast<size_t>(i)];
  return out;
}

// Stops a timeline on every exit path, so an OOM inside the step cannot leave one recording.
class TimelineGuard {
 public:
  TimelineGuard(profiles::Recorder& recorder, bool on, bool cpp_stacks) : recorder_(recorder), on_(on) {
    if (!on_) return;
    recorder_.record_cpp_stacks(cpp_stacks);
    recorder_.start_timeline(0.0);
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

// The name of this process's timeline files: the job's, and for a rank of a distributed cell (each rank
// records its own) "-rank<r>" after it, so that the ranks never write one file.
std::string own_timeline_name(const CellJob& job) {
  const char* rank = std::getenv("RANK");
  if (job.settings.world_size <= 1 || !rank || job.timeline_name.empty()) return job.timeline_name;
  return fmt::format("{}-rank{}", job.timeline_name, rank);
}

// Where the allocator writes its own state when an allocation fails (CUDA: recorder.writes_snapshots()),
// DIR/NAME.memory_viz.pickle; a timeline's pickle (write_timeline) replaces it. Unset again when the cell
// ends, however it ends.
class SnapshotGuard {
 public:
  SnapshotGuard(profiles::Recorder& recorder, const CellJob& job) : recorder_(recorder) {
    if (!recorder.writes_snapshots() || job.timeline_dir.empty() || job.timeline_name.empty()) return;
    name_ = own_timeline_name(job) + ".memory_viz.pickle";
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
  const std::string name = own_timeline_name(job);
  std::error_code unmade;  // a folder that cannot be made: each file below then says why it was not written
  fs::create_directories((dir / name).parent_path(), unmade);
  const std::string label = job.cell.label({"model", "impl", "objective", "seq_len", "partition"});
  // A file that cannot be written (a full disk, a quota) is named with why; the measurement stands, and the
  // write already removed its partial temporary (write_file_atomically).
  auto written = [&](const std::string& file, const auto& write) {
    try {
      write(dir / file);
      return true;
    } catch (const std::exception& e) {
      if (mem.files_not_written.is_null()) mem.files_not_written = json::object();
      mem.files_not_written[file] = e.what();
      return false;
    }
  };
  if (written(name + ".json", [&](const fs::path& path) {
        write_json_atomically(
            path, json{{"cell", job.cell.axes()}, {"timeline", profiles::timeline_to_json(timeline)}});
      }))
    mem.timeline_file = name + ".json";
  if (written(name + ".trace.json", [&](const fs::path& path) {
        write_json_atomically(path, profiles::chrome_trace(timeline, label, device));
      }))
    mem.trace_file = name + ".trace.json";
  // The allocator's events as PyTorch's memory snapshot, with bpbench's phases as frames (memory_viz.h); it
  // replaces the allocator's own pickle of an OOM (the same file), which has no trace.
  const std::string pickle = name + ".memory_viz.pickle";
  if (!timeline.events.empty() && written(pickle, [&](const fs::path& path) {
        write_file_atomically(path, profiles::memory_viz_pickle(timeline));
      }))
    mem.snapshot_file = pickle;
}

// Every step starts from fresh gradients, and every rank starts it together (its clock included).
void begin_step(const CellStep& s) {
  prepare_grads(s.params, s.distributed);
  if (s.comm) s.comm->barrier("before step");
}

// One forward + backward from fresh gradients; its loss. Counts its FLOPs into `flops` when that is empty.
double run_step(const CellStep& s, std::optional<FlopCounts>& flops) {
  begin_step(s);
  std::optional<FlopCounter> counter;
  if (!flops) counter.emplace();
  const double loss = s.strategy.step(s.in).item<double>();
  if (counter) flops = counter->counts();  // complete: backward() returns once autograd ran every node
  return loss;
}

}  // namespace

void sync_device(const torch::Device& device) {
  if (device.is_cuda() && torch::cuda::is_available()) torch::cuda::synchronize();
}

TimeResult time_stats(std::vector<double> runs, int64_t warmup, int64_t step_tokens) {
  TimeResult t;
  t.runs_s = runs;
  t.warmup = warmup;
  std::sort(runs.begin(), runs.end());
  const size_t n = runs.size();
  t.min_s = runs.front();
  t.max_s = runs.back();
  t.median_s = n % 2 ? runs[n / 2] : 0.5 * (runs[n / 2 - 1] + runs[n / 2]);
  if (n >= 2) {
    double mean = 0;
    for (double s : runs) mean += s;
    mean /= static_cast<double>(n);
    double squares = 0;
    for (double s : runs) squares += (s - mean) * (s - mean);
    t.stddev_s = std::sqrt(squares / static_cast<double>(n - 1));
    if (mean > 0) t.cv = *t.stddev_s / mean;
  }
  if (step_tokens > 0 && t.median_s > 0) t.tokens_per_s = static_cast<double>(step_tokens) / t.median_s;
  return t;
}

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

MeasuredRegion::MeasuredRegion(profiles::Recorder& recorder, std::optional<int64_t> budget_bytes,
                               bool offloads, MemoryResult& mem)
    : recorder_(recorder), offloads_(offloads), budgeted_(budget_bytes.has_value()), mem_(mem) {
  recorder_.release_cached();
  recorder_.reset_peak();
  profiles::reset_host_peak();
  profiles::reset_host_transfers();
  mem_.base_bytes = recorder_.live_bytes();
  if (budgeted_) recorder_.set_budget(budget_bytes);
}

MeasuredRegion::~MeasuredRegion() {
  if (budgeted_) recorder_.set_budget(std::nullopt);
}

void MeasuredRegion::end() {
  mem_.peak_bytes = recorder_.peak_bytes();
  mem_.peak_by_category = category_map(recorder_.peak_by_category());
  mem_.reserved_peak_bytes = recorder_.reserved_peak_bytes();
  mem_.alloc_retries = recorder_.alloc_retries();
  if (offloads_) mem_.host_peak_bytes = profiles::host_peak_bytes();
  if (offloads_) mem_.host_copy_bytes = profiles::host_transfer_bytes();
}

void start_clock(const torch::Device& device, profiles::StepTimer& timer) {
  sync_device(device);
  timer.start();
}

double warm_up(const CellStep& s, int64_t runs, std::optional<FlopCounts>& flops) {
  double loss = std::numeric_limits<double>::quiet_NaN();
  for (int64_t i = 0; i < runs; ++i) loss = run_step(s, flops);
  return loss;
}

double memory_step(const CellStep& s, const CellJob& job, profiles::Recorder& rec, bool offloads,
                   std::optional<FlopCounts>& flops, MemoryResult& mem, CellResult& r) {
  const MeasureSpec& m = job.settings.measure;
  const bool trace_device = m.timeline && m.device_activity && s.device.is_cuda();
  begin_step(s);
  std::optional<FlopCounter> counter;
  if (!flops) counter.emplace();
  MeasuredRegion region(rec, m.budget_bytes, offloads, mem);
  SnapshotGuard snapshot(rec, job);
  TimelineGuard timeline(rec, m.timeline, m.cpp_stacks);
  DeviceActivityGuard device_activity(trace_device);
  const auto write_step_timeline = [&] {
    const profiles::Timeline tl = timeline.stop();
    write_timeline(job, tl, mem, device_activity.stop(tl, mem));
  };
  torch::Tensor loss;
  try {
    loss = s.strategy.step(s.in);
  } catch (...) {
    // Where the step stood when it ran out: its base and the highest point it reached within the budget.
    region.end();
    snapshot.after_oom(mem);
    if (m.timeline) write_step_timeline();
    if (m.memory) r.memory = mem;
    throw;
  }
  region.end();
  if (m.timeline) write_step_timeline();
  if (counter) flops = counter->counts();
  return loss.item<double>();
}

double timed_steps(const CellStep& s, int64_t repeat, std::vector<double>& seconds) {
  double loss = std::numeric_limits<double>::quiet_NaN();
  for (int64_t i = 0; i < repeat; ++i) {
    begin_step(s);
    start_clock(s.device, s.timer);
    const torch::Tensor loss_t = s.strategy.step(s.in);
    seconds.push_back(s.timer.stop_seconds());
    loss = loss_t.item<double>();
  }
  return loss;
}

}  // namespace bpbench
