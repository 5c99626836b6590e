// memory.cpp: the tracking CPU allocator behind MemoryRecorder, and the MemoryScope RAII helper.
//
// The allocator wraps whatever c10 CPU allocator was current when it was installed; a table keyed by data
// pointer remembers each allocation's size and category, so the free is charged back to the right counter no
// matter which thread (or which later scope) releases the tensor.
#include "profiles/memory.h"

#include <ATen/Context.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "profiles/cpp_stacks.h"
#include "profiles/host_memory.h"
#include "profiles/nvtx.h"
#include "profiles/phase_log.h"
#include "profiles/timeline_builder.h"

namespace bpbench::profiles {

const char* category_name(Category c) {
  switch (c) {
    case Category::params:
      return "params";
    case Category::grads:
      return "grads";
    case Category::optimizer:
      return "optimizer";
    case Category::checkpoints:
      return "checkpoints";
    case Category::activations:
      return "activations";
    case Category::kv:
      return "kv";
    case Category::logits:
      return "logits";
    case Category::comm:
      return "comm";
    case Category::other:
      return "other";
  }
  return "other";
}

namespace {

// Process-global on purpose: intra-op worker threads allocate on behalf of the scope the main thread opened.
std::atomic<Category> g_category{Category::other};

// All recorder state. Heap-allocated and never freed, so tensors released during static destruction (or by
// threads still running at exit) can still charge their frees to valid counters.
struct State {
  std::atomic<int64_t> live{0};
  std::array<std::atomic<int64_t>, kCategoryCount> by_category{};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> count{0};
  std::atomic<int64_t> budget{-1};  // < 0: no budget

  // Only taken when a new peak is reached (rare after warm-up) or on reset, so the hot path stays lock-free.
  std::mutex peak_mu;
  int64_t snapshot_peak = 0;
  CategoryBytes peak_snapshot{};

  // While a timeline records, counter updates and point appends happen together under tl_mu so that points
  // are in event order and each one is an exact state of the counters.
  std::atomic<bool> timeline_active{false};
  std::mutex tl_mu;
  TimelineBuilder timeline;
  std::vector<AllocationEvent> events;  // the timeline's allocations and frees, uncoalesced (recorder.h)
  size_t alive_at_start = 0;
  std::atomic<bool> record_cpp_stacks{false};  // for the timelines started from now
  std::atomic<bool> timeline_stacks{false};    // this timeline's allocations unwind their stacks
  CppStacks stacks;

  CategoryBytes load_categories() const {
    CategoryBytes out{};
    for (int i = 0; i < kCategoryCount; ++i) out[i] = by_category[i].load(std::memory_order_relaxed);
    return out;
  }

  [[noreturn]] static void throw_budget(int64_t bytes, int64_t live, int64_t limit, Category c) {
    C10_THROW_ERROR(
        OutOfMemoryError,
        fmt::format("bpbench CPU budget exceeded: tried to allocate {} bytes ({}) with {} live of a "
                    "{}-byte budget",
                    bytes, category_name(c), live, limit));
  }

  // Charges `bytes` to the counters, refusing (without any change) if that would exceed the budget. A CAS
  // loop rather than fetch_add so concurrent allocations cannot jointly overshoot the budget. Returns the new
  // live.
  int64_t reserve(int64_t bytes, Category c) {
    int64_t now;
    const int64_t limit = budget.load(std::memory_order_relaxed);
    if (limit >= 0 && bytes > 0) {
      int64_t cur = live.load(std::memory_order_relaxed);
      do {
        if (cur + bytes > limit) throw_budget(bytes, cur, limit, c);
      } while (!live.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed));
      now = cur + bytes;
    } else {
      now = live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    }
    by_category[static_cast<int>(c)].fetch_add(bytes, std::memory_order_relaxed);
    return now;
  }

  void unreserve(int64_t bytes, Category c) {
    by_category[static_cast<int>(c)].fetch_sub(bytes, std::memory_order_relaxed);
    live.fetch_sub(bytes, std::memory_order_relaxed);
  }

  // Called after the underlying allocation succeeded, so a failed allocation never raises the peak or the
  // count.
  void commit(int64_t now_live) {
    count.fetch_add(1, std::memory_order_relaxed);
    int64_t p = peak.load(std::memory_order_relaxed);
    while (now_live > p) {
      if (peak.compare_exchange_weak(p, now_live, std::memory_order_relaxed)) {
        std::lock_guard<std::mutex> lk(peak_mu);
        // Under concurrency a lower peak's snapshot may arrive late; never let it overwrite a higher one.
        if (now_live >= snapshot_peak) {
          snapshot_peak = now_live;
          peak_snapshot = load_categories();
        }
        break;
      }
    }
  }

  // The counters' state as a timeline point (timeline_builder.h has the coalescing rule).
  void append_point_locked() { timeline.add(load_categories()); }

  void on_free(void* ptr, int64_t bytes, Category c) {
    if (timeline_active.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lk(tl_mu);
      unreserve(bytes, c);
      if (timeline_active.load(std::memory_order_relaxed)) {
        append_point_locked();
        events.push_back(
            {timeline.now_ms(), reinterpret_cast<uintptr_t>(ptr), bytes, AllocatorAction::free_completed, c});
      }
      return;
    }
    unreserve(bytes, c);
  }
};

State& state() {
  static State* s = new State();
  return *s;
}

// What the allocator remembers about each live allocation, keyed by its data pointer. The key must be the
// data pointer itself (DataPtr context == data): c10's raw_allocate path (used e.g. by bfloat16 matmuls)
// asserts it.
struct TrackedAllocation {
  c10::DataPtr inner;  // owns the real allocation; destroying it frees through the original allocator
  int64_t bytes;
  Category category;
  bool host;  // allocated under a HostMemoryScope: host bytes (host_memory.h), not the device's
};

// Sharded by pointer so concurrent intra-op threads rarely contend on one lock.
struct AllocationTable {
  static constexpr size_t kShards = 64;
  struct Shard {
    std::mutex mu;
    std::unordered_map<void*, TrackedAllocation> live;
  };
  std::array<Shard, kShards> shards;
  Shard& shard_of(void* p) { return shards[(reinterpret_cast<uintptr_t>(p) >> 6) % kShards]; }
};

AllocationTable& allocation_table() {
  static AllocationTable* t =
      new AllocationTable();  // never freed: frees can happen during static destruction
  return *t;
}

void delete_tracked(void* ptr) {
  if (ptr == nullptr) return;  // zero-byte allocations hold no memory and are not in the table
  auto& shard = allocation_table().shard_of(ptr);
  std::unique_lock<std::mutex> lk(shard.mu);
  auto node = shard.live.extract(ptr);
  lk.unlock();
  if (node.empty()) return;
  const int64_t bytes = node.mapped().bytes;
  const Category c = node.mapped().category;
  const bool host = node.mapped().host;
  node.mapped().inner.clear();  // the real free
  if (host) {
    release_host_bytes(bytes);
    return;
  }
  // Decrement after the memory is really gone so live bytes never under-report.
  state().on_free(ptr, bytes, c);
}

class TrackingAllocator final : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    if (host_memory_scope_active()) return allocate_host(n);
    State& s = state();
    const Category c = g_category.load(std::memory_order_relaxed);
    const auto bytes = static_cast<int64_t>(n);
    std::unique_lock<std::mutex> lk;
    std::shared_ptr<c10::GatheredContext> stack;
    if (s.timeline_active.load(std::memory_order_acquire)) {
      if (s.timeline_stacks.load(std::memory_order_relaxed)) stack = CppStacks::gather();  // before the lock
      lk = std::unique_lock<std::mutex>(s.tl_mu);
    }
    int64_t now_live = 0;
    try {
      now_live = s.reserve(bytes, c);  // throws OutOfMemoryError on a budget overrun
    } catch (const c10::OutOfMemoryError&) {
      // The timeline's "oom" event, as the CUDA allocator's: what was asked, where, and what the budget had
      // left.
      if (lk.owns_lock() && s.timeline_active.load(std::memory_order_relaxed))
        s.events.push_back({s.timeline.now_ms(),
                            static_cast<uint64_t>(std::max<int64_t>(0, s.budget.load() - s.live.load())),
                            bytes, AllocatorAction::oom, c, /*stream=*/0, s.stacks.add(std::move(stack))});
      throw;
    }
    void* data = nullptr;
    c10::Device device = c10::Device(c10::DeviceType::CPU);
    try {
      c10::DataPtr inner = base_->allocate(n);
      data = inner.get();
      device = inner.device();
      if (data != nullptr) {  // n == 0 allocates nothing: counted, but there is nothing to track
        auto& shard = allocation_table().shard_of(data);
        std::lock_guard<std::mutex> table_lock(shard.mu);
        shard.live.emplace(data, TrackedAllocation{std::move(inner), bytes, c, false});
      }
    } catch (...) {
      s.unreserve(bytes, c);
      throw;
    }
    s.commit(now_live);
    if (lk.owns_lock() && s.timeline_active.load(std::memory_order_relaxed)) {
      s.append_point_locked();
      if (data != nullptr)
        s.events.push_back({s.timeline.now_ms(), reinterpret_cast<uintptr_t>(data), bytes,
                            AllocatorAction::alloc, c, /*stream=*/0, s.stacks.add(std::move(stack))});
    }
    return c10::DataPtr(data, data, &delete_tracked, device);
  }

  // Context == data pointer, so raw_allocate / raw_deallocate work through the same table.
  c10::DeleterFnPtr raw_deleter() const override { return &delete_tracked; }

  // Plain host memory: clone() copies bytes as c10's own CPU allocator does.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  // Host bytes: no device counter, no budget, no timeline point; only the host ledger.
  c10::DataPtr allocate_host(size_t n) {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    const auto bytes = static_cast<int64_t>(n);
    if (data != nullptr) {
      auto& shard = allocation_table().shard_of(data);
      std::lock_guard<std::mutex> table_lock(shard.mu);
      shard.live.emplace(data, TrackedAllocation{std::move(inner), bytes, Category::other, true});
    }
    charge_host_bytes(bytes);
    return c10::DataPtr(data, data, &delete_tracked, device);
  }

  c10::Allocator* base_;
};

}  // namespace

MemoryRecorder& MemoryRecorder::instance() {
  static MemoryRecorder* recorder = [] {
    state();
    // Leaked: c10 keeps the raw pointer for the rest of the process. Priority 100 beats the default (0) and
    // any ordinary registration, and wrapping the current allocator keeps its behaviour (alignment,
    // profiling).
    auto* alloc = new TrackingAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(alloc, /*priority=*/100);
    // oneDNN off: its reduced-precision (bf16/fp16) matmuls take scratch and weight reorders from c10's CPU
    // allocator, sized by the host's ISA (AVX2, AVX-512, AVX-512-BF16, AMX all differ: up to 12% of a tiny
    // cell's peak). CPU peaks are the CI memory gate's input and must not depend on the machine; ATen's
    // own bf16 GEMM allocates nothing through c10. float32 and float64 go to BLAS either way.
    at::globalContext().setUserEnabledMkldnn(false);
    return new MemoryRecorder();
  }();
  return *recorder;
}

int64_t MemoryRecorder::live_bytes() const {
  return state().live.load(std::memory_order_relaxed);
}
int64_t MemoryRecorder::peak_bytes() const {
  return state().peak.load(std::memory_order_relaxed);
}
CategoryBytes MemoryRecorder::live_by_category() const {
  return state().load_categories();
}

CategoryBytes MemoryRecorder::peak_by_category() const {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.peak_mu);
  return s.peak_snapshot;
}

int64_t MemoryRecorder::allocation_count() const {
  return state().count.load(std::memory_order_relaxed);
}

void MemoryRecorder::reset_peak() {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.peak_mu);
  const int64_t live = s.live.load(std::memory_order_relaxed);
  s.peak.store(live, std::memory_order_relaxed);
  s.snapshot_peak = live;
  s.peak_snapshot = s.load_categories();
  s.count.store(0, std::memory_order_relaxed);
}

void MemoryRecorder::set_budget(std::optional<int64_t> bytes) {
  state().budget.store(bytes ? std::max<int64_t>(*bytes, 0) : -1, std::memory_order_relaxed);
}

std::optional<int64_t> MemoryRecorder::budget() const {
  const int64_t b = state().budget.load(std::memory_order_relaxed);
  if (b < 0) return std::nullopt;
  return b;
}

namespace {
// The device's blocks alive now (host bytes left out), by address, as allocations at `t_ms`. The caller holds
// the timeline lock, which allocate() takes before a shard's: the same order.
std::vector<AllocationEvent> live_blocks(double t_ms) {
  std::vector<AllocationEvent> out;
  for (auto& shard : allocation_table().shards) {
    std::lock_guard<std::mutex> lk(shard.mu);
    for (const auto& [ptr, a] : shard.live)
      if (!a.host)
        out.push_back({t_ms, reinterpret_cast<uintptr_t>(ptr), a.bytes, AllocatorAction::alloc, a.category});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.addr < b.addr; });
  return out;
}
}  // namespace

void MemoryRecorder::start_timeline(double min_interval_ms) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.tl_mu);
  const auto origin = TraceClock::now();
  start_phase_log(origin);
  // A baseline at t=0 so the first event has something to be read against; pinned like a peak point.
  s.timeline.start(min_interval_ms, s.load_categories(), origin);
  s.events = live_blocks(0.0);
  s.alive_at_start = s.events.size();
  s.timeline_stacks.store(s.record_cpp_stacks.load(std::memory_order_relaxed), std::memory_order_relaxed);
  s.timeline_active.store(true, std::memory_order_release);
}

Timeline MemoryRecorder::stop_timeline() {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.tl_mu);
  if (!s.timeline_active.load(std::memory_order_relaxed)) return {};
  s.timeline_active.store(false, std::memory_order_release);
  Timeline out = s.timeline.take();
  out.phases = stop_phase_log();
  out.events = std::exchange(s.events, {});
  out.alive_at_start = s.alive_at_start;
  out.blocks_are_segments = true;
  for (const AllocationEvent& b : live_blocks(s.timeline.now_ms()))
    out.segments_at_stop.push_back({b.addr, b.bytes, /*stream=*/0, /*large=*/true, {{b.bytes, b.bytes}}});
  out.cpp_stacks = s.stacks.take_symbolised(out.events);
  return out;
}

void MemoryRecorder::record_cpp_stacks(bool on) {
  state().record_cpp_stacks.store(on, std::memory_order_relaxed);
}

bool MemoryRecorder::timeline_active() const {
  return state().timeline_active.load(std::memory_order_acquire);
}

Category current_category() {
  return g_category.load(std::memory_order_relaxed);
}

MemoryScope::MemoryScope(Category c) {
  MemoryRecorder::instance();  // a scope is pointless unless the tracking allocator is installed
  previous_ = g_category.exchange(c, std::memory_order_relaxed);
  nvtx_push(category_name(c));
}

MemoryScope::~MemoryScope() {
  nvtx_pop();
  g_category.store(previous_, std::memory_order_relaxed);
}

}  // namespace bpbench::profiles
