// recorder.cpp: the one table of memory recorders, by device.
#include "profiles/recorder.h"

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "profiles/cuda_recorder.h"
#include "profiles/memory.h"

namespace bpbench::profiles {

const char* allocator_action_name(AllocatorAction a) {
  switch (a) {
    case AllocatorAction::alloc:
      return "alloc";
    case AllocatorAction::free_requested:
      return "free_requested";
    case AllocatorAction::free_completed:
      return "free_completed";
    case AllocatorAction::segment_alloc:
      return "segment_alloc";
    case AllocatorAction::segment_free:
      return "segment_free";
    case AllocatorAction::segment_map:
      return "segment_map";
    case AllocatorAction::segment_unmap:
      return "segment_unmap";
    case AllocatorAction::oom:
      return "oom";
  }
  return "alloc";
}

namespace {
using Instance = Recorder& (*)();
Recorder& cpu_tracking_allocator() {
  return MemoryRecorder::instance();
}

const std::vector<std::pair<std::string, Instance>>& recorders() {
  static const std::vector<std::pair<std::string, Instance>> table = {
      {"cpu", cpu_tracking_allocator},
      {"cuda", cuda_recorder},
  };
  return table;
}

std::mutex& override_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, Recorder*>& overrides() {
  static std::map<std::string, Recorder*> m;
  return m;
}
}  // namespace

RecorderOverride::RecorderOverride(std::string device, Recorder& recorder) : device_(std::move(device)) {
  std::lock_guard<std::mutex> lock(override_mutex());
  overrides()[device_] = &recorder;
}

RecorderOverride::~RecorderOverride() {
  std::lock_guard<std::mutex> lock(override_mutex());
  overrides().erase(device_);
}

Recorder& recorder_for(const std::string& device) {
  {
    std::lock_guard<std::mutex> lock(override_mutex());
    auto it = overrides().find(device);
    if (it != overrides().end()) return *it->second;
  }
  std::string valid;
  for (const auto& [name, instance] : recorders()) {
    if (name == device) return instance();
    valid += (valid.empty() ? "" : ", ") + name;
  }
  throw std::invalid_argument(fmt::format("no memory recorder for device '{}' (valid: {})", device, valid));
}

}  // namespace bpbench::profiles
