// version.cpp: `bpbench --version`. Compiled outside the unity batches (CMakeLists.txt), since the commit's
// header changes with every commit and should rebuild this file alone.
#include "harness/cli/version.h"

#include <fmt/format.h>
#include <torch/version.h>

#include <nlohmann/json.hpp>

#include "build_commit.inc"  // generated: BPBENCH_BUILD_COMMIT, BPBENCH_BUILD_DIRTY
#include "harness/run/results.h"
#include "profiles/cuda_build.h"

namespace bpbench {

std::string version_text() {
  const nlohmann::json cuda = profiles::cuda_build_info();
  std::string cuda_line = "none (a CPU-only LibTorch)";
  if (cuda.value("enabled", false))
    cuda_line =
        fmt::format("{} ({}; runtime headers {}; NCCL {}; CUPTI API {}; driver {})", cuda.value("cuda", "?"),
                    cuda.value("source", "?"), cuda.value("cuda_runtime_headers", "?"),
                    cuda.value("nccl", "?"), cuda.value("cupti_api", 0), cuda.value("driver", "?"));
  return fmt::format("bpbench {}\ncommit: {}{}\nLibTorch: {}\nCUDA: {}\ncompiler: {}\n", kBpbenchVersion,
                     BPBENCH_BUILD_COMMIT, BPBENCH_BUILD_DIRTY ? " (with uncommitted changes)" : "",
                     TORCH_VERSION, cuda_line, __VERSION__);
}

}  // namespace bpbench
