// heap_policy.cpp: heap_policy.h.
#include "profiles/heap_policy.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace bpbench::profiles {
namespace {

std::string g_note;

}  // namespace

void keep_freed_heap_memory() {
#if defined(__GLIBC__)
  // Fixing the mmap threshold also stops glibc adapting it; the trim threshold then keeps the heap's top.
  constexpr int kLargestMmapThreshold = 32 << 20;  // glibc refuses more (HEAP_MAX_SIZE / 2 on 64-bit)
  const bool mmap_set = mallopt(M_MMAP_THRESHOLD, kLargestMmapThreshold) == 1;
  const bool trim_set = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  if (mmap_set && trim_set)
    g_note =
        "freed memory kept: glibc's mmap threshold 32 MiB, trim threshold 1 GiB (profiles/heap_policy.h)";
#endif
}

std::string heap_policy_note() {
  return g_note;
}

}  // namespace bpbench::profiles
