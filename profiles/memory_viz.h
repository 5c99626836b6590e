// memory_viz.h: a step's allocator events as the pickle PyTorch's memory viewer reads
// (pytorch.org/memory_viz, or `python -m torch.cuda._memory_viz trace_plot FILE -o FILE.html`): the structure
// torch.cuda.memory._snapshot() returns, from a recorder's timeline (recorder.h: Timeline::events), CPU or
// CUDA.
//
//   {"device_traces": [[...]], "segments": [...]}
//   device_traces[0]: each event {"action", "addr", "size", "stream", "time_us" (Unix microseconds, as
//             PyTorch's), "frames"} (an "oom" has "device_free" for "addr"); the blocks alive at the start
//             come first, allocated at the timeline's start. CUDA's events are the caching allocator's own
//             actions. On the CPU (blocks_are_segments: it caches nothing) an allocation is "segment_alloc"
//             then "alloc", a free "free_requested", "free_completed" then "segment_free".
//   segments: the segments when the timeline stopped (CPU: one a live block), {"device": 0, "address",
//             "total_size", "allocated_size", "active_size", "requested_size", "stream", "segment_type",
//             "frames": [], "blocks": [{"address", "size", "requested_size", "state", "frames"}]}
//
// Sizes are block sizes, what the recorder's peak counts (CUDA: the allocator's rounded blocks, where
// PyTorch's own pickle names the request), so the running sum of "alloc" minus "free_completed" is the
// recorder's live bytes at every event and its maximum the step's peak (on CUDA where no free waits on
// another stream: such a block leaves allocated_bytes at its "free_requested").
//
// Frames are bpbench's phases (phase_log.h) open when the event happened, innermost first, {"filename":
// "bpbench", "line": 0, "name": "<phase>"} (blocks alive at the start: "alive before the step"), so the
// viewer's stack of an allocation reads "chunk 3 < layer 5 backward < forward_backward"; then, where the
// timeline recorded one, the event's C++ stack (cpp_stacks.h), innermost first. A live block's frames are
// its allocation's.
//
// No "category" key, though the viewer can colour by one: pytorch.org/memory_viz's MemoryViz.js (main, read
// 2026-11-28) throws while loading any trace whose categories do not include "unknown" (annotate_snapshot
// pushes it onto `snapshot.categores`, a typo), so no view would open. The categories are in the timeline's
// own files and the report.
#pragma once

#include <string>

#include "profiles/recorder.h"

namespace bpbench::profiles {

// The pickle's bytes (protocol 2); the timeline's events must be in time order, as the recorder keeps them.
std::string memory_viz_pickle(const Timeline& timeline);

}  // namespace bpbench::profiles
