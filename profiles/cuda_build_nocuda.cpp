// cuda_build_nocuda.cpp: cuda_build.h for a build against a CPU-only LibTorch (see cuda_build.h).
#include "profiles/cuda_build.h"

namespace bpbench::profiles {

int cuda_device_count() {
  return 0;
}

nlohmann::json cuda_build_info() {
  return {{"enabled", false}, {"cuda", "none (CPU-only LibTorch)"}, {"devices", 0}};
}

nlohmann::json cuda_devices() {
  return nlohmann::json::array();
}

std::string cuda_device_name() {
  return "";
}

std::string no_gpu_reason() {
  return "no CUDA in this build (a CPU-only LibTorch)";
}

}  // namespace bpbench::profiles
