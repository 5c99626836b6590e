// step_timer.cpp: the table of step timers by device, and the CPU's (the wall clock).
#include "profiles/step_timer.h"

#include <fmt/format.h>

#include <chrono>
#include <stdexcept>

namespace bpbench::profiles {
namespace {

class WallClockTimer final : public StepTimer {
 public:
  void start() override { start_ = std::chrono::steady_clock::now(); }
  double stop_seconds() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

std::unique_ptr<StepTimer> step_timer_for(const std::string& device) {
  if (device == "cpu") return std::make_unique<WallClockTimer>();
  if (device == "cuda") return cuda_event_timer();
  throw std::invalid_argument(fmt::format("no step timer for device '{}' (valid: cpu, cuda)", device));
}

}  // namespace bpbench::profiles
