// cuda_recorder_nocuda.cpp: cuda_recorder.h for a CPU-only LibTorch: there is no CUDA allocator to read.
#include <stdexcept>

#include "profiles/cuda_build.h"
#include "profiles/cuda_recorder.h"

namespace bpbench::profiles {

Recorder& cuda_recorder() {
  throw std::runtime_error(no_gpu_reason() + ": no CUDA memory recorder");
}

}  // namespace bpbench::profiles
