// nvtx.h: NVTX range push/pop that compile to nothing in CPU builds, so profiling scopes can name ranges
// unconditionally and the same scopes show up on an Nsight Systems timeline when built with CUDA.
#pragma once

// NVTX3 is header-only (it finds the injection library at run time), so it costs no link dependency; it is
// only used where the CUDA toolkit headers are actually on the include path.
#if defined(BPBENCH_WITH_CUDA) && defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define BPBENCH_HAVE_NVTX 1
#endif
#endif

namespace bpbench::profiles {

#ifdef BPBENCH_HAVE_NVTX
inline void nvtx_push(const char* name) {
  nvtxRangePushA(name);
}
inline void nvtx_pop() {
  nvtxRangePop();
}
#else
inline void nvtx_push(const char* /*name*/) {}
inline void nvtx_pop() {}
#endif

}  // namespace bpbench::profiles
