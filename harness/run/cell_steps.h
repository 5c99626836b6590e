// cell_steps.h: the steps a cell's measurement is made of. A single-step cell (cell_in_process.cpp) runs, in
// this order: warm_up, memory_step (measured, never timed), timed_steps, then its gradient reference; a
// training run (measure.train, train_loop.h) shares the pieces around them: fresh gradients before each step
// (prepare_grads), one MeasuredRegion over the run, start_clock before each step.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "harness/model/flop_count.h"
#include "harness/model/model.h"
#include "harness/run/results.h"
#include "harness/run/runner.h"
#include "impls/interface/strategy.h"
#include "impls/machinery/comm.h"
#include "profiles/recorder.h"
#include "profiles/step_timer.h"

namespace bpbench {

void sync_device(const torch::Device& device);

// Before each step: a single-process strategy accumulates into zeroed, pre-allocated gradients (as a
// training loop that zeroes rather than frees them: they are base). A distributed one owns its gradient
// buckets and starts from none.
void prepare_grads(const std::vector<NamedParameter>& params, bool distributed);

// The measured region of a cell: one memory step, or a whole training run. Made on entry: an empty cache
// (blocks cached by a warm-up would be reused without the budget's check, which a caching allocator makes
// only when it reserves a segment, so a step over the budget is "oom" here exactly as in a max-length probe,
// which starts with none), fresh peaks, the bytes live now as base, the budget on. end() reads the high
// points: call it where the region ends and where it runs out of memory alike. The destructor lifts the
// budget, last (after the guards made inside the region: tests/run/test_runner_order.cpp) and on every exit
// path, or the reference run and the next cell would inherit it.
class MeasuredRegion {
 public:
  MeasuredRegion(profiles::Recorder& recorder, std::optional<int64_t> budget_bytes, bool offloads,
                 MemoryResult& mem);
  ~MeasuredRegion();
  MeasuredRegion(const MeasuredRegion&) = delete;
  MeasuredRegion& operator=(const MeasuredRegion&) = delete;

  void end();  // the peaks into `mem`

 private:
  profiles::Recorder& recorder_;
  bool offloads_, budgeted_;
  MemoryResult& mem_;
};

// Clock on: the device's queued work done first (CUDA), so a step's time is its own.
void start_clock(const torch::Device& device, profiles::StepTimer& timer);

// Median, min, max and spread of the timed steps; tokens per second of a step of `step_tokens` tokens.
TimeResult time_stats(std::vector<double> runs, int64_t warmup, int64_t step_tokens);

// What one step of a single-step cell needs: the strategy and its inputs, the parameters whose gradients
// each step starts from, and the clock.
struct CellStep {
  const Strategy& strategy;
  const StepInputs& in;
  std::vector<NamedParameter> params;
  torch::Device device;
  profiles::StepTimer& timer;
  bool distributed;
  dist::Communicator* comm;  // every rank starts each step together; null: one process
};

// `runs` untimed, unmeasured steps: caches and offload's host buffers settle, lazy initialisation is done.
// FLOPs are counted on the first step of all, into `flops` while it is empty (every step runs the same ops).
double warm_up(const CellStep& s, int64_t runs, std::optional<FlopCounts>& flops);

// The one step measured for memory: base at its start, the peak under the budget, the timeline, snapshot and
// device activity where the scenario asks. Never timed: the recorder's bookkeeping, CUPTI and an emptied
// cache would each slow it. On an exception (out of memory) it records where the step stood in `r.memory`,
// then rethrows. Returns the step's loss.
double memory_step(const CellStep& s, const CellJob& job, profiles::Recorder& rec, bool offloads,
                   std::optional<FlopCounts>& flops, MemoryResult& mem, CellResult& r);

// `repeat` steps with only the clock around them (CUDA: events, synchronised before each start); their
// seconds appended to `seconds`. Returns the last step's loss.
double timed_steps(const CellStep& s, int64_t repeat, std::vector<double>& seconds);

}  // namespace bpbench
