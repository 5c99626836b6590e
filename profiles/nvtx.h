// nvtx.h: NVTX range push/pop that compile to nothing in CPU builds, so profiling scopes can name ranges
// unconditionally and the same scopes show up on an Nsight Systems timeline when built with CUDA.
#pragma once

// NVTX3 is header-only (it finds the injection library at run time), so it costs no link dependency.
// BPBENCH_WITH_NVTX is set with every CUDA build (scripts/cmake/dependencies.cmake).
#ifdef BPBENCH_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace bpbench::profiles {

#ifdef BPBENCH_WITH_NVTX
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
