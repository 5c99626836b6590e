// cuda_recorder_cuda.cpp: cuda_recorder.h for a CUDA-enabled LibTorch (what it reports and why: there).
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "profiles/cuda_build.h"
#include "profiles/cuda_recorder.h"
#include "profiles/memory.h"
#include "profiles/phase_log.h"
#include "profiles/timeline_builder.h"

namespace bpbench::profiles {
namespace {

namespace allocator = c10::cuda::CUDACachingAllocator;
using TraceEntry = c10::CachingDeviceAllocator::TraceEntry;

constexpr c10::DeviceIndex kDevice = 0;
constexpr auto kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

class CudaRecorder final : public Recorder {
 public:
  CudaRecorder() {
    torch::empty({1}, torch::TensorOptions().device(torch::kCUDA, kDevice));  // initialises the allocator
    // Both hooks run inside the allocator with its lock held: they only touch this object's state (and the
    // OOM one the snapshot API, which PyTorch documents for exactly this use).
    allocator::attachAllocatorTraceTracker([this](const TraceEntry& e) { on_trace(e); });
    allocator::attachOutOfMemoryObserver([this](int64_t, size_t, size_t, size_t) { on_out_of_memory(); });
  }

  int64_t live_bytes() const override { return stats().allocated_bytes[kAggregate].current; }
  int64_t peak_bytes() const override { return stats().allocated_bytes[kAggregate].peak; }
  std::optional<int64_t> reserved_peak_bytes() const override {
    return stats().reserved_bytes[kAggregate].peak;
  }

  CategoryBytes peak_by_category() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_categories_;
  }

  void reset_peak() override {
    allocator::resetPeakStats(kDevice);
    std::lock_guard<std::mutex> lock(mu_);
    tracked_peak_ = tracked_live_;
    peak_categories_ = categories_;
  }

  void set_budget(std::optional<int64_t> bytes) override {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess || total == 0)
      throw std::runtime_error("cudaMemGetInfo failed: cannot set a CUDA memory budget");
    const double fraction =
        bytes ? std::clamp(static_cast<double>(*bytes) / static_cast<double>(total), 0.0, 1.0) : 1.0;
    allocator::setMemoryFraction(fraction, kDevice);
  }

  void start_timeline(double min_interval_ms) override {
    // The allocator's own history of allocs and frees (no stacks: cheap), so the memory_viz snapshot written
    // after the step has its "Active Memory Timeline". write_snapshot() turns it off again.
    torch::cuda::_record_memory_history(/*enabled=*/true, /*record_context=*/false,
                                        /*trace_alloc_max_entries=*/1 << 20);
    const auto origin = TraceClock::now();
    start_phase_log(origin);
    std::lock_guard<std::mutex> lock(mu_);
    timeline_.start(min_interval_ms, categories_, origin);
    timeline_active_ = true;
  }

  Timeline stop_timeline() override {
    Timeline out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      timeline_active_ = false;
      out = timeline_.take();
    }
    out.phases = stop_phase_log();
    return out;
  }

  void release_cached() override { allocator::emptyCache(); }

  void set_oom_snapshot_path(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    oom_snapshot_path_ = path;
  }

  bool write_snapshot(const std::string& path) override {
    const bool written = write_pickle(path);
    bool active = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      active = timeline_active_;
    }
    if (!active) torch::cuda::_record_memory_history(/*enabled=*/false);
    return written;
  }

 private:
  struct Block {
    int64_t bytes;
    Category category;
  };

  static c10::CachingDeviceAllocator::DeviceStats stats() { return allocator::getDeviceStats(kDevice); }

  static bool write_pickle(const std::string& path) {
    const std::string pickle = torch::cuda::_memory_snapshot_pickled();
    std::ofstream out(path, std::ios::binary);
    out.write(pickle.data(), static_cast<std::streamsize>(pickle.size()));
    return static_cast<bool>(out);
  }

  // ALLOC and FREE_REQUESTED are where the allocator moves its allocated_bytes statistic, so the tracked live
  // bytes follow the statistic block for block (blocks allocated before this recorder existed excepted).
  void on_trace(const TraceEntry& e) {
    if (e.device_ != kDevice) return;
    if (e.action_ != TraceEntry::ALLOC && e.action_ != TraceEntry::FREE_REQUESTED) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (e.action_ == TraceEntry::ALLOC) {
      const Block block{static_cast<int64_t>(e.size_), current_category()};
      blocks_[e.addr_] = block;
      categories_[static_cast<int>(block.category)] += block.bytes;
      tracked_live_ += block.bytes;
      if (tracked_live_ > tracked_peak_) {
        tracked_peak_ = tracked_live_;
        peak_categories_ = categories_;
      }
    } else {
      auto it = blocks_.find(e.addr_);
      if (it == blocks_.end()) return;
      categories_[static_cast<int>(it->second.category)] -= it->second.bytes;
      tracked_live_ -= it->second.bytes;
      blocks_.erase(it);
    }
    if (timeline_active_) timeline_.add(categories_);
  }

  void on_out_of_memory() {
    std::string path;
    {
      std::lock_guard<std::mutex> lock(mu_);
      path = oom_snapshot_path_;
    }
    if (!path.empty()) write_pickle(path);
  }

  mutable std::mutex mu_;
  std::unordered_map<size_t, Block> blocks_;
  CategoryBytes categories_{}, peak_categories_{};
  int64_t tracked_live_ = 0, tracked_peak_ = 0;
  std::string oom_snapshot_path_;
  bool timeline_active_ = false;
  TimelineBuilder timeline_;
};

}  // namespace

Recorder& cuda_recorder() {
  if (cuda_device_count() == 0) throw std::runtime_error(no_gpu_reason() + ": no CUDA memory recorder");
  static CudaRecorder* recorder = new CudaRecorder();  // leaked: the allocator keeps the hooks for good
  return *recorder;
}

}  // namespace bpbench::profiles
