// test_device_memory_viz.cpp: the CUDA recorder's timeline events, from which the memory_viz pickle is
// written (profiles/memory_viz.h), on a GPU (skipped with a one-line reason elsewhere): the blocks alive at
// the start, then the caching allocator's every action in block sizes, so their running sum (alloc minus
// free_completed) is allocated_bytes throughout and its maximum the recorder's peak; segments at the stop
// that hold the live blocks; C++ stacks through this test's body when asked for.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "profiles/cuda_build.h"
#include "profiles/memory.h"
#include "profiles/memory_viz.h"
#include "profiles/phase_log.h"
#include "profiles/recorder.h"

namespace bpbench::testing::test_device_memory_viz {
namespace {

#define REQUIRE_GPU() \
  if (profiles::cuda_device_count() == 0) GTEST_SKIP() << profiles::no_gpu_reason() << ": GPU test skipped"

using profiles::AllocatorAction;

TEST(CudaMemoryViz, EventsInBlockSizesSumToTheAllocatorsBytesWithSegmentsAndStacks) {
  REQUIRE_GPU();
  constexpr int64_t kMiB = 1 << 20;
  const auto bytes = torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA);
  profiles::Recorder& rec = profiles::recorder_for("cuda");
  rec.release_cached();
  const auto kept = torch::empty({3 * kMiB}, bytes);  // alive before the timeline
  rec.reset_peak();
  const int64_t live_at_start = rec.live_bytes();
  rec.record_cpp_stacks(true);
  rec.start_timeline(0.0);
  {
    profiles::PhaseScope phase("layer 0 backward");
    const auto large = torch::empty({2 * kMiB + 1}, bytes);  // a 512-byte multiple above the request
    const auto small = torch::empty({1000}, bytes);          // the small pool's 512-byte blocks
    EXPECT_EQ(rec.live_bytes() - live_at_start, 2 * kMiB + 512 + 1024);
  }
  const profiles::Timeline tl = rec.stop_timeline();
  rec.record_cpp_stacks(false);

  int64_t at_start = 0;
  for (size_t i = 0; i < tl.alive_at_start; ++i) at_start += tl.events[i].bytes;
  EXPECT_EQ(at_start, live_at_start);
  int64_t live = 0, peak = 0;
  std::vector<int64_t> step_allocs;
  int segment_allocs = 0, with_stack = 0;
  for (size_t i = 0; i < tl.events.size(); ++i) {
    const auto& e = tl.events[i];
    if (e.action == AllocatorAction::alloc) live += e.bytes;
    if (e.action == AllocatorAction::free_completed) live -= e.bytes;
    peak = std::max(peak, live);
    if (i < tl.alive_at_start) continue;
    if (e.action == AllocatorAction::alloc) step_allocs.push_back(e.bytes);
    if (e.action == AllocatorAction::segment_alloc) ++segment_allocs;
    if (e.action != AllocatorAction::alloc || e.cpp_stack < 0) continue;
    const auto& stack = tl.cpp_stacks.at(static_cast<size_t>(e.cpp_stack));
    with_stack += std::any_of(stack.begin(), stack.end(), [](const profiles::CodeFrame& f) {
      return f.function.find("EventsInBlockSizesSumToTheAllocatorsBytes") != std::string::npos;
    });
  }
  EXPECT_EQ(step_allocs, (std::vector<int64_t>{2 * kMiB + 512, 1024}));
  EXPECT_EQ(segment_allocs, 2);  // the cache was emptied: a large and a small segment
  EXPECT_EQ(with_stack, 2);
  EXPECT_EQ(live, rec.live_bytes());
  EXPECT_EQ(peak, rec.peak_bytes());

  int64_t allocated_at_stop = 0;
  for (const auto& s : tl.segments_at_stop)
    for (const auto& b : s.blocks)
      if (b.state == profiles::SegmentBlock::State::allocated) allocated_at_stop += b.bytes;
  EXPECT_EQ(allocated_at_stop, rec.live_bytes());
  EXPECT_FALSE(profiles::memory_viz_pickle(tl).empty());
}

}  // namespace
}  // namespace bpbench::testing::test_device_memory_viz
