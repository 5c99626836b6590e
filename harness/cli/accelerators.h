// accelerators.h: the GPUs `bpbench estimate --gpu` knows, with the memory their tools report, and the bytes
// held back from it before the estimate's peak (allocated bytes, what torch.cuda.max_memory_allocated counts)
// is compared with what is left.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bpbench {

struct Accelerator {
  std::string key;           // what --gpu takes: "h100-sxm"
  std::string label;         // "H100 SXM 80GB"
  int64_t memory_bytes = 0;  // the device's total as nvidia-smi (NVML) / rocm-smi report it
  std::string note;          // where the estimate stands in for something it does not model; "" if none
};

// The table, smallest memory first (accelerators.cpp cites each size).
const std::vector<Accelerator>& accelerators();

// The accelerator named `key` (case-insensitive); throws std::invalid_argument listing every key.
const Accelerator& find_accelerator(const std::string& key);

// "rtx-3090, rtx-4090, ..., all"
std::string accelerator_keys();

// What is held back of a device's memory by default: 1 GiB (the driver's own reservation, which CUDA's
// totalGlobalMem already leaves out: 470-730 MiB on an H100; the CUDA context, 0.3-0.4 GB with lazy module
// loading; cuBLAS and cuBLASLt workspaces, 32 MiB each on Hopper) plus 5% of the memory for the caching
// allocator's slack (segments reserved but not allocated, which the estimate's allocated bytes leave out).
// On an H100 SXM: 85.52e9 - 5.35e9 = 80.17e9, the budget scenarios/h100_table3_maxlen.json uses (80e9).
int64_t default_reserve_bytes(int64_t memory_bytes);

}  // namespace bpbench
