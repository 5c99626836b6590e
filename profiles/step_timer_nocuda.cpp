// step_timer_nocuda.cpp: a CPU-only LibTorch has no CUDA events (step_timer.h).
#include <stdexcept>

#include "profiles/cuda_build.h"
#include "profiles/step_timer.h"

namespace bpbench::profiles {

std::unique_ptr<StepTimer> cuda_event_timer() {
  throw std::runtime_error(no_gpu_reason() + ": no CUDA event timer");
}

}  // namespace bpbench::profiles
