// test_phase_log.cpp: the phase log is the recorders' common source of phases, so it must work with no
// recorder at all (the CUDA recorder reads it without the CPU recorder's timeline).
#include <gtest/gtest.h>

#include <thread>

#include "profiles/phase_log.h"

namespace bpbench::profiles::test_phase_log {
namespace {

TEST(PhaseLog, LogsOnlyWhileRunningWithTimesFromTheGivenOrigin) {
  { PhaseScope before("before the log"); }
  const auto origin = TraceClock::now() - std::chrono::milliseconds(50);
  start_phase_log(origin);
  {
    PhaseScope step("step");
    PhaseScope layer("layer 0");
  }
  const std::vector<PhaseMark> marks = stop_phase_log();
  { PhaseScope after("after the log"); }

  ASSERT_EQ(marks.size(), 2u);
  EXPECT_EQ(marks[0].name, "step");
  EXPECT_EQ(marks[0].depth, 0);
  EXPECT_EQ(marks[1].name, "layer 0");
  EXPECT_EQ(marks[1].depth, 1);
  EXPECT_GE(marks[0].begin_ms, 50.0);  // measured from the origin handed in, 50 ms before the start
  EXPECT_LE(marks[0].begin_ms, marks[1].begin_ms);
  EXPECT_LE(marks[1].end_ms, marks[0].end_ms);
  EXPECT_TRUE(stop_phase_log().empty());  // stopping again: nothing running, nothing returned
}

TEST(PhaseLog, PhasesOpenAtTheStopAreClosedAndOlderScopesNeverTouchANewerLog) {
  auto* outer = new PhaseScope("outer, open across two logs");
  start_phase_log(TraceClock::now());
  auto* open = new PhaseScope("still open");
  const std::vector<PhaseMark> first = stop_phase_log();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_GE(first[0].end_ms, first[0].begin_ms);  // closed at the stop

  start_phase_log(TraceClock::now());
  delete open;  // belongs to the first log: must not close a mark of this one
  { PhaseScope fresh("fresh"); }
  delete outer;
  const std::vector<PhaseMark> second = stop_phase_log();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].name, "fresh");
  EXPECT_EQ(second[0].depth, 0);  // the scopes opened before this log do not count as its parents
}

TEST(PhaseLog, EachThreadNestsItsOwnPhases) {
  start_phase_log(TraceClock::now());
  {
    PhaseScope main_phase("main");
    std::thread worker([] { PhaseScope w("worker"); });
    worker.join();
  }
  const std::vector<PhaseMark> marks = stop_phase_log();
  ASSERT_EQ(marks.size(), 2u);
  EXPECT_EQ(marks[1].name, "worker");
  EXPECT_EQ(marks[1].depth, 0);  // not nested under the main thread's phase
}

}  // namespace
}  // namespace bpbench::profiles::test_phase_log
