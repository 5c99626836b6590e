// bench_allocator.cpp: what the tracking allocator (profiles/memory.h) adds to each allocation + free.
//
// The tracker cannot be switched off once installed: it is c10's CPU allocator for the rest of the process
// and keeps counting even when nobody reads it. So the baseline is the allocator it wraps, captured by main()
// before the tracker was installed (bench::raw_cpu_allocator()): the same c10 DefaultCPUAllocator, with the
// same alignment, that every tracked allocation ends up calling. The difference between two variants is then
// exactly the tracker's own work (atomic counters, peak update, the sharded pointer table and its map node):
//
//   BM_Allocator<raw>       c10::Allocator::allocate + free of the wrapped allocator: no tracking at all
//   BM_Allocator<tracked>   the same through the tracker, as every tensor goes during a bpbench run
//   BM_Allocator<timeline>  the tracker while a timeline records (a lock and a timeline point per event;
//                           1 ms coalescing, so the point list stays short)
//   BM_EmptyTensor<...>     torch::empty + free, untracked vs tracked: the overhead next to what a whole
//   tensor
//                           costs. For the untracked variant the wrapped allocator is put back as c10's CPU
//                           allocator (same priority) for the duration of the benchmark, then the tracker.
//
// Single-threaded: intra-op threads would add contention on the counters' cache lines, not measured here.
#include <c10/core/CPUAllocator.h>

#include <optional>

#include "tests/benchmarks/bench_common.h"

namespace bpbench::bench::bench_allocator {
namespace {

enum class Mode { raw, tracked, timeline };

void BM_Allocator(benchmark::State& state, Mode mode) {
  const auto bytes = static_cast<size_t>(state.range(0));
  auto& rec = profiles::MemoryRecorder::instance();
  c10::Allocator* alloc = mode == Mode::raw ? raw_cpu_allocator() : c10::GetCPUAllocator();
  if (alloc == nullptr) {
    state.SkipWithError("the tracker was installed before main(): no untracked allocator to compare with");
    return;
  }
  if (mode == Mode::timeline) rec.start_timeline(/*min_interval_ms=*/1.0);
  PeakCounter peak;
  for (auto _ : state) {
    c10::DataPtr p = alloc->allocate(bytes);  // freed at the end of the iteration
    benchmark::DoNotOptimize(p.get());
  }
  peak.report(state);  // the tracked variants see `bytes`; the raw one sees 0
  if (mode == Mode::timeline) {
    state.counters["timeline_points"] = static_cast<double>(rec.stop_timeline().points.size());
  }
  state.SetItemsProcessed(state.iterations());  // items_per_second: allocate + free pairs per second
}

// Puts `alloc` in as c10's CPU allocator while it lives, then restores the one that was there. Priority 100
// is the tracker's, and c10 lets an equal priority replace an allocator, so both swaps take effect.
class CpuAllocatorSwap {
 public:
  explicit CpuAllocatorSwap(c10::Allocator* alloc) : previous_(c10::GetCPUAllocator()) {
    c10::SetCPUAllocator(alloc, /*priority=*/100);
  }
  ~CpuAllocatorSwap() { c10::SetCPUAllocator(previous_, /*priority=*/100); }
  CpuAllocatorSwap(const CpuAllocatorSwap&) = delete;
  CpuAllocatorSwap& operator=(const CpuAllocatorSwap&) = delete;

 private:
  c10::Allocator* previous_;
};

void BM_EmptyTensor(benchmark::State& state, bool tracked) {
  const int64_t bytes = state.range(0);
  std::optional<CpuAllocatorSwap> swap;
  if (!tracked) {
    if (raw_cpu_allocator() == nullptr) {
      state.SkipWithError("the tracker was installed before main(): no untracked allocator to compare with");
      return;
    }
    swap.emplace(raw_cpu_allocator());
    if (c10::GetCPUAllocator() != raw_cpu_allocator()) {
      state.SkipWithError("could not put the untracked allocator back in place");
      return;
    }
  }
  PeakCounter peak;
  for (auto _ : state) {
    auto t = torch::empty({bytes}, torch::TensorOptions().dtype(torch::kUInt8));
    benchmark::DoNotOptimize(t.data_ptr());
  }
  peak.report(state);
  state.SetItemsProcessed(state.iterations());
}

// 256 B (a norm weight), 64 KiB (a chunk's small activations), 4 MiB (a (T, d) float32 activation, T = 4096).
void sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("bytes")->Arg(256)->Arg(64 << 10)->Arg(4 << 20);
}

BENCHMARK_CAPTURE(BM_Allocator, raw, Mode::raw)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Allocator, tracked, Mode::tracked)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Allocator, timeline, Mode::timeline)->Apply(sizes);
BENCHMARK_CAPTURE(BM_EmptyTensor, untracked, false)->Apply(sizes);
BENCHMARK_CAPTURE(BM_EmptyTensor, tracked, true)->Apply(sizes);

}  // namespace
}  // namespace bpbench::bench::bench_allocator
