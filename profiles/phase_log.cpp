// phase_log.cpp: the process-wide phase log behind PhaseScope (phase_log.h).
#include "profiles/phase_log.h"

#include <cstdint>
#include <mutex>
#include <utility>

#include "profiles/nvtx.h"

namespace bpbench::profiles {
namespace {

struct Log {
  std::mutex mu;
  bool active = false;
  uint64_t generation = 0;  // bumped on start and stop, so a stale PhaseScope never touches a newer log
  TraceClock::time_point origin;
  std::vector<PhaseMark> marks;

  double now_ms() const {
    return std::chrono::duration<double, std::milli>(TraceClock::now() - origin).count();
  }
};

// Never freed: a PhaseScope may close during static destruction.
Log& log() {
  static Log* l = new Log();
  return *l;
}

// Per thread: RAII phases nest within the thread that opens them. index < 0: not logged.
struct OpenPhase {
  int64_t index;
  uint64_t generation;
};
std::vector<OpenPhase>& open_phases() {
  thread_local std::vector<OpenPhase> stack;
  return stack;
}

}  // namespace

void start_phase_log(TraceClock::time_point origin) {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mu);
  ++l.generation;
  l.origin = origin;
  l.marks.clear();
  l.active = true;
}

std::vector<PhaseMark> stop_phase_log() {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mu);
  if (!l.active) return {};
  l.active = false;
  ++l.generation;
  const double now = l.now_ms();
  for (auto& m : l.marks) {
    if (m.end_ms < 0) m.end_ms = now;
  }
  return std::exchange(l.marks, {});
}

PhaseScope::PhaseScope(std::string name) {
  nvtx_push(name.c_str());
  Log& l = log();
  auto& stack = open_phases();
  OpenPhase entry{-1, 0};
  {
    std::lock_guard<std::mutex> lock(l.mu);
    if (l.active) {
      // Depth counts only enclosing phases logged in this run of the log, so 0 is the outermost it holds.
      int depth = 0;
      for (const auto& e : stack) {
        if (e.index >= 0 && e.generation == l.generation) ++depth;
      }
      entry = {static_cast<int64_t>(l.marks.size()), l.generation};
      // end_ms < 0: open until the scope ends (or the log stops).
      l.marks.push_back(PhaseMark{std::move(name), l.now_ms(), -1.0, depth});
    }
  }
  stack.push_back(entry);
}

PhaseScope::~PhaseScope() {
  auto& stack = open_phases();
  if (!stack.empty()) {
    const OpenPhase entry = stack.back();
    stack.pop_back();
    if (entry.index >= 0) {
      Log& l = log();
      std::lock_guard<std::mutex> lock(l.mu);
      if (l.active && entry.generation == l.generation) {
        l.marks[static_cast<size_t>(entry.index)].end_ms = l.now_ms();
      }
    }
  }
  nvtx_pop();
}

}  // namespace bpbench::profiles
