// memory.h: the CPU memory recorder: a tracking allocator installed over LibTorch's CPU allocator.
//
// It sees every CPU tensor LibTorch allocates (not BLAS/oneDNN scratch buffers, which bypass c10's
// allocator). Live bytes, peak bytes and per-category bytes are exact and deterministic for a given program;
// the recorder is thread-safe (intra-op worker threads allocate too) and cheap enough to leave on: atomics on
// the hot path, a lock only while a timeline is being recorded.
//
// Categories are set by an RAII MemoryScope around the code that allocates; phases (forward, head, layer i
// backward, chunk j) by an RAII PhaseScope. Both also open an NVTX range, so the same scopes show on a GPU
// timeline. A byte budget turns an allocation that would exceed it into c10::OutOfMemoryError, the type
// CUDA's allocator throws, so the runner handles CPU and GPU out-of-memory the same way.
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

// Sets the category of allocations made while it lives (by any thread), restoring the previous one on exit.
class MemoryScope {
 public:
  explicit MemoryScope(Category c);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  Category previous_;
};

// A named phase; nested phases form a stack. Recorded in the timeline (when one is being recorded).
class PhaseScope {
 public:
  explicit PhaseScope(std::string name);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;
};

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

class MemoryRecorder {
 public:
  // The process-wide recorder; installs the tracking allocator over c10's CPU allocator on first call.
  static MemoryRecorder& instance();

  int64_t live_bytes() const;
  int64_t peak_bytes() const;
  CategoryBytes live_by_category() const;
  CategoryBytes peak_by_category() const;  // the breakdown at the moment the peak was reached
  int64_t allocation_count() const;        // allocations since the last reset_peak()

  void reset_peak();  // peak := live

  // Allocations that would push live bytes above `bytes` throw c10::OutOfMemoryError. nullopt: no budget.
  void set_budget(std::optional<int64_t> bytes);
  std::optional<int64_t> budget() const;

  // Timeline of every allocation and free between start and stop, coalesced so that consecutive events closer
  // than `min_interval_ms` keep only the last, except that the point at the peak is always kept.
  void start_timeline(double min_interval_ms = 0.0);
  Timeline stop_timeline();
  bool timeline_active() const;
};

}  // namespace bpbench::profiles
