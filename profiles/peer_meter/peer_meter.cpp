// peer_meter.cpp: bpbench's CPU memory meter (memory.h's tracking allocator) for a process that is not
// bpbench: a Python peer (impls/peers/cpu_meter.py) loads this library with ctypes after `import torch`,
// and from then on every CPU tensor of that process is counted exactly as a bpbench cell's are.
//
// The library links the same libc10 the Python process has loaded (the project's pinned torch, through the
// build's rpath), so SetCPUAllocator here is the allocator torch uses. Tensors allocated before install keep
// their own deleters and are simply not counted: install before the model is built. A budget overrun throws
// c10::OutOfMemoryError inside the allocation, which torch's Python binding raises as torch.OutOfMemoryError,
// the exception a CUDA peer catches: a CPU peer's oom is a cell like a GPU one's.
#include <cstdint>
#include <optional>

#include "profiles/memory.h"

namespace {
bpbench::profiles::MemoryRecorder& meter() {
  return bpbench::profiles::MemoryRecorder::instance();  // installs the tracking allocator (and turns oneDNN
                                                         // off)
}
}  // namespace

// C names, so ctypes finds them without C++ mangling; every call returns, none throws.
extern "C" {

// Installs the tracking allocator (idempotent); the live bytes it counts from now on (0 at first).
int64_t bpbench_meter_install() {
  return meter().live_bytes();
}

int64_t bpbench_meter_live_bytes() {
  return meter().live_bytes();
}

int64_t bpbench_meter_peak_bytes() {
  return meter().peak_bytes();
}

// peak := live, and the allocation count back to 0.
void bpbench_meter_reset_peak() {
  meter().reset_peak();
}

int64_t bpbench_meter_allocation_count() {
  return meter().allocation_count();
}

// An allocation that would take live bytes above `bytes` raises torch.OutOfMemoryError; bytes < 0: no budget.
void bpbench_meter_set_budget(int64_t bytes) {
  meter().set_budget(bytes < 0 ? std::nullopt : std::optional<int64_t>(bytes));
}

}  // extern "C"
