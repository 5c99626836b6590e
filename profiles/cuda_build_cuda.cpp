// cuda_build_cuda.cpp: cuda_build.h for a build against a CUDA-enabled LibTorch (see cuda_build.h).
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <fmt/format.h>
#include <nccl.h>
#include <torch/cuda.h>

#include "profiles/cuda_build.h"

namespace bpbench::profiles {

int cuda_device_count() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

namespace {

// "13.0", or "none" where no driver is installed (a CPU machine).
std::string driver_version() {
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) return "none";
  return fmt::format("{}.{}", driver / 1000, driver % 1000 / 10);
}

}  // namespace

nlohmann::json cuda_build_info() {
  uint32_t cupti_api = 0;
  if (cuptiGetVersion(&cupti_api) != CUPTI_SUCCESS) cupti_api = 0;
  return {{"enabled", true},
          {"cuda", BPBENCH_BUILD_CUDA},
          {"source", BPBENCH_BUILD_CUDA_SOURCE},
          {"cuda_runtime_headers", fmt::format("{}.{}", CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10)},
          {"nccl", fmt::format("{}.{}.{}", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)},
          {"cupti_api", cupti_api},
          {"driver", driver_version()},
          {"devices", cuda_device_count()}};
}

nlohmann::json cuda_devices() {
  nlohmann::json devices = nlohmann::json::array();
  for (int i = 0; i < cuda_device_count(); ++i) {
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, i) != cudaSuccess) continue;
    devices.push_back({{"index", i},
                       {"name", props.name},
                       {"total_memory_bytes", static_cast<int64_t>(props.totalGlobalMem)},
                       {"capability", fmt::format("{}.{}", props.major, props.minor)}});
  }
  return devices;
}

std::string cuda_device_name() {
  int device = 0;
  cudaDeviceProp props{};
  if (cuda_device_count() == 0 || cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&props, device) != cudaSuccess)
    return "";
  return props.name;
}

std::string no_gpu_reason() {
  return fmt::format("no CUDA device (CUDA {} build, driver {})", BPBENCH_BUILD_CUDA, driver_version());
}

}  // namespace bpbench::profiles
