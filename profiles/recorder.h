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

// What an allocator did, in the words of PyTorch's memory snapshot ("alloc", "free_requested", ...).
// oom: the allocator failed to find memory (the event's addr is then the device's free bytes).
enum class AllocatorAction : uint8_t {
  alloc,
  free_requested,
  free_completed,
  segment_alloc,
  segment_free,
  segment_map,
  segment_unmap,
  oom
};
const char* allocator_action_name(AllocatorAction a);

// One allocator action a recorder saw while its timeline ran (memory_viz.h writes them as PyTorch's memory
// snapshot).
struct AllocationEvent {
  double t_ms = 0;
  uint64_t addr = 0;
  int64_t bytes = 0;
  AllocatorAction action = AllocatorAction::alloc;
  Category category = Category::other;  // the allocation's, its free's too (not pickled: memory_viz.h)
  uint64_t stream = 0;
  int32_t cpp_stack = -1;  // index into Timeline::cpp_stacks; -1: none recorded
};

// A block of a segment (consecutive from the segment's address), as the allocator held it at the stop.
struct SegmentBlock {
  enum class State : uint8_t { allocated, pending_free, inactive };
  int64_t bytes = 0, requested_bytes = 0;
  State state = State::allocated;
};

struct MemorySegment {
  uint64_t addr = 0;
  int64_t bytes = 0;
  uint64_t stream = 0;
  bool large = true;
  std::vector<SegmentBlock> blocks;
};

// A symbolised C++ frame (where the allocation history records stacks: Recorder::record_cpp_stacks).
struct CodeFrame {
  std::string function, file;
  int64_t line = 0;
};

struct Timeline {
  std::vector<TimelinePoint> points;
  std::vector<PhaseMark> phases;
  TraceClock::time_point origin{};  // t = 0 of points and phases
  int64_t origin_unix_us = 0;       // that moment on the wall clock (the memory_viz pickle's time_us)
  // The allocator's actions, in order: every block alive at the start as an "alloc" at t = 0, then what
  // happened, uncoalesced; and its segments at the stop. The CPU allocator caches nothing: it records
  // "alloc" and "free_completed" only, and each block is its own segment (blocks_are_segments: memory_viz.h
  // adds the segment actions). CUDA records its caching allocator's every action. Host bytes (host_memory.h)
  // are not the device's and are left out.
  std::vector<AllocationEvent> events;
  size_t alive_at_start = 0;  // how many of the events are the blocks alive at the start
  std::vector<MemorySegment> segments_at_stop;
  bool blocks_are_segments = false;
  std::vector<std::vector<CodeFrame>> cpp_stacks;  // innermost frame first
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
  // Whether the next timelines' allocations carry their C++ stacks (Timeline::cpp_stacks): each allocation
  // then unwinds its stack, which slows the step, and stop_timeline() symbolises them.
  virtual void record_cpp_stacks(bool on) = 0;

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
  // True where the recorder writes the allocator's own state as the pickle that
  // https://pytorch.org/memory_viz opens, where set_oom_snapshot_path() says ("": nowhere), when an
  // allocation fails. (A timeline's pickle, with bpbench's phases, is written from Timeline::events for every
  // device: memory_viz.h.)
  virtual bool writes_snapshots() const { return false; }
  virtual void set_oom_snapshot_path(const std::string& /*path*/) {}
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
