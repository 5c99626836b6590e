// cuda_recorder_cuda.cpp: cuda_recorder.h for a CUDA-enabled LibTorch (what it reports and why: there).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>

#include "profiles/block_ledger.h"
#include "profiles/cuda_build.h"
#include "profiles/cuda_recorder.h"
#include "profiles/memory.h"
#include "profiles/phase_log.h"
#include "profiles/timeline_builder.h"

namespace bpbench::profiles {
namespace {

namespace allocator = c10::cuda::CUDACachingAllocator;
using TraceEntry = c10::CachingDeviceAllocator::TraceEntry;

constexpr auto kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

class CudaRecorder final : public Recorder {
 public:
  explicit CudaRecorder(c10::DeviceIndex device) : device_(device) {
    torch::empty({1}, torch::TensorOptions().device(torch::kCUDA, device_));  // initialises the allocator
    ledger_.on_change = [this](const CategoryBytes& categories) {
      if (timeline_active_) timeline_.add(categories);
    };
    // Both hooks run inside the allocator with its (recursive) lock held: they only touch this object's
    // state and read the device's statistics (the OOM one also the snapshot API, which PyTorch documents for
    // exactly this use). Readers below take the allocator's lock (stats()) before ours, never inside it.
    allocator::attachAllocatorTraceTracker([this](const TraceEntry& e) { on_trace(e); });
    allocator::attachOutOfMemoryObserver(
        [this](int64_t device, size_t, size_t, size_t) { on_out_of_memory(device); });
  }

  int64_t live_bytes() const override { return stats().allocated_bytes[kAggregate].current; }
  int64_t peak_bytes() const override { return stats().allocated_bytes[kAggregate].peak; }
  bool caches_blocks() const override { return true; }
  std::optional<int64_t> reserved_peak_bytes() const override {
    return stats().reserved_bytes[kAggregate].peak;
  }

  std::optional<int64_t> alloc_retries() const override { return stats().num_alloc_retries; }

  CategoryBytes peak_by_category() const override {
    const int64_t allocated = live_bytes();
    std::lock_guard<std::mutex> lock(mu_);
    ledger_.settle(allocated);
    return ledger_.peak_categories();
  }

  void reset_peak() override {
    allocator::resetPeakStats(device_);
    allocator::resetAccumulatedStats(device_);  // num_alloc_retries counts from here
    const int64_t allocated = live_bytes();
    std::lock_guard<std::mutex> lock(mu_);
    ledger_.settle(allocated);
    ledger_.reset_peak();
  }

  void set_budget(std::optional<int64_t> bytes) override {
    c10::cuda::CUDAGuard guard(device_);
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess || total == 0)
      throw std::runtime_error("cudaMemGetInfo failed: cannot set a CUDA memory budget");
    const double fraction =
        bytes ? std::clamp(static_cast<double>(*bytes) / static_cast<double>(total), 0.0, 1.0) : 1.0;
    allocator::setMemoryFraction(fraction, device_);
  }

  void start_timeline(double min_interval_ms) override {
    // The allocator's own history of allocs and frees (no stacks: cheap), so the memory_viz snapshot written
    // during the timeline has its "Active Memory Timeline". stop_timeline() ends it.
    torch::cuda::_record_memory_history(/*enabled=*/true, /*record_context=*/false,
                                        /*trace_alloc_max_entries=*/1 << 20);
    const auto origin = TraceClock::now();
    start_phase_log(origin);
    const int64_t allocated = live_bytes();
    std::lock_guard<std::mutex> lock(mu_);
    ledger_.settle(allocated);
    timeline_.start(min_interval_ms, ledger_.categories(), origin);
    timeline_active_ = true;
  }

  Timeline stop_timeline() override {
    // Off on every path (the step's end, an OOM, an exception), so the next cell's pickle starts empty.
    torch::cuda::_record_memory_history(/*enabled=*/false);
    const int64_t allocated = live_bytes();
    Timeline out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ledger_.settle(allocated);
      timeline_active_ = false;
      out = timeline_.take();
    }
    out.phases = stop_phase_log();
    return out;
  }

  void release_cached() override { allocator::emptyCache(); }

  bool writes_snapshots() const override { return true; }

  void set_oom_snapshot_path(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    oom_snapshot_path_ = path;
  }

  bool write_snapshot(const std::string& path) override { return write_pickle(path); }

 private:
  c10::CachingDeviceAllocator::DeviceStats stats() const { return allocator::getDeviceStats(device_); }

  static bool write_pickle(const std::string& path) {
    const std::string pickle = torch::cuda::_memory_snapshot_pickled();
    std::ofstream out(path, std::ios::binary);
    out.write(pickle.data(), static_cast<std::streamsize>(pickle.size()));
    return static_cast<bool>(out);
  }

  // ALLOC and FREE_REQUESTED are where the allocator moves its allocated_bytes statistic; the ledger turns
  // them into block sizes by category (blocks allocated before this recorder existed excepted).
  void on_trace(const TraceEntry& e) {
    if (e.device_ != device_) return;
    if (e.action_ != TraceEntry::ALLOC && e.action_ != TraceEntry::FREE_REQUESTED) return;
    const int64_t allocated = live_bytes();  // the allocator's lock is ours already (recursive)
    std::lock_guard<std::mutex> lock(mu_);
    if (e.action_ == TraceEntry::ALLOC)
      ledger_.on_alloc(e.addr_, static_cast<int64_t>(e.size_), current_category(), allocated);
    else
      ledger_.on_free(e.addr_, allocated);
  }

  void on_out_of_memory(int64_t device) {
    if (device != device_) return;
    std::string path;
    {
      std::lock_guard<std::mutex> lock(mu_);
      path = oom_snapshot_path_;
    }
    if (!path.empty()) write_pickle(path);
  }

  const c10::DeviceIndex device_;
  mutable std::mutex mu_;
  mutable BlockLedger ledger_;  // settling a pending block is bookkeeping, not a change of state
  std::string oom_snapshot_path_;
  bool timeline_active_ = false;
  TimelineBuilder timeline_;
};

}  // namespace

Recorder& cuda_recorder() {
  if (cuda_device_count() == 0) throw std::runtime_error(no_gpu_reason() + ": no CUDA memory recorder");
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, CudaRecorder*> recorders;  // leaked: the allocator keeps the hooks
  const c10::DeviceIndex device = c10::cuda::current_device();
  std::lock_guard<std::mutex> lock(mutex);
  CudaRecorder*& r = recorders[device];
  if (!r) r = new CudaRecorder(device);
  return *r;
}

}  // namespace bpbench::profiles
