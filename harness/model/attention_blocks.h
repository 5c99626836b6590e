// attention_blocks.h: block sizes the attention kernels run a gradient sink's backward in, shared by the
// kernels (attention_cpu.cpp, attention_gpu.cpp) and the estimate's terms for them (memory_terms.h), so the
// two cannot drift apart.
#pragma once

#include <cstdint>

namespace bpbench {

// A chunk's backward into a gradient sink (ops.h: KvGradSink) takes its prefix keys in blocks of
// max(c, kMinSinkKeyBlock) on the CPU: pieces of a constant size, not a per-token one, and few enough calls
// that the kernel's fixed cost per call stays out of the step time (blocks of 256 keys cost StreamBP 16% of
// its step on `small` at T = 8192, c = 256).
inline constexpr int64_t kMinSinkKeyBlock = 2048;
// Flash's backward on CUDA (attention_gpu.cpp) takes larger blocks: a kernel call per block costs a launch
// and a pass over dO, and small blocks would leave the GPU idle; its per-block buffers (dK, dV expanded to
// Hq heads for GQA) stay a constant, not a per-token, cost.
inline constexpr int64_t kCudaSinkKeyBlock = 8192;

}  // namespace bpbench
