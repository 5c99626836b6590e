// gpu_peak.h: the dense peak FLOP/s of a GPU for a model dtype, from a table by GPU name with the source of
// every number; what MFU and HFU divide by (docs/estimate.md, "FLOPs").
//
// The peak is the precision the step's matmuls run in: bfloat16/float16 on tensor cores; float32 without
// TF32 (LibTorch's default matmul precision is "highest", and bpbench never changes it), so the plain FP32
// rate; float64 on the FP64 tensor cores. Dense numbers: NVIDIA's datasheets quote tensor-core rates with 2:4
// sparsity, which no training step uses; those are halved here.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

namespace bpbench {

struct GpuPeak {
  std::string gpu;        // the table's row, e.g. "H100 SXM"
  std::string precision;  // "bf16 tensor core (dense)", "fp32 (no TF32)", "fp64 tensor core"
  double tflops = 0;      // 1e12 FLOP/s
  std::string source;     // where the number comes from
};

// The peak of the GPU the driver calls `device_name` ("NVIDIA H100 80GB HBM3") for `dtype`; nullopt for a
// GPU not in the table.
std::optional<GpuPeak> gpu_peak(const std::string& device_name, at::ScalarType dtype);

// The names the table knows, for messages: "A100, H100 PCIe, H100 NVL, H100 SXM, H200 NVL, H200 SXM".
std::string known_gpus();

}  // namespace bpbench
