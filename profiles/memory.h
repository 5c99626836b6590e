// memory.h: the CPU memory recorder: a tracking allocator installed over LibTorch's CPU allocator.
//
// It sees every CPU tensor LibTorch allocates (not BLAS scratch buffers, which bypass c10's allocator;
// oneDNN, whose scratch would be seen and depends on the host's ISA, is turned off when it is installed).
// Live bytes, peak bytes and per-category bytes are exact and deterministic for a given program; the recorder
// is thread-safe (intra-op worker threads allocate too) and cheap enough to leave on: atomics on the hot
// path, a lock only while a timeline is being recorded.
//
// Categories are set by an RAII MemoryScope around the code that allocates; phases (forward, head, layer i
// backward, chunk j) by an RAII PhaseScope (phase_log.h, included here for the strategies). Both also open an
// NVTX range, so the same scopes show on a GPU timeline. A byte budget turns an allocation that would exceed
// it into c10::OutOfMemoryError, the type CUDA's allocator throws, so the runner handles CPU and GPU
// out-of-memory the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "profiles/phase_log.h"
#include "profiles/recorder.h"

namespace bpbench::profiles {

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

// The category MemoryScope has set (process-wide): what any recorder charges an allocation made now to.
Category current_category();

// The CPU device's Recorder (recorder.h), with what only a tracking allocator can tell.
class MemoryRecorder final : public Recorder {
 public:
  // The process-wide recorder; installs the tracking allocator over c10's CPU allocator on first call.
  static MemoryRecorder& instance();

  int64_t live_bytes() const override;
  int64_t peak_bytes() const override;
  CategoryBytes peak_by_category() const override;
  void reset_peak() override;
  void set_budget(std::optional<int64_t> bytes) override;
  void start_timeline(double min_interval_ms = 0.0) override;
  Timeline stop_timeline() override;
  void record_cpp_stacks(bool on) override;

  CategoryBytes live_by_category() const;
  int64_t allocation_count() const;  // allocations since the last reset_peak()
  std::optional<int64_t> budget() const;
  bool timeline_active() const;
};

}  // namespace bpbench::profiles
