// test_memory_viz.cpp: profiles/memory_viz.h on a timeline shaped as the CUDA recorder makes one (the caching
// allocator's every action, blocks inside segments, an OOM, a C++ stack), which no CPU run produces: the
// pickle loads in PyTorch's own viewer code (tests/memory_viz/snapshot_as_json.py) and says, field by
// field, what the timeline held. The CPU's shape is checked on real runs by the ctest memory_viz.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "profiles/memory_viz.h"
#include "profiles/recorder.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_memory_viz {
namespace {

using nlohmann::json;
using profiles::AllocatorAction;
using profiles::Category;
using State = profiles::SegmentBlock::State;

constexpr uint64_t kSmallSegment = 0x1000, kLargeSegment = 0x200000, kMiB = 1 << 20;
constexpr int64_t kOrigin = 1'764'000'000'000'000;  // the timeline's start, Unix microseconds

// Two segments: a small one whose first block was alive before the step, and a large one the step reserved,
// allocated 1 MiB of and freed, then 512 bytes after it inside "layer 0 backward" with a C++ stack; then an
// allocation failed.
profiles::Timeline cuda_shaped_timeline() {
  profiles::Timeline tl;
  tl.phases = {{"forward_backward", 0.0, 10.0, 0}, {"layer 0 backward", 2.0, 8.0, 1}};
  tl.events = {
      {0.0, kSmallSegment, 1024, AllocatorAction::alloc, Category::params, /*stream=*/7},
      {1.0, kLargeSegment, 2 * kMiB, AllocatorAction::segment_alloc, Category::activations},
      {1.0, kLargeSegment, kMiB, AllocatorAction::alloc, Category::activations},
      {3.0, kLargeSegment + kMiB, 512, AllocatorAction::alloc, Category::kv, 0, /*cpp_stack=*/0},
      {4.0, kLargeSegment, kMiB, AllocatorAction::free_requested, Category::activations},
      {5.5, kLargeSegment, kMiB, AllocatorAction::free_completed, Category::activations},
      {6.0, /*device free bytes=*/12345, int64_t{1} << 30, AllocatorAction::oom, Category::activations},
  };
  tl.alive_at_start = 1;
  tl.origin_unix_us = kOrigin;
  tl.segments_at_stop = {
      {kSmallSegment, 2048, 7, /*large=*/false, {{1024, 1000, State::allocated}, {1024, 0, State::inactive}}},
      {kLargeSegment,
       2 * kMiB,
       0,
       /*large=*/true,
       {{kMiB, 0, State::inactive}, {512, 500, State::allocated}, {kMiB - 512, 0, State::inactive}}},
  };
  tl.cpp_stacks = {{{"bpbench::Strategy::step(bpbench::StepInputs const&) const", "impls/registry.cpp", 54},
                    {"main", "harness/cli/main.cpp", 8}}};
  return tl;
}

std::vector<std::string> names(const json& frames) {
  std::vector<std::string> out;
  for (const auto& f : frames) out.push_back(f.at("name"));
  return out;
}

TEST(MemoryViz, ACudaShapedTimelineRendersInPyTorchsViewerAndSaysWhatItHeld) {
  TempDir tmp;
  std::ofstream(tmp.file("snapshot.pickle"), std::ios::binary)
      << profiles::memory_viz_pickle(cuda_shaped_timeline());
  const std::filesystem::path reader =
      std::filesystem::path(BPBENCH_SOURCE_DIR) / "tests" / "memory_viz" / "snapshot_as_json.py";
  const std::string cmd =
      fmt::format("'{}' '{}' '{}' '{}' > '{}' 2>&1", BPBENCH_PYTHON, reader.string(),
                  tmp.file("snapshot.pickle"), tmp.file("snapshot.json"), tmp.file("log"));
  ASSERT_EQ(std::system(cmd.c_str()), 0) << file_text(tmp.file("log"));
  const json snapshot = json_file(tmp.file("snapshot.json"));

  // The trace: each event once, in order, with its action as the allocator names it (no segment actions
  // added: the CUDA allocator records its own); time in Unix microseconds; an OOM's free bytes as
  // device_free; no "category" (pytorch.org/memory_viz fails to load a trace with categories but no
  // "unknown": memory_viz.h).
  const json& trace = snapshot.at("device_traces").at(0);
  ASSERT_EQ(trace.size(), 7u);
  const std::vector<std::string> actions = {"alloc",          "segment_alloc",  "alloc", "alloc",
                                            "free_requested", "free_completed", "oom"};
  for (size_t i = 0; i < trace.size(); ++i) EXPECT_EQ(trace[i].at("action"), actions[i]) << i;
  EXPECT_EQ(trace[0].at("time_us"), kOrigin);
  EXPECT_EQ(trace[5].at("time_us"), kOrigin + 5500);
  for (const auto& entry : trace) EXPECT_FALSE(entry.contains("category")) << entry;
  EXPECT_EQ(trace[0].at("stream"), 7);
  EXPECT_EQ(trace[2].at("size"), kMiB);
  EXPECT_EQ(trace[6].at("device_free"), 12345);
  EXPECT_FALSE(trace[6].contains("addr"));
  EXPECT_EQ(trace[6].at("size"), int64_t{1} << 30);

  // Frames: the phases open at each event, innermost first, then its C++ stack.
  EXPECT_EQ(names(trace[0].at("frames")), std::vector<std::string>{"alive before the step"});
  EXPECT_EQ(names(trace[2].at("frames")), std::vector<std::string>{"forward_backward"});
  const json& with_stack = trace[3].at("frames");
  EXPECT_EQ(names(with_stack),
            (std::vector<std::string>{"layer 0 backward", "forward_backward",
                                      "bpbench::Strategy::step(bpbench::StepInputs const&) const", "main"}));
  EXPECT_EQ(with_stack[2].at("filename"), "impls/registry.cpp");
  EXPECT_EQ(with_stack[2].at("line"), 54);
  EXPECT_EQ(with_stack[0].at("filename"), "bpbench");

  // The segments at the stop, their blocks at consecutive addresses with their states, sizes summed by
  // state; a live block's frames are its allocation's, a free block has none.
  const json& segments = snapshot.at("segments");
  ASSERT_EQ(segments.size(), 2u);
  const json& small = segments[0];
  EXPECT_EQ(small.at("address"), kSmallSegment);
  EXPECT_EQ(small.at("segment_type"), "small");
  EXPECT_EQ(small.at("total_size"), 2048);
  EXPECT_EQ(small.at("allocated_size"), 1024);
  EXPECT_EQ(small.at("requested_size"), 1000);
  EXPECT_EQ(small.at("stream"), 7);
  EXPECT_EQ(names(small.at("blocks")[0].at("frames")), std::vector<std::string>{"alive before the step"});
  EXPECT_EQ(small.at("blocks")[1].at("address"), kSmallSegment + 1024);
  EXPECT_EQ(small.at("blocks")[1].at("state"), "inactive");
  const json& large = segments[1];
  EXPECT_EQ(large.at("segment_type"), "large");
  EXPECT_EQ(large.at("allocated_size"), 512);
  ASSERT_EQ(large.at("blocks").size(), 3u);
  EXPECT_EQ(large.at("blocks")[0].at("frames"), json::array());  // freed in the step
  EXPECT_EQ(large.at("blocks")[1].at("address"), kLargeSegment + kMiB);
  EXPECT_EQ(large.at("blocks")[1].at("state"), "active_allocated");
  EXPECT_EQ(large.at("blocks")[1].at("frames"), with_stack);
  EXPECT_EQ(large.at("blocks")[2].at("size"), kMiB - 512);
}

}  // namespace
}  // namespace bpbench::testing::test_memory_viz
