// compat.h: the one place where LibTorch 1.13 (Debian, CPU) and 2.x (PyTorch wheel, CUDA) differ.
//
// Everything else in bpbench is written against these few functions. If you port to a new LibTorch, this file
// and nothing else should change.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <string>

#define BPBENCH_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace bpbench::compat {

inline std::string torch_version() {
  return TORCH_VERSION;
}

// The out-of-memory error type. Both versions have c10::OutOfMemoryError; CUDA's allocator throws it and so
// does our CPU tracking allocator on a budget overrun, so the runner catches exactly one type.
using OutOfMemoryError = c10::OutOfMemoryError;

// True when the build can talk to a GPU at run time (compiled with CUDA and a device is present).
inline bool cuda_available() {
  return torch::cuda::is_available();
}

}  // namespace bpbench::compat
