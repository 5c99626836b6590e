// accelerators.cpp: the table of accelerators.h. Each size is the total the device's own tool reports, in
// MiB (nvidia-smi's "Total", from NVML), with a public log that shows it; the vendor's figure beside it.
#include "harness/cli/accelerators.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace bpbench {

namespace {

constexpr int64_t kMiB = 1 << 20;

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

const std::vector<Accelerator>& accelerators() {
  static const std::vector<Accelerator> table = {
      // 24 GB GDDR6 (vendor); nvidia-smi 23034 MiB: modal.com's "Why does an NVIDIA H100 80GB card offer
      // 85.52 GB?" (thundergolfer.com/blog/nvidia-gpu-memory-capacity),
      // github.com/modal-labs/modal-client/pull/2797
      {"l4", "L4 24GB", 23034 * kMiB, ""},
      // 24 GB GDDR6X; nvidia-smi 24564 MiB: github.com/RLinf/RLinf/issues/255
      {"rtx-4090", "RTX 4090 24GB", 24564 * kMiB, ""},
      // 24 GB GDDR6X; nvidia-smi 24576 MiB: github.com/noonghunna/club-3090/issues/390
      {"rtx-3090", "RTX 3090 24GB", 24576 * kMiB, ""},
      // 40 GB HBM2; nvidia-smi 40960 MiB (SXM4): github.com/bottlerocket-os/bottlerocket-core-kit/pull/834
      {"a100-40gb", "A100 40GB", 40960 * kMiB, ""},
      // 48 GB GDDR6 with ECC; nvidia-smi 46068 MiB: the modal.com post above, modal-client pull 2797
      {"l40s", "L40S 48GB", 46068 * kMiB, ""},
      // 80 GB HBM2e; nvidia-smi 81920 MiB (SXM4): the modal.com post above,
      // github.com/NVIDIA/mig-parted/issues/31
      {"a100-80gb", "A100 80GB", 81920 * kMiB, ""},
      // 80 GB HBM2e (the paper's GPU); nvidia-smi 81920 MiB: github.com/vllm-project/vllm/issues/41519
      {"a800-80gb", "A800 80GB", 81920 * kMiB, ""},
      // 80 GB HBM3; nvidia-smi 81559 MiB = 85520809984 bytes: the modal.com post above,
      // github.com/NVIDIA/nccl/issues/1264, and this project's device notes (driver 580)
      {"h100-sxm", "H100 SXM 80GB", 81559 * kMiB, ""},
      // 80 GB HBM2e; nvidia-smi 81559 MiB: docs.nvidia.com/launchpad/ai/h100-mig (h100-mig-gpu.html)
      {"h100-pcie", "H100 PCIe 80GB", 81559 * kMiB, ""},
      // 94 GB HBM3; nvidia-smi 95830 MiB: github.com/NVIDIA/gpu-admin-tools/issues/4
      {"h100-nvl", "H100 NVL 94GB", 95830 * kMiB, ""},
      // 141 GB HBM3e; nvidia-smi 143771 MiB: the modal.com post above, and this project's device notes
      {"h200", "H200 141GB", 143771 * kMiB, ""},
      // "180 GB" as clouds sell it (192 GB HBM3e raw); nvidia-smi 183359 MiB:
      // github.com/NVIDIA/TensorRT-LLM/issues/10278, github.com/pytorch/ao/pull/4002
      {"b200", "B200 180GB", 183359 * kMiB, ""},
      // 192 GB HBM3; rocm-smi "VRAM Total Memory" 205822885888 bytes (196288 MiB):
      // github.com/ROCm/legacy-rocm-build/issues/4750 (8 CPX partitions of 25767706624 bytes)
      {"mi300x", "MI300X 192GB", 205822885888,
       "ROCm runs its own attention kernels: the attention terms here are CUDA FlashAttention-2's, unchecked "
       "against ROCm's"},
  };
  return table;
}

std::string accelerator_keys() {
  std::string keys;
  for (const auto& a : accelerators()) keys += a.key + ", ";
  return keys + "all";
}

const Accelerator& find_accelerator(const std::string& key) {
  for (const auto& a : accelerators())
    if (a.key == lower(key)) return a;
  throw std::invalid_argument(fmt::format("estimate: unknown GPU '{}' (valid: {})", key, accelerator_keys()));
}

int64_t default_reserve_bytes(int64_t memory_bytes) {
  return (int64_t{1} << 30) + memory_bytes / 20;
}

}  // namespace bpbench
