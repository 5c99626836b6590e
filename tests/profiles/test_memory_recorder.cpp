// test_memory_recorder.cpp: exact checks of the CPU tracking allocator (live/peak/category accounting,
// budget, thread safety, timeline and phases). CPU tracking is deterministic, so every byte count is asserted
// exactly.
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "profiles/cuda_build.h"
#include "profiles/heap_policy.h"
#include "profiles/host_memory.h"
#include "profiles/memory.h"
#include "profiles/step_timer.h"

namespace bpbench::profiles::test_memory_recorder {
namespace {

int64_t sum(const CategoryBytes& b) {
  return std::accumulate(b.begin(), b.end(), int64_t{0});
}
int64_t cat(const CategoryBytes& b, Category c) {
  return b[static_cast<int>(c)];
}

// Allocates exactly `n` bytes of storage through c10's CPU allocator.
torch::Tensor bytes(int64_t n) {
  return torch::empty({n}, torch::kUInt8);
}

class MemoryRecorderTest : public ::testing::Test {
 protected:
  void SetUp() override { clean(); }
  // A failing test must not leave a budget or timeline behind to break the next one.
  void TearDown() override { clean(); }
  static void clean() {
    rec().set_budget(std::nullopt);
    if (rec().timeline_active()) rec().stop_timeline();
  }
  static MemoryRecorder& rec() { return MemoryRecorder::instance(); }
};

TEST_F(MemoryRecorderTest, CategoryNames) {
  const std::vector<std::string> expected = {"params", "grads",  "optimizer", "checkpoints", "activations",
                                             "kv",     "logits", "comm",      "other"};
  for (int i = 0; i < kCategoryCount; ++i) EXPECT_EQ(category_name(static_cast<Category>(i)), expected[i]);
}

TEST_F(MemoryRecorderTest, InstalledOverC10CpuAllocator) {
  const int64_t live0 = rec().live_bytes();
  c10::Allocator* a = c10::GetCPUAllocator();
  // The raw API (bfloat16 matmuls use it) works and is tracked like any other allocation.
  ASSERT_NE(a->raw_deleter(), nullptr);
  void* raw = a->raw_allocate(64);
  EXPECT_EQ(rec().live_bytes() - live0, 64);
  a->raw_deallocate(raw);
  EXPECT_EQ(rec().live_bytes(), live0);
  {
    c10::DataPtr p = a->allocate(123);
    ASSERT_NE(p.get(), nullptr);
    EXPECT_EQ(rec().live_bytes() - live0, 123);
  }
  EXPECT_EQ(rec().live_bytes(), live0);
}

TEST_F(MemoryRecorderTest, EmptyFloatTensorIsExactly4000Bytes) {
  rec().reset_peak();
  const int64_t live0 = rec().live_bytes();
  const int64_t other0 = cat(rec().live_by_category(), Category::other);
  {
    auto t = torch::empty({1000}, torch::kFloat);
    ASSERT_EQ(t.nbytes(), 4000u);
    EXPECT_EQ(rec().live_bytes() - live0, 4000);
    EXPECT_EQ(cat(rec().live_by_category(), Category::other) - other0, 4000);  // default category
    EXPECT_EQ(rec().allocation_count(), 1);
  }
  EXPECT_EQ(rec().live_bytes(), live0);
  EXPECT_EQ(cat(rec().live_by_category(), Category::other), other0);
  EXPECT_EQ(rec().peak_bytes(), live0 + 4000);
}

// oneDNN's bf16/fp16 matmuls take ISA-dependent scratch from c10's allocator; the recorder turns oneDNN off
// so that a CPU peak is the same on every machine (memory.cpp). A reduced-precision GEMM, with either operand
// transposed as autograd's backward calls it, then allocates exactly its result.
TEST_F(MemoryRecorderTest, ReducedPrecisionMatmulAllocatesOnlyItsResult) {
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    auto x = torch::ones({64, 96}, dtype);
    auto w = torch::ones({128, 96}, dtype);
    auto g = torch::ones({64, 128}, dtype);
    rec().reset_peak();
    const int64_t live0 = rec().live_bytes();
    {
      auto y = torch::matmul(x, w.t());   // (64, 128): 16384 bytes
      auto dx = torch::matmul(g, w);      // (64, 96): 12288 bytes
      auto dw = torch::matmul(g.t(), x);  // (128, 96): 24576 bytes
      EXPECT_EQ(rec().live_bytes() - live0, 16384 + 12288 + 24576) << dtype;
    }
    EXPECT_EQ(rec().peak_bytes() - live0, 16384 + 12288 + 24576) << dtype;
  }
}

TEST_F(MemoryRecorderTest, ZeroByteAllocations) {
  rec().reset_peak();
  const int64_t live0 = rec().live_bytes();
  {
    c10::DataPtr p = c10::GetCPUAllocator()->allocate(0);
    auto t = torch::empty({0}, torch::kFloat);
    EXPECT_EQ(t.numel(), 0);
    EXPECT_EQ(rec().live_bytes(), live0);
    EXPECT_EQ(rec().allocation_count(), 2);
    // Growing a zero-size tensor goes through the same allocator and is charged.
    t.resize_({10});
    EXPECT_EQ(rec().live_bytes() - live0, 40);
  }
  EXPECT_EQ(rec().live_bytes(), live0);
}

TEST_F(MemoryRecorderTest, PeakIsExactMaximumOfSequence) {
  rec().reset_peak();
  const int64_t live0 = rec().live_bytes();
  EXPECT_EQ(rec().peak_bytes(), live0);
  {
    auto a = bytes(4000);   // +4000
    auto b = bytes(8000);   // +12000
    a.reset();              // +8000
    auto c = bytes(12000);  // +20000: the maximum
    b.reset();              // +12000
    auto d = bytes(7000);   // +19000
  }
  EXPECT_EQ(rec().live_bytes(), live0);
  EXPECT_EQ(rec().peak_bytes(), live0 + 20000);
  EXPECT_EQ(rec().allocation_count(), 4);
  rec().reset_peak();
  EXPECT_EQ(rec().peak_bytes(), live0);
  EXPECT_EQ(rec().allocation_count(), 0);
}

TEST_F(MemoryRecorderTest, NestedScopesAttributeAndRestore) {
  const CategoryBytes c0 = rec().live_by_category();
  torch::Tensor p1, a1, p2, o1;
  {
    MemoryScope params(Category::params);
    p1 = bytes(100);
    {
      MemoryScope acts(Category::activations);
      a1 = bytes(200);
    }
    p2 = bytes(300);  // back to params after the inner scope
  }
  o1 = bytes(400);  // back to the default after the outer scope
  CategoryBytes c1 = rec().live_by_category();
  EXPECT_EQ(cat(c1, Category::params) - cat(c0, Category::params), 400);
  EXPECT_EQ(cat(c1, Category::activations) - cat(c0, Category::activations), 200);
  EXPECT_EQ(cat(c1, Category::other) - cat(c0, Category::other), 400);
  EXPECT_EQ(cat(c1, Category::grads) - cat(c0, Category::grads), 0);

  // A free is charged to the category of the allocation, not to whatever scope is open when it happens.
  {
    MemoryScope grads(Category::grads);
    a1.reset();
  }
  c1 = rec().live_by_category();
  EXPECT_EQ(cat(c1, Category::activations), cat(c0, Category::activations));
  EXPECT_EQ(cat(c1, Category::grads), cat(c0, Category::grads));
  p1.reset();
  p2.reset();
  o1.reset();
  EXPECT_EQ(rec().live_by_category(), c0);
}

TEST_F(MemoryRecorderTest, CategoryIsProcessGlobalNotPerThread) {
  const int64_t kv0 = cat(rec().live_by_category(), Category::kv);
  torch::Tensor t;
  {
    MemoryScope kv(Category::kv);
    // A worker thread allocates on behalf of the scope the main thread opened (as intra-op threads do).
    std::thread worker([&] { t = bytes(512); });
    worker.join();
  }
  EXPECT_EQ(cat(rec().live_by_category(), Category::kv) - kv0, 512);
  t.reset();
  EXPECT_EQ(cat(rec().live_by_category(), Category::kv), kv0);
}

TEST_F(MemoryRecorderTest, PeakByCategoryIsTheBreakdownAtThePeak) {
  rec().reset_peak();
  const CategoryBytes c0 = rec().live_by_category();
  torch::Tensor keep;
  {
    MemoryScope p(Category::params);
    keep = bytes(1000);
  }
  {
    MemoryScope a(Category::activations);
    auto x = bytes(5000);  // peak here: params +1000, activations +5000
  }
  {
    MemoryScope l(Category::logits);
    auto y = bytes(3000);  // lower than the peak: must not replace the breakdown
  }
  const CategoryBytes pk = rec().peak_by_category();
  EXPECT_EQ(sum(pk), rec().peak_bytes());
  EXPECT_EQ(cat(pk, Category::params) - cat(c0, Category::params), 1000);
  EXPECT_EQ(cat(pk, Category::activations) - cat(c0, Category::activations), 5000);
  EXPECT_EQ(cat(pk, Category::logits) - cat(c0, Category::logits), 0);
  keep.reset();
  rec().reset_peak();
  EXPECT_EQ(rec().peak_by_category(), rec().live_by_category());
  EXPECT_EQ(sum(rec().peak_by_category()), rec().peak_bytes());
}

// In a timeline the overrun is an "oom" event (memory_viz.h), as the CUDA allocator records one: the bytes
// asked for, and what the budget had left where an address would be.
TEST_F(MemoryRecorderTest, BudgetOverrunInATimelineIsAnOomEvent) {
  const int64_t live0 = rec().live_bytes();
  rec().set_budget(live0 + 1000);
  rec().start_timeline(0.0);
  EXPECT_THROW(bytes(4000), c10::OutOfMemoryError);
  const Timeline tl = rec().stop_timeline();
  rec().set_budget(std::nullopt);
  ASSERT_EQ(tl.events.size(), tl.alive_at_start + 1);
  const auto& oom = tl.events.back();
  EXPECT_EQ(oom.action, profiles::AllocatorAction::oom);
  EXPECT_EQ(oom.bytes, 4000);
  EXPECT_EQ(oom.addr, 1000u);
}

TEST_F(MemoryRecorderTest, BudgetOverrunThrowsOutOfMemoryAndChangesNothing) {
  rec().reset_peak();
  const int64_t live0 = rec().live_bytes();
  rec().set_budget(live0 + 10000);
  ASSERT_EQ(rec().budget(), live0 + 10000);
  auto a = torch::empty({1000}, torch::kFloat);  // 4000: fits
  const int64_t count = rec().allocation_count();
  const CategoryBytes cats = rec().live_by_category();
  try {
    auto b = torch::empty({2000}, torch::kFloat);  // 8000 more: 12000 > 10000
    FAIL() << "expected c10::OutOfMemoryError";
  } catch (const c10::OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("bpbench CPU budget exceeded"), std::string::npos) << e.what();
  }
  EXPECT_EQ(rec().live_bytes(), live0 + 4000);
  EXPECT_EQ(rec().live_by_category(), cats);
  EXPECT_EQ(rec().allocation_count(), count);
  EXPECT_EQ(rec().peak_bytes(), live0 + 4000);
  {
    auto c = bytes(6000);  // lands exactly on the budget: allowed
    EXPECT_EQ(rec().live_bytes(), live0 + 10000);
    EXPECT_THROW(bytes(1), c10::OutOfMemoryError);
    auto z = bytes(0);  // zero bytes never exceed anything
  }
  rec().set_budget(std::nullopt);
  EXPECT_EQ(rec().budget(), std::nullopt);
  auto big = bytes(100000);  // no budget: anything goes
  EXPECT_EQ(rec().live_bytes(), live0 + 4000 + 100000);
}

// Offloaded checkpoints on the CPU (host_memory.h): what is allocated under a HostMemoryScope is host bytes,
// never the device's live bytes, peak, categories or budget, and its free is charged back to the host.
TEST_F(MemoryRecorderTest, HostScopeChargesHostBytesNotTheDevice) {
  rec().reset_peak();
  reset_host_peak();
  const int64_t live0 = rec().live_bytes(), host0 = host_live_bytes();
  const CategoryBytes cats0 = rec().live_by_category();
  rec().set_budget(live0 + 1000);  // a device budget the host bytes would blow many times over
  {
    torch::Tensor host;
    {
      HostMemoryScope scope;
      EXPECT_TRUE(host_memory_scope_active());
      host = bytes(50000);
      { HostMemoryScope nested; }
      EXPECT_TRUE(host_memory_scope_active()) << "a nested scope restores, it does not clear";
    }
    EXPECT_FALSE(host_memory_scope_active());
    EXPECT_EQ(host_live_bytes(), host0 + 50000);
    EXPECT_EQ(host_peak_bytes(), host0 + 50000);
    EXPECT_EQ(rec().live_bytes(), live0);
    EXPECT_EQ(rec().peak_bytes(), live0);
    EXPECT_EQ(rec().live_by_category(), cats0);
    auto device = bytes(800);  // device bytes still count, against the budget
    EXPECT_EQ(rec().live_bytes(), live0 + 800);
    EXPECT_THROW(bytes(400), c10::OutOfMemoryError);
    // A copy made outside the scope from host bytes is device bytes.
    auto back = host.narrow(0, 0, 100).clone();
    EXPECT_EQ(rec().live_bytes(), live0 + 900);
  }
  rec().set_budget(std::nullopt);
  EXPECT_EQ(host_live_bytes(), host0);
  EXPECT_EQ(host_peak_bytes(), host0 + 50000);
  reset_host_peak();
  EXPECT_EQ(host_peak_bytes(), host0);
  EXPECT_EQ(rec().live_bytes(), live0);
}

TEST_F(MemoryRecorderTest, ConcurrentAllocFreeBalances) {
  rec().reset_peak();
  const int64_t live0 = rec().live_bytes();
  constexpr int kThreads = 4, kIters = 10000;
  constexpr int64_t kMaxSize = 65536;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      torch::Tensor held;  // keep one alive across iterations so frees interleave with other threads' allocs
      for (int i = 0; i < kIters; ++i) {
        const int64_t n = 1 + (static_cast<int64_t>(i) * 7919 + t * 104729) % kMaxSize;
        auto x = bytes(i == kIters / 2 ? kMaxSize : n);
        if (i % 3 == 0) held = std::move(x);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(rec().live_bytes(), live0);
  EXPECT_EQ(sum(rec().live_by_category()), live0);
  EXPECT_EQ(rec().allocation_count(), kThreads * kIters);
  EXPECT_GE(rec().peak_bytes(), live0 + kMaxSize);
}

TEST_F(MemoryRecorderTest, ConcurrentBudgetIsNeverOvershot) {
  rec().reset_peak();
  const int64_t live0 = rec().live_bytes();
  constexpr int64_t kChunk = 1000;
  rec().set_budget(live0 + 3 * kChunk);  // 4 threads each holding one chunk cannot all fit
  std::atomic<int> ooms{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        try {
          auto x = bytes(kChunk);
        } catch (const c10::OutOfMemoryError&) {
          ooms.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(rec().peak_bytes(), live0 + 3 * kChunk);
  EXPECT_EQ(rec().live_bytes(), live0);
  EXPECT_EQ(rec().allocation_count() + ooms.load(), 4 * 2000);
}

void expect_consistent(const Timeline& tl) {
  for (size_t i = 0; i < tl.points.size(); ++i) {
    EXPECT_EQ(sum(tl.points[i].by_category), tl.points[i].live) << "point " << i;
    if (i > 0) {
      EXPECT_GE(tl.points[i].t_ms, tl.points[i - 1].t_ms) << "point " << i;
    }
  }
}

TEST_F(MemoryRecorderTest, TimelinePointsAndNestedPhases) {
  const int64_t live0 = rec().live_bytes();
  rec().start_timeline();
  EXPECT_TRUE(rec().timeline_active());
  {
    PhaseScope fwd("forward");
    torch::Tensor a, b;
    {
      MemoryScope acts(Category::activations);
      a = bytes(1000);
      PhaseScope layer("layer 0");
      {
        PhaseScope chunk("chunk 0");
        b = bytes(2000);
      }
    }
    PhaseScope head("head");  // sibling of layer 0, under forward
    a.reset();
    b.reset();
  }
  Timeline tl = rec().stop_timeline();
  EXPECT_FALSE(rec().timeline_active());

  // Baseline + two allocations + two frees, nothing coalesced at min_interval 0.
  ASSERT_EQ(tl.points.size(), 5u);
  expect_consistent(tl);
  const std::vector<int64_t> expected_live = {live0, live0 + 1000, live0 + 3000, live0 + 2000, live0};
  for (size_t i = 0; i < tl.points.size(); ++i) EXPECT_EQ(tl.points[i].live, expected_live[i]) << i;
  EXPECT_EQ(cat(tl.points[2].by_category, Category::activations) -
                cat(tl.points[0].by_category, Category::activations),
            3000);

  ASSERT_EQ(tl.phases.size(), 4u);  // in begin order
  EXPECT_EQ(tl.phases[0].name, "forward");
  EXPECT_EQ(tl.phases[0].depth, 0);
  EXPECT_EQ(tl.phases[1].name, "layer 0");
  EXPECT_EQ(tl.phases[1].depth, 1);
  EXPECT_EQ(tl.phases[2].name, "chunk 0");
  EXPECT_EQ(tl.phases[2].depth, 2);
  EXPECT_EQ(tl.phases[3].name, "head");
  EXPECT_EQ(tl.phases[3].depth, 1);
  for (const auto& m : tl.phases) EXPECT_LE(m.begin_ms, m.end_ms) << m.name;
  // Children lie inside their parents; siblings do not overlap.
  EXPECT_GE(tl.phases[1].begin_ms, tl.phases[0].begin_ms);
  EXPECT_LE(tl.phases[1].end_ms, tl.phases[0].end_ms);
  EXPECT_GE(tl.phases[2].begin_ms, tl.phases[1].begin_ms);
  EXPECT_LE(tl.phases[2].end_ms, tl.phases[1].end_ms);
  EXPECT_GE(tl.phases[3].begin_ms, tl.phases[1].end_ms);
  EXPECT_LE(tl.phases[3].end_ms, tl.phases[0].end_ms);

  // The events (memory_viz.h's input): every block alive at the start as an allocation at t = 0, then the
  // step's two allocations and two frees, exact and uncoalesced; their running sum is live bytes throughout.
  // Each block alive at the stop is a segment of its own, and no stacks were asked for.
  using profiles::AllocatorAction;
  int64_t running = 0, before = 0;
  for (const auto& e : tl.events) running += e.action == AllocatorAction::alloc ? e.bytes : -e.bytes;
  for (size_t i = 0; i < tl.alive_at_start; ++i) {
    EXPECT_EQ(tl.events[i].t_ms, 0.0);
    EXPECT_EQ(tl.events[i].action, AllocatorAction::alloc);
    before += tl.events[i].bytes;
  }
  EXPECT_EQ(before, live0);
  ASSERT_EQ(tl.events.size(), tl.alive_at_start + 4);
  const auto* step = tl.events.data() + tl.alive_at_start;
  EXPECT_TRUE(step[0].action == AllocatorAction::alloc && step[0].bytes == 1000 &&
              step[0].category == Category::activations);
  EXPECT_TRUE(step[1].action == AllocatorAction::alloc && step[1].bytes == 2000);
  EXPECT_TRUE(step[2].action == AllocatorAction::free_completed && step[2].addr == step[0].addr &&
              step[2].bytes == 1000 && step[2].category == Category::activations);
  EXPECT_TRUE(step[3].action == AllocatorAction::free_completed && step[3].addr == step[1].addr &&
              step[3].bytes == 2000);
  for (const auto& e : tl.events) EXPECT_EQ(e.cpp_stack, -1);
  EXPECT_TRUE(tl.cpp_stacks.empty());
  EXPECT_EQ(running, live0);
  EXPECT_TRUE(tl.blocks_are_segments);
  int64_t at_stop = 0;
  for (const auto& s : tl.segments_at_stop) {
    ASSERT_EQ(s.blocks.size(), 1u);
    EXPECT_EQ(s.blocks[0].bytes, s.bytes);
    at_stop += s.bytes;
  }
  EXPECT_EQ(at_stop, live0);

  // stop_timeline cleared the state: a second stop returns nothing.
  Timeline again = rec().stop_timeline();
  EXPECT_TRUE(again.points.empty());
  EXPECT_TRUE(again.phases.empty());
  EXPECT_TRUE(again.events.empty());
}

TEST_F(MemoryRecorderTest, TimelineCoalescingKeepsPeakAndFinalPoint) {
  const int64_t live0 = rec().live_bytes();
  rec().start_timeline(/*min_interval_ms=*/1e9);  // everything is "close": only pinned points and the last
  {
    auto a = bytes(1000);  // running peak: kept
    auto b = bytes(5000);  // running peak: kept
    b.reset();
    auto c = bytes(2000);  // below the peak: coalesced away
    c.reset();
    a.reset();  // final state: kept
  }
  Timeline tl = rec().stop_timeline();
  expect_consistent(tl);
  ASSERT_EQ(tl.points.size(), 4u);
  EXPECT_EQ(tl.points[0].live, live0);
  EXPECT_EQ(tl.points[1].live, live0 + 1000);
  EXPECT_EQ(tl.points[2].live, live0 + 6000);
  EXPECT_EQ(tl.points[3].live, live0);
}

TEST_F(MemoryRecorderTest, PhasesOutsideATimelineAreNotRecorded) {
  {
    PhaseScope before("before");  // opened with no timeline: NVTX only
    rec().start_timeline();
    PhaseScope inside("inside");
  }
  {
    PhaseScope open("still open at stop");
    Timeline tl = rec().stop_timeline();
    ASSERT_EQ(tl.phases.size(), 2u);
    EXPECT_EQ(tl.phases[0].name, "inside");
    EXPECT_EQ(tl.phases[0].depth, 0);  // "before" is not part of this timeline
    EXPECT_EQ(tl.phases[1].name, "still open at stop");
    EXPECT_GE(tl.phases[1].end_ms, tl.phases[1].begin_ms);  // closed by stop_timeline
    rec().start_timeline();
    PhaseScope fresh("fresh");  // the enclosing phase belongs to the old timeline, so this is outermost
  }  // "still open at stop" ends here; it belongs to the old timeline and must not touch the new one
  Timeline tl = rec().stop_timeline();
  ASSERT_EQ(tl.phases.size(), 1u);
  EXPECT_EQ(tl.phases[0].name, "fresh");
  EXPECT_EQ(tl.phases[0].depth, 0);
  ASSERT_EQ(tl.points.size(), 1u);  // just the baseline
}

TEST_F(MemoryRecorderTest, ConcurrentTimelineStaysConsistent) {
  const int64_t live0 = rec().live_bytes();
  rec().start_timeline(/*min_interval_ms=*/0.01);
  {
    MemoryScope acts(Category::activations);  // opened on the main thread, seen by all workers
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([t] {
        for (int i = 0; i < 2000; ++i) {
          auto x = bytes(1 + (i * 31 + t) % 4096);
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  Timeline tl = rec().stop_timeline();
  ASSERT_FALSE(tl.points.empty());
  expect_consistent(tl);
  EXPECT_EQ(tl.points.back().live, live0);
  EXPECT_EQ(rec().live_bytes(), live0);
}

// The device tables: each device has its recorder and its step timer; an unknown device is refused with the
// valid ones named, and CUDA without a GPU says why instead of handing back the CPU's figures.
TEST(RecorderTables, RecorderAndTimerByDevice) {
  EXPECT_EQ(&recorder_for("cpu"), static_cast<Recorder*>(&MemoryRecorder::instance()));
  auto timer = step_timer_for("cpu");
  timer->start();
  EXPECT_GE(timer->stop_seconds(), 0.0);
  try {
    recorder_for("tpu");
    ADD_FAILURE() << "no error for device tpu";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("valid: cpu, cuda"), std::string::npos) << e.what();
  }
  EXPECT_THROW(step_timer_for("tpu"), std::invalid_argument);
  if (cuda_device_count() == 0) {
    EXPECT_THROW(recorder_for("cuda"), std::runtime_error);
  } else {
    EXPECT_NE(&recorder_for("cuda"), static_cast<Recorder*>(&MemoryRecorder::instance()));
    EXPECT_NO_THROW(step_timer_for("cuda"));
  }
}

// The heap policy bpbench's main sets (heap_policy.h): a 16 MiB block comes from the heap, not from mmap, and
// freeing it hands nothing back to the kernel, so the next step's tensors of that size fault no new pages.
TEST(HeapPolicy, FreedBlocksStayInTheProcess) {
  keep_freed_heap_memory();
#if defined(__GLIBC__)
  EXPECT_NE(heap_policy_note().find("32 MiB"), std::string::npos) << heap_policy_note();
  const struct mallinfo2 before = mallinfo2();
  char* volatile block = static_cast<char*>(std::malloc(16 << 20));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, 16 << 20);
  const struct mallinfo2 held = mallinfo2();
  EXPECT_EQ(held.hblkhd, before.hblkhd) << "the 16 MiB block was mmapped";
  std::free(block);
  const struct mallinfo2 after = mallinfo2();
  EXPECT_EQ(after.arena, held.arena) << "the heap was trimmed";
#else
  EXPECT_EQ(heap_policy_note(), "");
#endif
}

}  // namespace
}  // namespace bpbench::profiles::test_memory_recorder
