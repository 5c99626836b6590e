// step_timer.h: how long one measured step took on its device.
//
// CPU: the wall clock. CUDA: two CUDA events on the current stream around the step, so the time is the
// device's own, with no host synchronisation inside the step (only once, after it, to read the events).
// One interface, two implementations: step_timer.cpp (the table and the CPU timer) and
// step_timer_cuda.cpp / step_timer_nocuda.cpp (CUDA events, or a CPU-only build's refusal).
#pragma once

#include <memory>
#include <string>

namespace bpbench::profiles {

class StepTimer {
 public:
  virtual ~StepTimer() = default;
  virtual void start() = 0;           // after the device is idle (the caller synchronises first)
  virtual double stop_seconds() = 0;  // waits for the step's work, returns its duration
};

// The timer of a scenario's device ("cpu", "cuda"). Throws std::invalid_argument for another device and
// std::runtime_error for "cuda" in a CPU-only build.
std::unique_ptr<StepTimer> step_timer_for(const std::string& device);

// The CUDA events timer (step_timer_cuda.cpp / step_timer_nocuda.cpp).
std::unique_ptr<StepTimer> cuda_event_timer();

}  // namespace bpbench::profiles
