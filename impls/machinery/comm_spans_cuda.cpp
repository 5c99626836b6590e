// comm_spans_cuda.cpp: comm_spans.h with CUDA events.
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include "impls/machinery/comm_spans.h"

namespace bpbench::dist {

struct SpanEvents {
  c10::cuda::CUDAEvent start{cudaEventDefault}, end{cudaEventDefault};  // timing enabled
};

void SpanEventsDeleter::operator()(SpanEvents* e) const {
  delete e;
}

SpanEventsPtr make_span_events() {
  return SpanEventsPtr(new SpanEvents());
}
void record_start(SpanEvents& e, const torch::Device& device) {
  e.start.record(c10::cuda::getCurrentCUDAStream(device.index()));
}
void record_end(SpanEvents& e, const torch::Device& device) {
  e.end.record(c10::cuda::getCurrentCUDAStream(device.index()));
}
bool span_done(const SpanEvents& e) {
  return e.end.query();
}
double span_seconds(const SpanEvents& e) {
  return static_cast<double>(e.start.elapsed_time(e.end)) / 1000.0;
}
int visible_gpus() {
  return static_cast<int>(c10::cuda::device_count());
}

}  // namespace bpbench::dist
