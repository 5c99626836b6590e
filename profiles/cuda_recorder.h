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
//   freed is charged to the MemoryScope category current when it was allocated (memory.h), as on the CPU,
//   in the allocator's block sizes (block_ledger.h), so the categories sum to the allocated bytes.
//   Phases come from the same PhaseScopes, through the phase log (phase_log.h) started with the timeline.
// - A budget is the allocator's memory fraction (budget / device memory): it caps reserved bytes, so a cell
//   may fail somewhat below the budget in allocated bytes (the cache's slack counts against it). The
//   allocator checks it only when it reserves a new segment, which is why the runner empties the cache
//   before it sets one.
// - While a timeline records, the trace hook also keeps every action of the allocator as an event (in block
//   sizes, settled as the categories' are), the blocks alive at its start, and its segments at the stop:
//   memory_viz.h writes them as the memory_viz pickle. With record_cpp_stacks, the allocator's history is
//   on from start_timeline() to stop_timeline(), whichever way the step ended, to record each allocation's
//   C++ stack (cpp_stacks.h); its own ring of entries is not used.
// - On an allocation failure the allocator's own state is written where set_oom_snapshot_path() says (a
//   memory_viz pickle, no trace); release_cached() empties the cache afterwards.
#pragma once

#include "profiles/recorder.h"

namespace bpbench::profiles {

// The CUDA recorder of the current device (c10::cuda::current_device(): a rank of a multi-GPU run asks after
// its communicator has selected the rank's GPU), one per device for the process's life. Throws
// std::runtime_error (no_gpu_reason(), cuda_build.h) where no GPU is usable or the build has no CUDA.
Recorder& cuda_recorder();

}  // namespace bpbench::profiles
