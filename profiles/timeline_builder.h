// timeline_builder.h: the one coalescing rule of every recorder's timeline (memory.cpp for the CPU,
// cuda_recorder_cuda.cpp for CUDA), so that a CPU and a GPU timeline of the same step read the same way.
//
// A point replaces the tail while it falls within min_interval_ms of the first event of the current window,
// so about one point per interval survives, each the last state of its window. A point that sets a new
// running maximum is pinned (never replaced) so the timeline's max is the true peak; the newest event is
// always the tail, so the final state is always present. Not thread-safe: each recorder calls it under its
// own lock.
#pragma once

#include <chrono>
#include <utility>

#include "profiles/phase_log.h"
#include "profiles/recorder.h"

namespace bpbench::profiles {

class TimelineBuilder {
 public:
  // A new timeline whose t = 0 is `origin` (the phase log's too), with a pinned baseline point holding
  // `by_category`.
  void start(double min_interval_ms, const CategoryBytes& by_category, TraceClock::time_point origin) {
    timeline_ = Timeline{};
    timeline_.origin = origin;
    // The same moment on the wall clock: the steady clock's distance to `origin` taken off now.
    const auto unix_now = std::chrono::system_clock::now().time_since_epoch();
    timeline_.origin_unix_us =
        std::chrono::duration_cast<std::chrono::microseconds>(unix_now - (TraceClock::now() - origin))
            .count();
    start_ = origin;
    min_interval_ms_ = min_interval_ms;
    peak_ = 0;
    for (int64_t b : by_category) peak_ += b;
    tail_replaceable_ = false;
    add(by_category);
    tail_replaceable_ = false;
  }

  // The counters' state after an event.
  void add(const CategoryBytes& by_category) {
    TimelinePoint p;
    p.t_ms = now_ms();
    p.by_category = by_category;
    for (int64_t b : p.by_category) p.live += b;  // derived, not read, so points are self-consistent
    const bool is_peak = p.live > peak_;
    if (is_peak) peak_ = p.live;
    auto& points = timeline_.points;
    if (tail_replaceable_ && !points.empty() && p.t_ms - window_start_ms_ < min_interval_ms_) {
      points.back() = p;
    } else {
      window_start_ms_ = p.t_ms;
      points.push_back(p);
    }
    tail_replaceable_ = !is_peak;
  }

  double now_ms() const {
    return std::chrono::duration<double, std::milli>(TraceClock::now() - start_).count();
  }
  Timeline& timeline() { return timeline_; }
  Timeline take() { return std::exchange(timeline_, Timeline{}); }

 private:
  Timeline timeline_;
  TraceClock::time_point start_;
  double min_interval_ms_ = 0, window_start_ms_ = 0;
  int64_t peak_ = 0;
  bool tail_replaceable_ = false;
};

}  // namespace bpbench::profiles
