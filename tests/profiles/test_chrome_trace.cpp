// test_chrome_trace.cpp: the Chrome trace puts CUPTI's device activity beside the memory counters and the
// phases, on the timeline's clock, one named track per CUDA stream. (Collecting the activity needs a GPU:
// tests/device/test_device_backend.cpp; the merge is the same code everywhere.)
#include <gtest/gtest.h>

#include <map>

#include "profiles/chrome_trace.h"

namespace bpbench::profiles::test_chrome_trace {
namespace {

TEST(ChromeTrace, DeviceActivityGoesOnOneTrackPerStreamInMicroseconds) {
  Timeline timeline;
  timeline.points.push_back(TimelinePoint{0.0, 10, {}});
  timeline.phases.push_back(PhaseMark{"forward", 0.5, 3.0, 0});
  const std::vector<DeviceActivity> device = {
      {"memcpy", "memcpy HtoD", 0.25, 0.75, 7, 4096},
      {"kernel", "void gemm<float>(int)", 1.0, 2.5, 7, 0},
      {"kernel", "flash_fwd", 1.5, 2.0, 13, 0},
  };
  const nlohmann::json trace = chrome_trace(timeline, "cell", device);

  std::map<int64_t, std::string> track_names;
  std::vector<nlohmann::json> device_events;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") track_names[e["tid"]] = e["args"]["name"];
    if (e["ph"] == "X" && e.contains("cat")) device_events.push_back(e);
  }
  EXPECT_EQ(track_names.at(1), "phases");
  ASSERT_EQ(device_events.size(), 3u);
  EXPECT_EQ(track_names.at(device_events[0]["tid"].get<int64_t>()), "CUDA stream 7");
  EXPECT_EQ(device_events[1]["tid"], device_events[0]["tid"]);  // same stream, same track
  EXPECT_EQ(track_names.at(device_events[2]["tid"].get<int64_t>()), "CUDA stream 13");
  EXPECT_EQ(track_names.size(), 3u);  // phases + two streams, each named once

  EXPECT_EQ(device_events[0]["name"], "memcpy HtoD");
  EXPECT_EQ(device_events[0]["cat"], "memcpy");
  EXPECT_DOUBLE_EQ(device_events[0]["ts"].get<double>(), 250.0);  // ms -> us, as the format wants
  EXPECT_DOUBLE_EQ(device_events[0]["dur"].get<double>(), 500.0);
  EXPECT_EQ(device_events[0]["args"]["bytes"], 4096);
  EXPECT_EQ(device_events[1]["name"], "void gemm<float>(int)");
  EXPECT_FALSE(device_events[1]["args"].contains("bytes"));  // a kernel moves no counted bytes
}

TEST(ChromeTrace, NoDeviceActivityNoStreamTracks) {
  Timeline timeline;
  timeline.phases.push_back(PhaseMark{"forward", 0.0, 1.0, 0});
  const nlohmann::json trace = chrome_trace(timeline, "cell");
  int complete_events = 0;
  for (const auto& e : trace["traceEvents"]) {
    EXPECT_FALSE(e.contains("cat"));
    if (e["ph"] == "X") ++complete_events;
  }
  EXPECT_EQ(complete_events, 1);
}

}  // namespace
}  // namespace bpbench::profiles::test_chrome_trace
