// device_activity_nocuda.cpp: device_activity.h for a CPU-only LibTorch: there is no device to trace.
#include "profiles/device_activity.h"

namespace bpbench::profiles {

bool start_device_activity(std::string* why) {
  if (why) *why = "this bpbench was built without CUDA (no CUPTI)";
  return false;
}

std::vector<DeviceActivity> stop_device_activity(TraceClock::time_point /*origin*/) {
  return {};
}

DeviceActivityLosses last_device_activity_losses() {
  return {};
}

}  // namespace bpbench::profiles
