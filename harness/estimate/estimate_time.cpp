// estimate_time.cpp: estimate_time.h.
#include "harness/estimate/estimate_time.h"

#include <algorithm>

#include "impls/interface/strategy.h"

namespace bpbench {

double StepTime::overlapped_s() const {
  return std::max({compute_s, nvlink_s + ib_s, pcie_s});
}

namespace {

bool crosses_nodes(const CollectiveEstimate& c, const EstimateInput& in, const TimeAssumptions& a) {
  return (c.group == CommGroup::ulysses ? c.group_ranks : in.ranks) > a.gpus_per_node;
}

}  // namespace

StepTime estimate_step_time(const EstimateInput& in, const FlopCounts& flops, const CommEstimate& step_comm,
                            const CommEstimate& optimizer_comm, const MemoryEstimate& memory,
                            const TimeAssumptions& a) {
  const double micro = in.train ? static_cast<double>(in.train->grad_accum) : 1.0;
  StepTime t;
  t.model_flops = micro * static_cast<double>(flops.model());
  t.compute_s = micro * static_cast<double>(flops.hardware()) / (a.hfu * a.peak_tflops * 1e12);
  auto add = [&](const CommEstimate& comm, double times) {
    for (const auto& c : comm.collectives) {
      const bool ib = crosses_nodes(c, in, a);
      (ib ? t.ib_s : t.nvlink_s) += times * c.wire_bytes() / ((ib ? a.ib_gbps : a.nvlink_gbps) * 1e9);
    }
  };
  add(step_comm, micro);
  add(optimizer_comm, 1.0);
  t.pcie_s = static_cast<double>(memory.offload_traffic_bytes) / (a.pcie_gbps * 1e9);  // micro-batches in
  const bool splits_sequence = make_strategy(in.impl)->sequence_parallel() && in.ranks > 1;
  t.tokens_per_gpu =
      static_cast<int64_t>(micro) * in.sequences * in.seq_len / (splits_sequence ? in.ranks : 1);
  return t;
}

}  // namespace bpbench
