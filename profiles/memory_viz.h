// memory_viz.h: a CPU step's allocations as the pickle PyTorch's memory viewer reads (pytorch.org/memory_viz,
// or `python -m torch.cuda._memory_viz trace_plot FILE -o FILE.html`): the structure
// torch.cuda.memory._snapshot() returns, from the tracking allocator's events (recorder.h: Timeline::events).
//
//   {"device_traces": [[...]], "segments": [...]}
//   segments: one a block alive when the timeline stopped (the CPU allocator caches nothing: each allocation
//             is its own segment), {"device": 0, "address", "total_size", "allocated_size", "active_size",
//             "requested_size", "stream": 0, "segment_type": "large", "frames": [], "blocks": [{"address",
//             "size", "requested_size", "state": "active_allocated", "frames"}]}
//   device_traces[0]: per allocation "segment_alloc" then "alloc", per free "free_requested",
//             "free_completed" then "segment_free", each {"action", "addr", "size", "stream": 0, "time_us",
//             "frames", "category"}; the blocks alive at the start come first, allocated at time 0.
//
// Frames are bpbench's phases (phase_log.h) open when the event happened, innermost first, {"filename":
// "bpbench", "line": 0, "name": "<phase>"} (blocks alive at the start: "alive before the step"), so the
// viewer's stack of an allocation reads "chunk 3 < layer 5 backward < forward_backward". The running sum of
// "alloc" minus "free_completed" is the recorder's live bytes at every event: its maximum is the step's peak.
#pragma once

#include <string>

#include "profiles/recorder.h"

namespace bpbench::profiles {

// The pickle's bytes (protocol 2); the timeline's events must be in time order, as the recorder keeps them.
std::string memory_viz_pickle(const Timeline& timeline);

}  // namespace bpbench::profiles
