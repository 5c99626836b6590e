// estimate_time.h: a step's time on GPUs by estimate. Three terms, each at a stated rate: the FLOPs the
// strategy runs (estimate_flops.h) at a hardware FLOP utilisation of the GPU's peak, the collectives' bytes
// (estimate_comm.h) over NVLink within a node and InfiniBand across nodes, the offload copies over PCIe. No
// term is measured; every rate is printed beside the answer. docs/estimate.md, "Time per step".
#pragma once

#include <cstdint>
#include <string>

#include "harness/estimate/estimate.h"
#include "harness/estimate/estimate_comm.h"
#include "harness/model/flop_count.h"

namespace bpbench {

struct TimeAssumptions {
  std::string gpu;           // the peak's row (harness/run/gpu_peak.h), e.g. "H100 SXM"
  double peak_tflops = 0;    // dense, in the model dtype's matmul precision
  double hfu = 0.4;          // the fraction of the peak the kernels reach on every FLOP they run
  double nvlink_gbps = 450;  // GB/s a GPU sends within its node (NVLink 4, per direction)
  double ib_gbps = 50;       // GB/s a GPU sends to another node (one 400 Gb/s NDR port a GPU)
  double pcie_gbps = 64;     // GB/s between a GPU and its host (PCIe 5.0 x16, per direction)
  int64_t gpus_per_node = 8;
};

struct StepTime {
  double compute_s = 0, nvlink_s = 0, ib_s = 0, pcie_s = 0;
  int64_t tokens_per_gpu = 0;  // of the step on one rank: its rows (data parallel) or its share of T
  double model_flops = 0;      // the step's, of one rank
  double serial_s() const { return compute_s + nvlink_s + ib_s + pcie_s; }  // nothing overlaps
  double overlapped_s() const;  // everything overlaps the longest term: a lower bound
  double tokens_per_s_per_gpu() const { return tokens_per_gpu / serial_s(); }
  double mfu(const TimeAssumptions& a) const { return model_flops / (serial_s() * a.peak_tflops * 1e12); }
};

// A training step of `in` (its grad_accum micro-batches; in.train unset: one forward + backward): `flops`
// and `step_comm` of one micro-batch, `optimizer_comm` once, the offload copies of `memory`
// (offload_traffic_bytes, every micro-batch's). A collective crosses nodes where its group does: the world
// and the mesh's rings when ranks > gpus_per_node, a Ulysses group when it is larger than a node. Not
// modelled: each call's latency, the optimizer step's own time (on the host's CPU when offloaded), the host's
// side of a copy.
StepTime estimate_step_time(const EstimateInput& in, const FlopCounts& flops, const CommEstimate& step_comm,
                            const CommEstimate& optimizer_comm, const MemoryEstimate& memory,
                            const TimeAssumptions& a);

}  // namespace bpbench
