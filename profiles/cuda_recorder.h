// cuda_recorder.h: the CUDA device's Recorder (recorder.h), read from c10's CUDA caching allocator.
//
// One interface, two implementations: cuda_recorder_cuda.cpp (a CUDA-enabled LibTorch) and
// cuda_recorder_nocuda.cpp (a CPU-only one, where asking for it throws).
//
// What it reports, and why:
// - live and peak bytes are the allocator's own "allocated_bytes" statistics (current and peak, reset per
//   cell): the figure torch.cuda.max_memory_allocated() returns, the one the paper and Hugging Face report.
//   Reserved bytes (allocated + the cache's slack) go beside it as reserved_peak_bytes().
// - The category breakdown and the timeline come from the allocator's trace hook: every block allocated or
//   freed is charged to the MemoryScope category current when it was allocated (memory.h), as on the CPU.
//   Phases come from the same PhaseScopes, through the phase log (phase_log.h) started with the timeline.
// - A budget is the allocator's memory fraction (budget / device memory): it caps reserved bytes, so a cell
//   may fail somewhat below the budget in allocated bytes (the cache's slack counts against it).
// - On an allocation failure the allocator's state is written where set_oom_snapshot_path() says (the
//   memory_viz pickle); release_cached() empties the cache afterwards.
#pragma once

#include "profiles/recorder.h"

namespace bpbench::profiles {

// The process's CUDA recorder (device 0). Throws std::runtime_error (no_gpu_reason(), cuda_build.h) where no
// GPU is usable or the build has no CUDA.
Recorder& cuda_recorder();

}  // namespace bpbench::profiles
