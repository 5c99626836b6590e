// cpp_stacks.cpp: cpp_stacks.h through torch's combined traceback (symbolize() names every distinct frame
// once for the whole batch).
#include "profiles/cpp_stacks.h"

#include <fmt/format.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

namespace bpbench::profiles {

std::shared_ptr<c10::GatheredContext> CppStacks::gather() {
  return torch::CapturedTraceback::gather(/*python=*/false, /*script=*/false, /*cpp=*/true);
}

int32_t CppStacks::add(std::shared_ptr<c10::GatheredContext> context) {
  if (!dynamic_cast<torch::CapturedTraceback*>(context.get())) return -1;
  contexts_.push_back(std::move(context));
  return static_cast<int32_t>(contexts_.size() - 1);
}

std::vector<std::vector<CodeFrame>> CppStacks::take_symbolised(std::vector<AllocationEvent>& events) {
  const auto contexts = std::exchange(contexts_, {});
  if (contexts.empty()) return {};
  // One symbolisation of the distinct tracebacks (the CUDA allocator shares one among a block's entries).
  std::unordered_map<const c10::GatheredContext*, size_t> distinct_traceback;
  std::vector<torch::CapturedTraceback*> tracebacks;
  std::vector<size_t> traceback_of_added;
  for (const auto& c : contexts) {
    const auto [it, added] = distinct_traceback.emplace(c.get(), tracebacks.size());
    if (added) tracebacks.push_back(static_cast<torch::CapturedTraceback*>(c.get()));
    traceback_of_added.push_back(it->second);
  }
  torch::SymbolizedTracebacks named;
  try {
    named = torch::symbolize(tracebacks);  // TORCH_SYMBOLIZE_MODE: addr2line (a process per library), ...
  } catch (const std::exception& e) {
    // A step's measurements do not depend on its stacks' names: say why they are missing and go on.
    const std::string why = e.what();
    fmt::print(stderr, "bpbench: the C++ stacks could not be named, the memory_viz pickle has none: {}\n",
               why.substr(0, why.find('\n')));
    for (AllocationEvent& ev : events) ev.cpp_stack = -1;
    return {};
  }
  // Tracebacks from one call site name the same frames: one stack each (the pickle writes each once).
  std::map<std::vector<uint64_t>, int32_t> stack_of_frames;
  std::vector<int32_t> stack_of_traceback;
  std::vector<std::vector<CodeFrame>> stacks;
  for (const auto& frames : named.tracebacks) {
    const auto [it, added] = stack_of_frames.emplace(frames, static_cast<int32_t>(stacks.size()));
    if (added) {
      std::vector<CodeFrame> stack;
      for (const uint64_t f : frames) {
        const auto& frame = named.all_frames.at(f);
        // The unwinder's own frames (innermost) are not the allocation's: the stack starts after them.
        if (frame.funcname.rfind("torch::CapturedTraceback::gather", 0) == 0) {
          stack.clear();
          continue;
        }
        stack.push_back({frame.funcname, frame.filename, static_cast<int64_t>(frame.lineno)});
      }
      stacks.push_back(std::move(stack));
    }
    stack_of_traceback.push_back(it->second);
  }
  for (AllocationEvent& e : events)
    if (e.cpp_stack >= 0)
      e.cpp_stack = stack_of_traceback.at(traceback_of_added.at(static_cast<size_t>(e.cpp_stack)));
  return stacks;
}

}  // namespace bpbench::profiles
