// bench_main.cpp: bpbench_bench's main: Google Benchmark's flags plus --torch_threads=N (default 1, so runs
// are reproducible on a shared machine), with the tracking allocator installed before the first tensor.
#include <benchmark/benchmark.h>
#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "profiles/heap_policy.h"
#include "tests/benchmarks/bench_common.h"

namespace bpbench::bench {
namespace {
c10::Allocator* g_raw_cpu_allocator = nullptr;
}  // namespace

c10::Allocator* raw_cpu_allocator() {
  return g_raw_cpu_allocator;
}

}  // namespace bpbench::bench

int main(int argc, char** argv) {
  bpbench::profiles::keep_freed_heap_memory();  // as bpbench's own runs (profiles/heap_policy.h)
  int threads = 1;
  std::vector<char*> args;
  const char* flag = "--torch_threads=";
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && std::strncmp(argv[i], flag, std::strlen(flag)) == 0) {
      threads = std::atoi(argv[i] + std::strlen(flag));
      if (threads < 1) {
        std::fprintf(stderr, "bpbench_bench: error: --torch_threads needs a positive integer, got '%s'\n",
                     argv[i] + std::strlen(flag));
        return 2;
      }
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  args.push_back(nullptr);

  // Remember the allocator the tracker will wrap, then install the tracker. If it was already installed, the
  // allocator found is the tracker itself and there is no untracked baseline to compare against.
  c10::Allocator* before = c10::GetCPUAllocator();
  bpbench::profiles::MemoryRecorder::instance();
  if (c10::GetCPUAllocator() != before) bpbench::bench::g_raw_cpu_allocator = before;

  torch::set_num_threads(threads);
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::AddCustomContext("torch_threads", std::to_string(threads));
  benchmark::AddCustomContext("model", "small (float32)");
  benchmark::AddCustomContext("peak_bytes", "LibTorch CPU tensor bytes above the live bytes at start");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
