// step_timer_cuda.cpp: CUDA events around the step on the current stream (step_timer.h).
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "profiles/step_timer.h"

namespace bpbench::profiles {
namespace {

class CudaEventTimer final : public StepTimer {
 public:
  void start() override { begin_.record(c10::cuda::getCurrentCUDAStream()); }
  double stop_seconds() override {
    end_.record(c10::cuda::getCurrentCUDAStream());
    end_.synchronize();
    return begin_.elapsed_time(end_) / 1000.0;
  }

 private:
  c10::cuda::CUDAEvent begin_{cudaEventDefault}, end_{cudaEventDefault};
};

}  // namespace

std::unique_ptr<StepTimer> cuda_event_timer() {
  return std::make_unique<CudaEventTimer>();
}

}  // namespace bpbench::profiles
