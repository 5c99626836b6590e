// test_runner_order.cpp: the order in which a cell calls its memory recorder, checked through the recorder
// seam (profiles::RecorderOverride) with a recorder that logs every call around the CPU one and claims what
// only CUDA's caching allocator has (a cache, snapshots). On a GPU the same calls reach c10's allocator:
// the cache emptied as the cell starts and again before the measured step (so the budget, which a caching
// allocator checks only when it reserves a segment, sees every byte), peaks reset after that, and the
// allocation history behind C++ stacks ended on every path, an out-of-memory one included.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/run/runner.h"
#include "harness/run/scenario.h"
#include "profiles/memory.h"
#include "profiles/recorder.h"
#include "tests/support/test_support.h"

namespace bpbench::test_runner_order {
namespace {

using profiles::MemoryRecorder;

class LoggingRecorder final : public profiles::Recorder {
 public:
  mutable std::vector<std::string> log;

  int64_t live_bytes() const override {
    log.push_back("live_bytes");
    return cpu_.live_bytes();
  }
  int64_t peak_bytes() const override { return cpu_.peak_bytes(); }
  profiles::CategoryBytes peak_by_category() const override { return cpu_.peak_by_category(); }
  void reset_peak() override {
    log.push_back("reset_peak");
    cpu_.reset_peak();
  }
  void set_budget(std::optional<int64_t> bytes) override {
    log.push_back(bytes ? "set_budget " + std::to_string(*bytes) : "set_budget none");
    cpu_.set_budget(bytes);
  }
  void start_timeline(double min_interval_ms) override {
    log.push_back("start_timeline");
    cpu_.start_timeline(min_interval_ms);
  }
  profiles::Timeline stop_timeline() override {
    log.push_back("stop_timeline");
    return cpu_.stop_timeline();
  }
  void record_cpp_stacks(bool on) override {
    log.push_back(on ? "cpp_stacks on" : "cpp_stacks off");
    cpu_.record_cpp_stacks(on);
  }
  bool caches_blocks() const override { return true; }
  void release_cached() override { log.push_back("release_cached"); }
  bool writes_snapshots() const override { return true; }
  void set_oom_snapshot_path(const std::string& path) override {
    log.push_back(path.empty() ? "oom_snapshot off" : "oom_snapshot on");
  }

 private:
  MemoryRecorder& cpu_ = MemoryRecorder::instance();
};

class RunnerOrder : public ::testing::Test {
 protected:
  CellJob job(int64_t budget) const {
    CellJob j;
    j.cell = parse_scenario_text(R"({"grid": {"model": "tiny", "impl": "streambp", "seq_len": 33,
                                              "partition": 8, "logits_partition": 8}})")
                 .expand()
                 .at(0);
    j.settings.threads = 1;
    j.settings.measure.time.warmup = 1;
    j.settings.measure.time.repeat = 2;
    j.settings.measure.timeline = true;
    j.settings.measure.budget_bytes = budget;
    j.timeline_dir = tmp_.path();
    j.timeline_name = "timelines/cell-000";
    return j;
  }
  testing::TempDir tmp_;
};

TEST_F(RunnerOrder, CacheEmptiedAtCellStartAndBeforeTheBudgetPeaksResetAfterTheTimelineWritesTheSnapshot) {
  MemoryRecorder::instance();
  LoggingRecorder rec;
  profiles::RecorderOverride use(job(0).settings.device, rec);
  const int64_t budget = int64_t{1} << 40;
  const CellResult r = run_cell(job(budget));
  ASSERT_EQ(r.status, "ok") << r.reason;
  const std::vector<std::string> expected = {
      "release_cached", "reset_peak",  // the cell starts from an empty cache
      // the measured step, after the warm-up:
      "release_cached", "reset_peak", "live_bytes", "set_budget " + std::to_string(budget), "oom_snapshot on",
      "cpp_stacks off", "start_timeline", "stop_timeline", "oom_snapshot off", "set_budget none"};
  EXPECT_EQ(rec.log, expected);
  // The memory step started from an emptied cache: it is not among the timed runs, which are `repeat`.
  ASSERT_TRUE(r.time.has_value());
  EXPECT_EQ(r.time->runs_s.size(), 2u);
  ASSERT_TRUE(r.memory.has_value());
  EXPECT_EQ(r.memory->snapshot_file, "timelines/cell-000.memory_viz.pickle");
}

TEST_F(RunnerOrder, AnOutOfMemoryStepStillEndsHistoryLiftsTheBudgetAndEmptiesTheCache) {
  MemoryRecorder::instance();
  LoggingRecorder rec;
  profiles::RecorderOverride use(job(0).settings.device, rec);
  const int64_t budget = 1;  // above base by nothing: the step's first allocation fails
  const CellResult r = run_cell(job(budget));
  ASSERT_EQ(r.status, "oom") << r.reason;
  const std::vector<std::string> expected = {
      "release_cached",   "reset_peak",
      "release_cached",   "reset_peak",
      "live_bytes",       "set_budget " + std::to_string(budget),
      "oom_snapshot on",  "cpp_stacks off",
      "start_timeline",
      "stop_timeline",  // on the way out of the failed step: no later cell inherits the history
      "oom_snapshot off", "set_budget none",
      "release_cached"};  // the failed step's blocks go back before anything else runs
  EXPECT_EQ(rec.log, expected);
  EXPECT_FALSE(r.time.has_value());
}

}  // namespace
}  // namespace bpbench::test_runner_order
