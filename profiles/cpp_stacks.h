// cpp_stacks.h: the C++ stacks of a timeline's allocations (Timeline::cpp_stacks), for the memory snapshot.
//
// PyTorch's own unwinder gathers them (torch::CapturedTraceback, the one behind
// torch.cuda.memory._record_memory_history(stacks="all")): the CPU recorder asks for a stack at each
// allocation, the CUDA allocator's history records one per trace entry. Unwinding is cheap enough to do
// per allocation; naming the frames is not, so it happens once, for every distinct address, when the
// timeline stops, by PyTorch's symboliser: addr2line by default (function, file and line from the symbol
// table and debug information, bpbench's static functions included); TORCH_SYMBOLIZE_MODE=dladdr is faster
// but names only exported functions ("??" for most of bpbench's). Where naming fails the stacks are
// dropped with a line on stderr: the step's measurements do not depend on them.
#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "profiles/recorder.h"

namespace bpbench::profiles {

class CppStacks {
 public:
  // The calling thread's stack, unwound now.
  static std::shared_ptr<c10::GatheredContext> gather();

  // Keeps `context` (a torch::CapturedTraceback; others are not stacks and count as none) and returns the
  // index its frames will have in take_symbolised(); -1 where there is no stack.
  int32_t add(std::shared_ptr<c10::GatheredContext> context);

  // Every stack added since the last take, symbolised (innermost frame first) and each distinct one once;
  // rewrites the events' cpp_stack (add()'s indices) to index the returned stacks. Then holds none.
  std::vector<std::vector<CodeFrame>> take_symbolised(std::vector<AllocationEvent>& events);

 private:
  std::vector<std::shared_ptr<c10::GatheredContext>> contexts_;
};

}  // namespace bpbench::profiles
