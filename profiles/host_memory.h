// host_memory.h: host memory that holds what a strategy moved off the device (offloaded layer checkpoints),
// counted apart from the device's bytes.
//
// The device peak is what budgets, tables and the paper talk about; host bytes go beside it
// (memory.host_peak_bytes in the results). Two ways in, one ledger:
// - On the CPU, where "device" and host are one memory, a HostMemoryScope tells the tracking allocator
//   (memory.h) to charge what is allocated while it lives here instead of to the device counters. Offload
//   then runs through the same code as on a GPU, and its effect on the device peak is measured exactly.
// - On CUDA, pinned buffers come from the pinned host allocator, which no recorder sees: the offload store
//   (impls/machinery/offload_cuda.cpp) charges and releases its buffers here itself.
// Host bytes are never held against the byte budget, which is the device's.
#pragma once

#include <cstdint>
#include <optional>

namespace bpbench::profiles {

// While one lives (on any thread), CPU allocations are host bytes, not device bytes.
class HostMemoryScope {
 public:
  HostMemoryScope();
  ~HostMemoryScope();
  HostMemoryScope(const HostMemoryScope&) = delete;
  HostMemoryScope& operator=(const HostMemoryScope&) = delete;

 private:
  bool previous_;
};

bool host_memory_scope_active();

void charge_host_bytes(int64_t bytes);
void release_host_bytes(int64_t bytes);
int64_t host_live_bytes();
int64_t host_peak_bytes();  // since the last reset_host_peak()
void reset_host_peak();     // peak := live

// Bytes copied between the device and host memory by offload (each copy counted once, at the device tensor's
// size: what PCIe carries on a GPU): the checkpoint stores' puts and fetches, the offloaded optimizer's
// gradients out and weights back, the offloaded parameter shards copied in for their gathers. Counted the
// same on the CPU, where "device" and host are one memory, so the estimate's traffic is checked there.
void count_host_transfer(int64_t bytes);
int64_t host_transfer_bytes();  // since the last reset_host_transfers()
void reset_host_transfers();

// The machine's available memory now (MemAvailable of /proc/meminfo: free memory plus what the page cache
// would give back); nullopt where it cannot be read.
std::optional<int64_t> host_available_bytes();

}  // namespace bpbench::profiles
