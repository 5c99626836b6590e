// phase_log.h: the named phases of a step (forward, head, layer i backward, chunk j), whatever the device.
//
// Strategies mark phases with an RAII PhaseScope; it always opens an NVTX range (so nsys shows the step's
// structure) and, while a recorder's timeline runs, logs the phase's interval. The log belongs to no
// recorder: each recorder starts it with its own timeline's clock origin and takes the marks back when it
// stops, so the CPU and the CUDA recorder read phases the same way.
#pragma once

#include <string>
#include <vector>

#include "profiles/recorder.h"

namespace bpbench::profiles {

// A named phase; nested phases form a stack per thread. Logged only while the phase log runs.
class PhaseScope {
 public:
  explicit PhaseScope(std::string name);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;
};

// Starts logging phases, times in milliseconds since `origin` (a recorder's timeline start).
void start_phase_log(TraceClock::time_point origin);

// Stops logging and returns the marks in the order the phases began; phases still open end now, so every
// mark is a closed interval. Empty if the log was not running.
std::vector<PhaseMark> stop_phase_log();

}  // namespace bpbench::profiles
