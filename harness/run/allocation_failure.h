// allocation_failure.h: whether an error a step threw is an allocation the device or host could not satisfy,
// and how many bytes it asked for. Such a cell is a result, status "oom", not an error (results.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace bpbench {

// The allocators' messages, one line each (LibTorch 2.x):
//   CPU   "DefaultCPUAllocator: can't allocate memory: you tried to allocate 8000000000000 bytes. Error code
//   12
//         (Cannot allocate memory)" (c10/core/impl/alloc_cpu.cpp: posix_memalign failed), or "not enough
//         memory: you tried to allocate N bytes" where the platform says so;
//   CUDA  "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of ..." (the caching
//         allocator, c10::OutOfMemoryError), its size rounded to two decimals of its unit.
bool is_allocation_failure(const std::string& message);
// The bytes the failed allocation asked for: exact from the CPU allocator's message, within the rounding of
// its unit from CUDA's; nullopt where the message does not say.
std::optional<int64_t> requested_bytes(const std::string& message);

}  // namespace bpbench
