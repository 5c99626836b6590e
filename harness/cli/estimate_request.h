// estimate_request.h: what `bpbench estimate` was asked (its flags, read and checked), and the answers:
// the estimate at each (impl, T), and the longest T per impl within each memory budget. The text, JSON and
// plot outputs (estimate_text.cpp, estimate_json.cpp, estimate_plot.cpp) print these and compute nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/estimate/estimate.h"
#include "harness/estimate/estimate_comm.h"
#include "harness/estimate/estimate_inverse.h"
#include "harness/estimate/estimate_time.h"
#include "harness/model/flop_count.h"

namespace bpbench {

// A memory budget the longest lengths are found for: a GPU of the table (accelerators.h) less what is held
// back, or --budget's bytes as they are.
struct MemoryBudget {
  std::string key;            // "h100-sxm", or "budget" for --budget
  std::string label;          // "H100 SXM 80GB", or "--budget"
  int64_t memory_bytes = 0;   // the device's total (--budget: the budget)
  int64_t reserve_bytes = 0;  // held back of it (--budget: 0)
  std::string note;           // accelerators.h's note, "" if none
  int64_t bytes() const { return memory_bytes - reserve_bytes; }
};

struct EstimateRequest {
  std::string model;         // as given: a preset, a Hugging Face model directory or a config.json
  std::string source;        // "preset" or "hf-config"
  std::string dtype_source;  // why in.dtype: "--dtype", "the CUDA default", "config.json's dtype", ...
  EstimateInput in;          // config, dtype, objective, partitions, ...; impl and seq_len set per answer
  int64_t batch = 1, group = 8;
  std::vector<std::string> impls;
  std::vector<int64_t> seq_lens;       // --seq-len (may be empty when budgets are given)
  std::vector<MemoryBudget> budgets;   // --budget / --gpu (empty: no longest lengths)
  std::optional<int64_t> host_budget;  // offload: pinned host bytes allowed (none: not bounded)
  std::string host_budget_source;      // why that host budget: "--host-budget", "this machine's ...", ...
  int64_t granularity = 1024, upper = int64_t{1} << 24;
  bool verbose = false, json = false;
  std::string plot_file;  // --plot FILE.png ("" none)
  // One --gpu whose peak is known (harness/run/gpu_peak.h): the rates the time per step is estimated at
  // (--hfu, --nvlink-gbps, --ib-gbps, --pcie-gbps, --gpus-per-node); none: no time estimate.
  std::optional<TimeAssumptions> time;
};

// Reads the flags (estimate_command.cpp's help lists them). Throws std::invalid_argument, one line naming the
// flag and its valid values, for anything it cannot take, before anything is estimated.
EstimateRequest parse_estimate_request(const std::vector<std::string>& args);

struct EstimateAtLength {
  std::string impl;
  int64_t seq_len = 0;
  MemoryEstimate memory;
  std::optional<FlopCounts> flops;  // none where the counts would pass int64 (flops_fit_in_int64)
  CommEstimate comm;                // one rank's collectives a micro-batch (empty: one process)
  CommEstimate optimizer_comm;      // a training step's optimizer's, once a step
  std::optional<StepTime> time;     // with EstimateRequest::time and the FLOPs counted
};

struct LongestFor {
  size_t budget = 0;  // index into EstimateRequest::budgets
  std::string impl;
  LongestLength longest;
};

struct EstimateAnswers {
  std::vector<EstimateAtLength> at_lengths;  // seq_len-major, impls in order
  std::vector<LongestFor> longest;           // budget-major, impls in order
};

// Every answer the request asks for; throws what estimate_peak throws (before anything is printed).
EstimateAnswers answer_estimate(const EstimateRequest& request);

// Whether the step's FLOP counts stay well inside int64 (estimate_flops counts in int64): a bound of the
// attention's and the matmuls' work, every pass included, at most half of int64's range. Qwen3-8B: up to
// T = 512k (1M is past it).
bool flops_fit_in_int64(const EstimateInput& in);

// "float32", "bfloat16" or "float64": the names --dtype takes, for the outputs.
const char* dtype_flag_name(torch::ScalarType dtype);

// The request's input at one (impl, T): partitions clamped to T as the estimate clamps them.
EstimateInput input_at(const EstimateRequest& request, const std::string& impl, int64_t seq_len);

}  // namespace bpbench
