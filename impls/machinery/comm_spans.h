// comm_spans.h: the device seconds of NCCL collectives (comm.h): two timing events on the current stream
// around each, read once the collective has run. Only NCCL collectives are timed this way, and NCCL exists
// only in a CUDA build: comm_spans_cuda.cpp is the real one, comm_spans_nocuda.cpp's (a CPU-only LibTorch)
// is never reached (Communicator::create refuses nccl there).
#pragma once

#include <torch/torch.h>

#include <memory>

namespace bpbench::dist {

struct SpanEvents;  // a start and an end event with timing enabled
struct SpanEventsDeleter {
  void operator()(SpanEvents* e) const;
};
using SpanEventsPtr = std::unique_ptr<SpanEvents, SpanEventsDeleter>;

SpanEventsPtr make_span_events();
void record_start(SpanEvents& e, const torch::Device& device);  // on the device's current stream
void record_end(SpanEvents& e, const torch::Device& device);
bool span_done(const SpanEvents& e);       // the end event has run
double span_seconds(const SpanEvents& e);  // between the two, once done
int visible_gpus();                        // CUDA devices this process sees

}  // namespace bpbench::dist
