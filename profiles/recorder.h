// recorder.h: what the runner asks of a memory recorder, whatever the device: live and peak bytes by
// category, a byte budget that turns an allocation past it into c10::OutOfMemoryError, and a timeline.
//
// The runner reaches a recorder only through recorder_for(device). Adding one (a CUDA allocator recorder) is
// one file implementing Recorder plus one row in recorder.cpp's table. Strategies never see a recorder: they
// only mark what they allocate with MemoryScope and PhaseScope (memory.h), which every recorder reads.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bpbench::profiles {

enum class Category : uint8_t { params, grads, checkpoints, activations, kv, logits, comm, other };
inline constexpr int kCategoryCount = 8;
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

struct Timeline {
  std::vector<TimelinePoint> points;
  std::vector<PhaseMark> phases;
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
};

// The recorder of a scenario's device ("cpu", "cuda"). Throws std::invalid_argument naming the devices that
// have one. Today both are the CPU tracking allocator: a CUDA cell's figures count its CPU tensors only,
// until a CUDA recorder takes its row.
Recorder& recorder_for(const std::string& device);

}  // namespace bpbench::profiles
