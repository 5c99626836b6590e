// offload_nocuda.cpp: a CPU-only LibTorch has no pinned CUDA store (offload.h).
#include <stdexcept>

#include "impls/machinery/offload.h"

namespace bpbench {

std::unique_ptr<CheckpointStore> make_pinned_checkpoint_store() {
  throw std::runtime_error("offload on CUDA needs a CUDA-enabled LibTorch build");
}

}  // namespace bpbench
