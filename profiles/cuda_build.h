// cuda_build.h: what the CUDA side of this build is, for every results file, and whether a GPU is there.
//
// One interface, two small implementations: cuda_build_cuda.cpp (a build against a CUDA-enabled LibTorch:
// the CUDA version it was compiled with and where those headers came from, NCCL, and CUPTI's and the driver's
// versions read at run time) and cuda_build_nocuda.cpp (a CPU-only LibTorch). CMake compiles exactly one.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace bpbench::profiles {

// {"enabled", "cuda" (the wheel's CUDA, "13.0"), "source" (the toolkit compiled against),
//  "cuda_runtime_headers", "nccl", "cupti_api", "driver" ("none" without one), "devices"}.
// Never throws, and needs no GPU.
nlohmann::json cuda_build_info();

// The number of CUDA devices usable now (0 without a GPU or driver, or in a CPU-only build).
int cuda_device_count();

// Every visible CUDA device, in index order (local rank r of a distributed cell runs on device r):
// [{"index", "name" (the driver's), "total_memory_bytes", "capability" ("9.0")}]; [] without one.
nlohmann::json cuda_devices();

// The current CUDA device's name as the driver reports it ("NVIDIA H100 80GB HBM3"); empty without one.
std::string cuda_device_name();

// Why a GPU cell or test cannot run here, in one line: "no CUDA device (CUDA 13.0 build, driver none)".
std::string no_gpu_reason();

}  // namespace bpbench::profiles
