// bench_head.cpp: the LM head and SFT loss, forward + backward, on the `small` preset (V = 32000, d = 256) in
// float32, from the last layer's output x (1, T, d) to dL/dx and the head's weight gradients:
//
//   Full:    final norm, lm_head over all T rows, cross-entropy over the (1, T, V) logits, backward: what
//            `plain` and `checkpoint` (Hugging Face's head) do. Logits, log-softmax and their gradients
//            are all (1, T, V).
//   Chunked: streamed_head_backward (impls/machinery/layerwise.h), used by streambp, mst and
//   checkpoint-chunked-head:
//            logits and their gradient exist for c_l rows at a time.
#include <memory>

#include "harness/objectives/objective.h"
#include "impls/machinery/layerwise.h"
#include "tests/benchmarks/bench_common.h"

namespace bpbench::bench::bench_head {
namespace {

struct HeadInputs {
  std::unique_ptr<Objective> objective = make_objective("sft");
  Batch batch;
  torch::Tensor x;  // (1, T, d)
};

HeadInputs head_inputs(Model& m, int64_t T) {
  HeadInputs in;
  BatchSpec spec;
  spec.seq_len = T;
  spec.vocab = m.config.vocab;
  in.batch = in.objective->make_batch(spec, m, T);  // SFT: synthetic tokens, no model pass
  in.x = hidden_states(m, T, 3).requires_grad_(true);
  return in;
}

void BM_HeadFull(benchmark::State& state) {
  const int64_t T = state.range(0);
  Model& m = small_model();
  auto in = head_inputs(m, T);
  PeakCounter peak;
  for (auto _ : state) {
    // Two statements, as in checkpoint.cpp: the logits temporary dies before backward (log_softmax keeps its
    // own output), so only what autograd saved is alive during backward.
    auto loss = in.objective->loss(m.head_logits(in.x), in.batch);  // logits (1, T, V)
    loss.backward();
    benchmark::DoNotOptimize(in.x.grad().data_ptr());
    in.x.mutable_grad().reset();  // dx is this iteration's output, as streamed_head_backward's is
  }
  peak.report(state);
  report_tokens(state, T);
}

void BM_HeadChunked(benchmark::State& state) {
  const int64_t T = state.range(0), rows = state.range(1);
  Model& m = small_model();
  auto in = head_inputs(m, T);
  PeakCounter peak;
  for (auto _ : state) {
    auto r = streamed_head_backward(m, in.x, in.batch, *in.objective, rows);  // logits (1, c_l, V) per chunk
    benchmark::DoNotOptimize(r.dx.data_ptr());
  }
  peak.report(state);
  report_tokens(state, T);
}

BENCHMARK(BM_HeadFull)->Apply(whole_sizes);
BENCHMARK(BM_HeadChunked)->Apply([](benchmark::internal::Benchmark* b) { chunked_sizes(b, "c_l"); });

}  // namespace
}  // namespace bpbench::bench::bench_head
