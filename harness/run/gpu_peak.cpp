// gpu_peak.cpp: the peak table of gpu_peak.h. Each row names the datasheet its numbers come from.
#include "harness/run/gpu_peak.h"

#include <vector>

namespace bpbench {

namespace {

struct PeakRow {
  const char* gpu;
  const char* must[2];      // substrings of the driver's name that pick this row ("" matches any)
  double bf16, fp32, fp64;  // dense TFLOP/s
  const char* source;
};

// First match wins: the NVL and PCIe variants before the SXM row that would also match their names.
const std::vector<PeakRow>& table() {
  static const std::vector<PeakRow> rows = {
      {"H100 NVL",
       {"H100", "NVL"},
       835.5,
       60.0,
       60.0,
       "NVIDIA H100 datasheet, H100 NVL column: BF16 1,671 TFLOPS with sparsity (835.5 dense), FP32 60, "
       "FP64 Tensor Core 60"},
      {"H100 PCIe",
       {"H100", "PCIe"},
       756.0,
       51.0,
       51.0,
       "NVIDIA H100 datasheet, H100 PCIe column: BF16 1,513 TFLOPS with sparsity (756 dense), FP32 51, "
       "FP64 Tensor Core 51"},
      {"H100 SXM",
       {"H100", ""},
       989.5,
       67.0,
       67.0,
       "NVIDIA H100 datasheet, H100 SXM column: BF16 1,979 TFLOPS with sparsity (989.5 dense), FP32 67, "
       "FP64 Tensor Core 67"},
      {"H200 NVL",
       {"H200", "NVL"},
       835.5,
       60.0,
       60.0,
       "NVIDIA H200 datasheet, H200 NVL column: BF16 1,671 TFLOPS with sparsity (835.5 dense), FP32 60, "
       "FP64 Tensor Core 60"},
      {"H200 SXM",
       {"H200", ""},
       989.5,
       67.0,
       67.0,
       "NVIDIA H200 datasheet, H200 SXM column: BF16 1,979 TFLOPS with sparsity (989.5 dense), FP32 67, "
       "FP64 Tensor Core 67"},
      {"A100",
       {"A100", ""},
       312.0,
       19.5,
       19.5,
       "NVIDIA A100 datasheet (SXM and PCIe alike): BF16 312 TFLOPS dense, FP32 19.5, FP64 Tensor Core 19.5"},
  };
  return rows;
}

bool matches(const PeakRow& row, const std::string& name) {
  for (const char* part : row.must)
    if (name.find(part) == std::string::npos) return false;
  return true;
}

}  // namespace

std::optional<GpuPeak> gpu_peak(const std::string& device_name, at::ScalarType dtype) {
  for (const auto& row : table()) {
    if (!matches(row, device_name)) continue;
    GpuPeak p;
    p.gpu = row.gpu;
    p.source = row.source;
    if (dtype == at::kBFloat16 || dtype == at::kHalf) {
      p.precision = "bf16 tensor core (dense)";
      p.tflops = row.bf16;
    } else if (dtype == at::kFloat) {
      p.precision = "fp32 (no TF32)";
      p.tflops = row.fp32;
    } else {
      p.precision = "fp64 tensor core";
      p.tflops = row.fp64;
    }
    return p;
  }
  return std::nullopt;
}

std::string known_gpus() {
  std::string names;
  for (const auto& row : table()) names += (names.empty() ? "" : ", ") + std::string(row.gpu);
  return names;
}

}  // namespace bpbench
