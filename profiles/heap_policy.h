// heap_policy.h: freed C-heap memory kept in the process, so a CPU step time measures the step's work.
//
// glibc hands freed memory back to the kernel by thresholds it adapts while the program runs: it trims the
// heap's top and unmaps large blocks. A strategy's step allocates and frees the same tensors chunk after
// chunk; whenever a free trims, the next allocation of those bytes takes fresh pages from the kernel, one
// zero-filling page fault per 4 KiB, inside the timed step. How often that happens depends on the order
// and sizes of allocations, not on the work: on `small` at T = 8192, StreamBP's run took 1.59 M page faults
// and 13% more CPU time after a change that did less arithmetic, and 0.13 M with freed memory kept.
// A GPU's caching allocator keeps freed blocks for reuse; bpbench's processes do the same on the CPU:
// blocks up to 32 MiB (glibc's largest mmap threshold) come from the heap, and the heap is trimmed only when
// 1 GiB lies free at its top.
//
// Peaks are not affected: the tracking allocator (memory.h) counts tensor bytes, not the heap's pages. The
// process's resident size can stay at its high point after a step; nothing bpbench reports reads it.
#pragma once

#include <string>

namespace bpbench::profiles {

// Sets the policy (glibc's mallopt; a no-op elsewhere). Call first thing in main.
void keep_freed_heap_memory();
// What was set, for a run's meta ("" when keep_freed_heap_memory was not called or did nothing).
std::string heap_policy_note();

}  // namespace bpbench::profiles
