// device_activity.h: what the GPU itself ran during a measured step, from CUPTI's activity API: every
// kernel, memcpy and memset with its start and end on the device, mapped onto the timeline's clock, so the
// Chrome trace shows them under the phases and the memory counters (chrome_trace.h).
//
// Asked for by measure.device_activity (with measure.timeline, device cuda). Collecting costs a buffer per
// few thousand records and some launch overhead, which is why it is off unless asked: a step traced this way
// is not the step whose time the results report (the timed repeats run without it).
//
// What a trace may lack is counted, never silently lost: records CUPTI dropped for want of buffer space, and
// records flushed before their activity had ended (no end time; left out of the trace). Stopping waits for
// the device first, so that after a step that threw (out of memory, with work still queued) every queued
// kernel has ended and the second count stays zero unless the device itself failed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiles/phase_log.h"

namespace bpbench::profiles {

struct DeviceActivity {
  std::string kind;                 // "kernel", "memcpy" or "memset"
  std::string name;                 // the kernel's demangled name; "memcpy HtoD" etc.; "memset"
  double begin_ms = 0, end_ms = 0;  // since the origin handed to stop_device_activity()
  uint32_t stream = 0;
  int64_t bytes = 0;  // memcpy and memset; 0 for kernels
};

// Starts collecting. False, collecting nothing, where this build has no CUPTI or CUPTI cannot start (no GPU,
// another profiler holding it); `why` then says which.
bool start_device_activity(std::string* why = nullptr);

// Waits for the device, flushes CUPTI's buffers, stops collecting and returns the complete records in start
// order, with times in milliseconds since `origin`. Empty if nothing was collecting.
std::vector<DeviceActivity> stop_device_activity(TraceClock::time_point origin);

// What the last collection could not return (zeros before any, and where none could start).
struct DeviceActivityLosses {
  int64_t dropped = 0;  // records CUPTI dropped for want of buffer space (cuptiActivityGetNumDroppedRecords)
  int64_t incomplete = 0;  // records without an end time at the flush: left out of stop's result
};
// The counts of the collection that the last stop_device_activity() ended.
DeviceActivityLosses last_device_activity_losses();

}  // namespace bpbench::profiles
