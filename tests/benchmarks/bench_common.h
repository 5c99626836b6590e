// bench_common.h: what the micro-benchmarks share: the cached `small` model, its input tensors, the peak
// counter read from the tracking allocator, and LibTorch's own CPU allocator as it was before bpbench wrapped
// it.
#pragma once

#include <benchmark/benchmark.h>
#include <c10/core/Allocator.h>
#include <torch/torch.h>

#include <cstdint>

#include "harness/model/model.h"
#include "profiles/memory.h"

namespace bpbench::bench {

// c10's CPU allocator as main() found it, before MemoryRecorder installed the tracking allocator over it: the
// allocator the tracker delegates to. nullptr when the tracker was already installed (no untracked baseline).
c10::Allocator* raw_cpu_allocator();

// The `small` preset (V = 32000, d = 256, Hq = 4, Hkv = 2, hd = 64) in float32, built once. Its gradients are
// pre-allocated (zeros) as in the runner, so a step accumulates into them and they are base memory, not peak.
inline Model& small_model() {
  static Model* model = [] {
    profiles::MemoryScope scope(profiles::Category::params);
    auto* m = new Model(Model::random(find_model_preset("small"), torch::TensorOptions().dtype(torch::kFloat),
                                      /*seed=*/0));
    torch::NoGradGuard no_grad;
    for (const auto& p : m->trainable_parameters()) p.tensor.mutable_grad() = torch::zeros_like(p.tensor);
    return m;
  }();
  return *model;
}

// Seeded (1, T, d) float32 activations for one sequence of T tokens.
inline torch::Tensor hidden_states(const Model& m, int64_t T, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn({1, T, m.config.hidden}, torch::TensorOptions().dtype(m.dtype()));
}

// Sets state.counters["peak_bytes"]: the highest live CPU-tensor bytes reached while the benchmark ran, above
// what was live when it was constructed (model, gradients, inputs). Every iteration does the same work and
// frees what it made, so this is the peak of one iteration. BLAS scratch is not seen (memory.h).
class PeakCounter {
 public:
  PeakCounter() : rec_(profiles::MemoryRecorder::instance()) {
    rec_.reset_peak();
    base_ = rec_.live_bytes();
  }
  void report(benchmark::State& state) const {
    state.counters["peak_bytes"] =
        benchmark::Counter(static_cast<double>(rec_.peak_bytes() - base_), benchmark::Counter::kDefaults,
                           benchmark::Counter::kIs1024);
  }

 private:
  profiles::MemoryRecorder& rec_;
  int64_t base_ = 0;
};

// state.counters["tokens"]: tokens of the sequence processed per second (T per iteration).
inline void report_tokens(benchmark::State& state, int64_t T) {
  state.counters["tokens"] =
      benchmark::Counter(static_cast<double>(T), benchmark::Counter::kIsIterationInvariantRate);
}

// The sizes every whole-vs-chunked pair runs at: T in {512, 1024, 2048}, chunks of 128 and 512 rows (named
// `chunk_name` in the output), milliseconds of wall time.
inline void whole_sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("T")->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
}
inline void chunked_sizes(benchmark::internal::Benchmark* b, const char* chunk_name) {
  b->ArgNames({"T", chunk_name})
      ->ArgsProduct({{512, 1024, 2048}, {128, 512}})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

}  // namespace bpbench::bench
