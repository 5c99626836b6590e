// comm_spans_nocuda.cpp: comm_spans.h for a CPU-only LibTorch, where no NCCL collective exists to time.
#include "impls/machinery/comm_spans.h"

namespace bpbench::dist {

struct SpanEvents {};

void SpanEventsDeleter::operator()(SpanEvents* e) const {
  delete e;
}

SpanEventsPtr make_span_events() {
  return SpanEventsPtr(new SpanEvents());
}
void record_start(SpanEvents&, const torch::Device&) {}
void record_end(SpanEvents&, const torch::Device&) {}
bool span_done(const SpanEvents&) {
  return true;
}
double span_seconds(const SpanEvents&) {
  return 0.0;
}
int visible_gpus() {
  return 0;
}

}  // namespace bpbench::dist
