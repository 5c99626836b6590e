// chrome_trace.h: a memory timeline as Chrome trace JSON, which Perfetto (ui.perfetto.dev) and
// chrome://tracing open: one "C" counter event per timeline point carrying every category's live bytes
// (stacked as one track per category), one "X" complete event per phase (forward, head, layer i backward,
// chunk j) and, when CUPTI collected them (device_activity.h), one "X" event per kernel, memcpy and memset on
// a track per CUDA stream.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include <vector>

#include "profiles/device_activity.h"
#include "profiles/memory.h"

namespace bpbench::profiles {

// `process_name` labels the track group (e.g. the cell's axes). Timestamps are microseconds, as the format
// wants.
// `device` carries times on the timeline's clock (stop_device_activity(timeline.origin)).
nlohmann::json chrome_trace(const Timeline& timeline, const std::string& process_name,
                            const std::vector<DeviceActivity>& device = {});

// The same timeline as plain JSON for results.json: {"points": [{"t_ms", "live", "by_category": {...}}],
// "phases": [{"name", "begin_ms", "end_ms", "depth"}]}.
nlohmann::json timeline_to_json(const Timeline& timeline);

}  // namespace bpbench::profiles
