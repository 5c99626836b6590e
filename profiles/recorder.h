// recorder.h: what the runner asks of a memory recorder, whatever the device: live and peak bytes by
// category, a byte budget that turns an allocation past it into c10::OutOfMemoryError, and a timeline.
//
// The runner reaches a recorder only through recorder_for(device). Adding one (a CUDA allocator recorder) is
// one file implementing Recorder plus one row in recorder.cpp's table. Strategies never see a recorder: they
// only mark what they allocate with MemoryScope (memory.h) and their phases with PhaseScope (phase_log.h),
// which every recorder reads.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bpbench::profiles {

// optimizer: a training run's optimizer state and float32 master weights (harness/run/train_loop.h).
enum class Category : uint8_t { params, grads, optimizer, checkpoints, activations, kv, logits, comm, other };
inline constexpr int kCategoryCount = 9;
const char* category_name(Category c);
using CategoryBytes = std::array<int64_t, kCategoryCount>;

struct TimelinePoint {
  double t_ms = 0;   // since start_timeline()
  int64_t live = 0;  // live bytes after this event == sum of by_category
  CategoryBytes by_category{};
};

struct PhaseMark {
  std::string name;
  double begin_ms = 0, end_ms = 0;
  int depth = 0;  // 0 = outermost
};

// The clock of timelines, phases and device activity.
using TraceClock = std::chrono::steady_clock;

// One allocation or free the CPU recorder saw while its timeline ran (memory_viz.h writes them as PyTorch's
// memory snapshot).
struct AllocationEvent {
  double t_ms = 0;
  uint64_t addr = 0;
  int64_t bytes = 0;
  bool alloc = true;  // false: a free
  Category category = Category::other;
};

struct Timeline {
  std::vector<TimelinePoint> points;
  std::vector<PhaseMark> phases;
  TraceClock::time_point origin{};  // t = 0 of points and phases
  // The CPU recorder only (empty on CUDA, whose allocator keeps its own history): every block alive at the
  // start as an allocation at t = 0, then every allocation and free in order, uncoalesced; and the blocks
  // alive at the stop. Host bytes (host_memory.h) are not the device's and are left out.
  std::vector<AllocationEvent> events;
  std::vector<AllocationEvent> live_at_stop;
};

class Recorder {
 public:
  virtual ~Recorder() = default;

  virtual int64_t live_bytes() const = 0;
  virtual int64_t peak_bytes() const = 0;
  virtual CategoryBytes peak_by_category() const = 0;  // the breakdown at the moment the peak was reached
  virtual void reset_peak() = 0;                       // peak := live

  // Allocations that would push live bytes above `bytes` throw c10::OutOfMemoryError. nullopt: no budget.
  virtual void set_budget(std::optional<int64_t> bytes) = 0;

  // Every allocation and free between start and stop, coalesced so that consecutive events closer than
  // `min_interval_ms` keep only the last, except that the point at the peak is always kept.
  virtual void start_timeline(double min_interval_ms) = 0;
  virtual Timeline stop_timeline() = 0;

  // What only a device allocator with a cache has (the CPU recorder: nothing, no-op, false).
  // True where freed blocks stay reserved in a cache: a step that follows release_cached() pays for
  // reserving its memory again, so the runner does not time it.
  virtual bool caches_blocks() const { return false; }
  // The peak of memory reserved from the device (allocated plus the cache's slack) since reset_peak().
  virtual std::optional<int64_t> reserved_peak_bytes() const { return std::nullopt; }
  // How often, since reset_peak(), the allocator failed to reserve memory, freed its cache and tried again
  // (torch.cuda.memory_stats()["num_alloc_retries"]): a step near the budget that runs slow shows it here.
  virtual std::optional<int64_t> alloc_retries() const { return std::nullopt; }
  // Returns cached blocks to the device. The runner calls it as each cell starts (so reserved bytes do not
  // depend on the cells before) and before the measured step (so a budget, which a caching allocator checks
  // only when it reserves a new segment, sees every byte the step needs).
  virtual void release_cached() {}
  // True where the recorder writes the allocator's state as the pickle that https://pytorch.org/memory_viz
  // opens: where set_oom_snapshot_path() says when an allocation fails ("": nowhere), and by write_snapshot()
  // now. While a timeline records, the allocator keeps the history that the pickle's "Active Memory Timeline"
  // shows; stop_timeline() ends it on every path, so no later cell's pickle holds this one's history.
  virtual bool writes_snapshots() const { return false; }
  virtual void set_oom_snapshot_path(const std::string& /*path*/) {}
  virtual bool write_snapshot(const std::string& /*path*/) { return false; }
};

// The recorder of a scenario's device ("cpu": the tracking CPU allocator, memory.h; "cuda": c10's CUDA
// caching allocator of the current device, cuda_recorder.h, so a rank asks for it after selecting its GPU).
// Throws std::invalid_argument naming the devices that have one, and std::runtime_error for "cuda" where no
// GPU is usable.
Recorder& recorder_for(const std::string& device);

// While it lives, recorder_for(device) returns `recorder` instead: the seam through which the tests check the
// order of the runner's calls (a recorder that logs them around the CPU one), with no GPU.
class RecorderOverride {
 public:
  RecorderOverride(std::string device, Recorder& recorder);
  ~RecorderOverride();
  RecorderOverride(const RecorderOverride&) = delete;
  RecorderOverride& operator=(const RecorderOverride&) = delete;

 private:
  std::string device_;
};

}  // namespace bpbench::profiles
