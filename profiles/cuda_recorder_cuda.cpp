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
#include <unordered_map>
#include <utility>
#include <vector>

#include "profiles/block_ledger.h"
#include "profiles/cpp_stacks.h"
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
    ledger_.on_charge = [this](size_t addr, int64_t bytes) { on_block_settled(addr, bytes); };
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
    // C++ stacks come from the allocator's history, recorded for allocations only (RecordContext::ALLOC):
    // its own ring of entries is not read (bpbench's trace hook keeps the events), so it holds one.
    timeline_stacks_ = record_cpp_stacks_;
    if (timeline_stacks_)
      torch::cuda::_record_memory_history(/*enabled=*/true, /*record_context=*/true,
                                          /*trace_alloc_max_entries=*/1, /*trace_alloc_record_context=*/true,
                                          /*record_cpp_context=*/true);
    const auto origin = TraceClock::now();
    start_phase_log(origin);
    const std::vector<MemorySegment> segments = own_segments();  // the allocator's lock, before ours
    const int64_t allocated = live_bytes();
    std::lock_guard<std::mutex> lock(mu_);
    ledger_.settle(allocated);
    timeline_.start(min_interval_ms, ledger_.categories(), origin);
    origin_ = origin;
    events_.clear();
    blocks_.clear();
    pending_alloc_event_.reset();
    // The blocks alive at the start, as allocations at t = 0 (as the CPU recorder's), in their block sizes.
    for (const MemorySegment& segment : segments) {
      uint64_t addr = segment.addr;
      for (const SegmentBlock& block : segment.blocks) {
        if (block.state == SegmentBlock::State::allocated) {  // what allocated_bytes counts
          const Category category = ledger_.category_of(addr).value_or(Category::other);
          events_.push_back({0.0, addr, block.bytes, AllocatorAction::alloc, category, segment.stream});
          blocks_[addr] = {block.bytes, category};
        }
        addr += static_cast<uint64_t>(block.bytes);
      }
    }
    alive_at_start_ = events_.size();
    timeline_active_ = true;
  }

  Timeline stop_timeline() override {
    // History off on every path (the step's end, an OOM, an exception), so no later cell records stacks.
    if (timeline_stacks_) torch::cuda::_record_memory_history(/*enabled=*/false);
    std::vector<MemorySegment> segments = own_segments();
    const int64_t allocated = live_bytes();
    Timeline out;
    CppStacks stacks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ledger_.settle(allocated);  // the last allocation's block size, into its event too
      timeline_active_ = false;
      out = timeline_.take();
      out.events = std::exchange(events_, {});
      out.alive_at_start = alive_at_start_;
      stacks = std::exchange(stacks_, {});
      blocks_.clear();
      pending_alloc_event_.reset();
    }
    out.phases = stop_phase_log();
    out.segments_at_stop = std::move(segments);
    out.cpp_stacks = stacks.take_symbolised(out.events);  // slow: outside the allocator's hooks
    return out;
  }

  void record_cpp_stacks(bool on) override { record_cpp_stacks_ = on; }

  void release_cached() override { allocator::emptyCache(); }

  bool writes_snapshots() const override { return true; }

  void set_oom_snapshot_path(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    oom_snapshot_path_ = path;
  }

 private:
  c10::CachingDeviceAllocator::DeviceStats stats() const { return allocator::getDeviceStats(device_); }

  static bool write_pickle(const std::string& path) {
    const std::string pickle = torch::cuda::_memory_snapshot_pickled();
    std::ofstream out(path, std::ios::binary);
    out.write(pickle.data(), static_cast<std::streamsize>(pickle.size()));
    return static_cast<bool>(out);
  }

  // This device's segments as the allocator holds them now (its lock: never called under ours).
  std::vector<MemorySegment> own_segments() const {
    std::vector<MemorySegment> out;
    for (const auto& s : allocator::snapshot({0, 0}, /*include_traces=*/false).segments) {
      if (s.device != device_) continue;
      MemorySegment m{s.address,
                      static_cast<int64_t>(s.total_size),
                      reinterpret_cast<uintptr_t>(s.stream),
                      s.is_large,
                      {}};
      for (const auto& b : s.blocks) {
        const auto state =
            b.allocated ? SegmentBlock::State::allocated
                        : (b.active ? SegmentBlock::State::pending_free : SegmentBlock::State::inactive);
        m.blocks.push_back({static_cast<int64_t>(b.size), static_cast<int64_t>(b.requested_size), state});
      }
      out.push_back(std::move(m));
    }
    return out;
  }

  // ALLOC and FREE_REQUESTED are where the allocator moves its allocated_bytes statistic; the ledger turns
  // them into block sizes by category (blocks allocated before this recorder existed excepted). While a
  // timeline runs every action is also an event, in block sizes (the trace names the request; the block's
  // size is settled later, on_block_settled).
  void on_trace(const TraceEntry& e) {
    if (e.device_ != device_ || e.action_ == TraceEntry::SNAPSHOT) return;
    const bool moves_statistic = e.action_ == TraceEntry::ALLOC || e.action_ == TraceEntry::FREE_REQUESTED;
    const int64_t allocated = moves_statistic ? live_bytes() : 0;  // the allocator's lock is ours (recursive)
    std::lock_guard<std::mutex> lock(mu_);
    if (e.action_ == TraceEntry::ALLOC) {
      const Category category = current_category();
      ledger_.on_alloc(e.addr_, static_cast<int64_t>(e.size_), category, allocated);
      if (timeline_active_) {
        blocks_[e.addr_] = {BlockLedger::rounded(static_cast<int64_t>(e.size_)), category};
        pending_alloc_event_ = events_.size();
        record(e, AllocatorAction::alloc, blocks_[e.addr_]);
      }
      return;
    }
    if (e.action_ == TraceEntry::FREE_REQUESTED)
      ledger_.on_free(e.addr_, allocated);  // settles a pending block
    if (!timeline_active_) return;
    switch (e.action_) {
      // A block the timeline does not hold was freed before it started (its free completes now): not an
      // event of this step, which never counted it.
      case TraceEntry::FREE_REQUESTED:
        if (auto it = blocks_.find(e.addr_); it != blocks_.end())
          record(e, AllocatorAction::free_requested, it->second);
        return;
      case TraceEntry::FREE_COMPLETED:
        if (auto it = blocks_.find(e.addr_); it != blocks_.end()) {
          record(e, AllocatorAction::free_completed, it->second);
          blocks_.erase(it);
        }
        return;
      case TraceEntry::SEGMENT_ALLOC:
        return record(e, AllocatorAction::segment_alloc, {static_cast<int64_t>(e.size_), current_category()});
      case TraceEntry::SEGMENT_FREE:
        return record(e, AllocatorAction::segment_free, {static_cast<int64_t>(e.size_), Category::other});
      case TraceEntry::SEGMENT_MAP:
        return record(e, AllocatorAction::segment_map, {static_cast<int64_t>(e.size_), current_category()});
      case TraceEntry::SEGMENT_UNMAP:
        return record(e, AllocatorAction::segment_unmap, {static_cast<int64_t>(e.size_), Category::other});
      case TraceEntry::OOM:
        return record(e, AllocatorAction::oom, {static_cast<int64_t>(e.size_), current_category()});
      default:
        return;
    }
  }

  struct LiveBlock {
    int64_t bytes;
    Category category;
  };

  void record(const TraceEntry& e, AllocatorAction action, LiveBlock block) {
    const double t_ms = std::chrono::duration<double, std::milli>(TraceClock::now() - origin_).count();
    const int32_t stack = timeline_stacks_ && e.context_ ? stacks_.add(e.context_) : -1;
    events_.push_back(
        {t_ms, e.addr_, block.bytes, action, block.category, reinterpret_cast<uintptr_t>(e.stream_), stack});
  }

  // The ledger settled the block at `addr` (under our lock): the pending allocation event gets its size.
  void on_block_settled(size_t addr, int64_t bytes) {
    if (!timeline_active_) return;
    if (auto it = blocks_.find(addr); it != blocks_.end()) it->second.bytes = bytes;
    if (pending_alloc_event_ && events_[*pending_alloc_event_].addr == addr) {
      events_[*pending_alloc_event_].bytes = bytes;
      pending_alloc_event_.reset();
    }
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
  // The timeline's allocator events, the blocks they allocated (size and category, for their frees) and
  // the allocation whose block size the ledger has not settled yet.
  TraceClock::time_point origin_{};
  std::vector<AllocationEvent> events_;
  size_t alive_at_start_ = 0;
  std::unordered_map<size_t, LiveBlock> blocks_;
  std::optional<size_t> pending_alloc_event_;
  bool record_cpp_stacks_ = false, timeline_stacks_ = false;
  CppStacks stacks_;
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
