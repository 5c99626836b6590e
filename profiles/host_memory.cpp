// host_memory.cpp: the host-byte ledger and the scope that routes CPU allocations to it.
#include "profiles/host_memory.h"

#include <atomic>
#include <fstream>
#include <string>

namespace bpbench::profiles {
namespace {

// Process-global, as MemoryScope's category: intra-op threads copy into host buffers on the scope's behalf.
std::atomic<bool> g_host_scope{false};
std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_transfers{0};

}  // namespace

HostMemoryScope::HostMemoryScope() : previous_(g_host_scope.exchange(true, std::memory_order_relaxed)) {}
HostMemoryScope::~HostMemoryScope() {
  g_host_scope.store(previous_, std::memory_order_relaxed);
}

bool host_memory_scope_active() {
  return g_host_scope.load(std::memory_order_relaxed);
}

void charge_host_bytes(int64_t bytes) {
  const int64_t now = g_live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t p = g_peak.load(std::memory_order_relaxed);
  while (now > p && !g_peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

void release_host_bytes(int64_t bytes) {
  g_live.fetch_sub(bytes, std::memory_order_relaxed);
}

int64_t host_live_bytes() {
  return g_live.load(std::memory_order_relaxed);
}

int64_t host_peak_bytes() {
  return g_peak.load(std::memory_order_relaxed);
}

void reset_host_peak() {
  g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void count_host_transfer(int64_t bytes) {
  g_transfers.fetch_add(bytes, std::memory_order_relaxed);
}

int64_t host_transfer_bytes() {
  return g_transfers.load(std::memory_order_relaxed);
}

void reset_host_transfers() {
  g_transfers.store(0, std::memory_order_relaxed);
}

std::optional<int64_t> host_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace bpbench::profiles
