// device_activity_cuda.cpp: device_activity.h through CUPTI's activity API (CUDA-enabled builds).
//
// CUPTI fills buffers it asks us for and hands them back full (or on a flush); the records are read then,
// under a lock, into one list. Record times are on CUPTI's clock (ns); cuptiGetTimestamp() and the steady
// clock read together at the start map them onto the timeline's clock.
//
// Losses are counted (device_activity.h): CUPTI's dropped-record count is read (and so reset) at the start,
// after every buffer it hands back and after the final flush; since CUDA 6 every buffer is global, so the
// count of the global queue (context NULL) is the one. The final flush is forced (it also returns buffers
// holding unfinished records, whose end time is still 0), so stop waits for the device before it: a step
// that threw out of memory leaves its queued kernels running, and their records would otherwise come back
// without an end.
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <utility>

#include "profiles/device_activity.h"

namespace bpbench::profiles {
namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr size_t kRecordAlignment = 8;
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

// A record as read, still on CUPTI's clock.
struct RawActivity {
  DeviceActivity activity;
  uint64_t start_ns = 0, end_ns = 0;
};

struct Collector {
  std::mutex mu;
  bool callbacks_registered = false;
  bool active = false;
  uint64_t cupti_start_ns = 0;
  TraceClock::time_point steady_start;
  std::vector<RawActivity> records;
  int64_t dropped = 0;          // of the collection under way
  DeviceActivityLosses last{};  // of the last one stopped
};

Collector& collector() {
  static Collector* c = new Collector();  // never freed: CUPTI may hand a buffer back at exit
  return *c;
}

std::string demangled(const char* name) {
  if (name == nullptr) return "kernel";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

const char* memcpy_name(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "memcpy PtoP";
    default:
      return "memcpy";
  }
}

void read_record(const CUpti_Activity* record, std::vector<RawActivity>& out) {
  RawActivity r;
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      r.activity = {"kernel", demangled(k->name), 0, 0, k->streamId, 0};
      r.start_ns = k->start;
      r.end_ns = k->end;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      r.activity = {"memcpy", memcpy_name(m->copyKind), 0, 0, m->streamId, static_cast<int64_t>(m->bytes)};
      r.start_ns = m->start;
      r.end_ns = m->end;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      r.activity = {"memset", "memset", 0, 0, m->streamId, static_cast<int64_t>(m->bytes)};
      r.start_ns = m->start;
      r.end_ns = m->end;
      break;
    }
    default:
      return;
  }
  out.push_back(std::move(r));
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kRecordAlignment, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

// Records CUPTI dropped since the last call (which resets its count); 0 where it cannot say.
int64_t take_dropped_count() {
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) != CUPTI_SUCCESS) return 0;
  return static_cast<int64_t>(dropped);
}

void CUPTIAPI buffer_completed(CUcontext /*ctx*/, uint32_t /*stream*/, uint8_t* buffer, size_t /*size*/,
                               size_t valid_size) {
  std::vector<RawActivity> read;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) read_record(record, read);
  std::free(buffer);
  const int64_t dropped = take_dropped_count();
  Collector& c = collector();
  std::lock_guard<std::mutex> lock(c.mu);
  if (!c.active) return;  // records of an earlier, already returned collection
  for (auto& r : read) c.records.push_back(std::move(r));
  c.dropped += dropped;
}

std::string cupti_error(const char* call, CUptiResult result) {
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  return std::string(call) + ": " + (text ? text : "CUPTI error");
}

}  // namespace

bool start_device_activity(std::string* why) {
  Collector& c = collector();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.active) return true;
  if (!c.callbacks_registered) {
    const CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
      if (why) *why = cupti_error("cuptiActivityRegisterCallbacks", r);
      return false;
    }
    c.callbacks_registered = true;
  }
  for (const CUpti_ActivityKind kind : kKinds) {
    const CUptiResult r = cuptiActivityEnable(kind);
    if (r != CUPTI_SUCCESS) {
      for (const CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
      if (why) *why = cupti_error("cuptiActivityEnable", r);
      return false;
    }
  }
  cuptiGetTimestamp(&c.cupti_start_ns);
  c.steady_start = TraceClock::now();
  c.records.clear();
  (void)take_dropped_count();  // drops before this collection are not its own
  c.dropped = 0;
  c.active = true;
  return true;
}

std::vector<DeviceActivity> stop_device_activity(TraceClock::time_point origin) {
  Collector& c = collector();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (!c.active) return {};
  }
  // Every queued kernel ends before the forced flush (see the top). A failed device leaves an error to
  // clear, not to throw here: stop also runs on the way out of a failed step.
  if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
  // Outside the lock: the flush calls buffer_completed, which takes it.
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (const CUpti_ActivityKind kind : kKinds) cuptiActivityDisable(kind);
  const int64_t dropped_at_flush = take_dropped_count();
  std::lock_guard<std::mutex> lock(c.mu);
  c.active = false;
  c.last = DeviceActivityLosses{c.dropped + dropped_at_flush, 0};
  const double shift_ms = std::chrono::duration<double, std::milli>(c.steady_start - origin).count();
  std::vector<DeviceActivity> out;
  out.reserve(c.records.size());
  for (auto& r : c.records) {
    // Flushed before it ended: no end time to place it by.
    if (r.end_ns == 0 || r.end_ns < r.start_ns) {
      ++c.last.incomplete;
      continue;
    }
    // A record can start before the collection did (a kernel launched earlier); it keeps its true time.
    auto since_start_ms = [&](uint64_t ns) {
      return (static_cast<double>(ns) - static_cast<double>(c.cupti_start_ns)) / 1e6 + shift_ms;
    };
    r.activity.begin_ms = since_start_ms(r.start_ns);
    r.activity.end_ms = since_start_ms(r.end_ns);
    out.push_back(std::move(r.activity));
  }
  c.records.clear();
  std::stable_sort(out.begin(), out.end(),
                   [](const DeviceActivity& a, const DeviceActivity& b) { return a.begin_ms < b.begin_ms; });
  return out;
}

DeviceActivityLosses last_device_activity_losses() {
  Collector& c = collector();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.last;
}

}  // namespace bpbench::profiles
