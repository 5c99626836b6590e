// version.h: what `bpbench --version` prints, the first thing a bug report needs: bpbench's version, the
// commit it was built from, and the LibTorch, CUDA and compiler it was built with.
#pragma once

#include <string>

namespace bpbench {

// Several lines, each "what: value", ending in a newline.
std::string version_text();

}  // namespace bpbench
