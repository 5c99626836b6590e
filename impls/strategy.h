// strategy.h: the interface every backward strategy implements, and the registry that finds them by name.
//
// A strategy runs one forward + backward of a model over a batch under an objective and leaves the exact
// gradient of every trainable parameter in its .grad (accumulated into what is there: the runner zeroes or
// pre-allocates them). It never writes results and never measures: the runner does, around it.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/model/model.h"
#include "harness/objectives/batch.h"
#include "harness/objectives/objective.h"

namespace bpbench {

struct Partitioning {
  int64_t rows = 0;         // `partition`: rows per chunk of a transformer layer (c)
  int64_t logits_rows = 0;  // `logits_partition`: rows per chunk of the LM head
};

class CheckpointStore;  // impls/offload.h

struct StepInputs {
  Model& model;
  const Batch& batch;
  const Objective& objective;
  Partitioning partition;
  // Where a strategy that uses_offload() keeps its layer checkpoints (the runner's, one per cell, so host
  // buffers outlive a step); null: on the device.
  CheckpointStore* checkpoints = nullptr;
};

// What a strategy may want to know to refuse a cell before it runs.
struct CellTraits {
  std::string objective;
  int64_t world_size = 1;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  // A reason when the strategy cannot run this cell (the runner records status "skipped" with it).
  virtual std::optional<std::string> unsupported(const CellTraits&) const { return std::nullopt; }
  // Whether `partition` / `logits_partition` change what it does (the runner fills sensible values
  // otherwise).
  virtual bool uses_partition() const { return false; }
  virtual bool uses_logits_partition() const { return false; }
  // Whether it keeps its layer checkpoints in StepInputs::checkpoints, so `offload` applies to it.
  virtual bool uses_offload() const { return false; }
  // Forward and backward; returns the loss (0-dim, detached).
  virtual torch::Tensor forward_backward(const StepInputs& in) const = 0;
};

std::unique_ptr<Strategy> make_strategy(const std::string& name);  // throws listing the valid names
std::vector<std::string> strategy_names();
std::vector<std::string> offloading_strategy_names();  // those whose uses_offload() is true

// Peers: implementations outside bpbench whose results bpbench reads (report, compare) but never runs,
// written in bpbench's results schema by the scripts of reports/peers/: "hf-checkpoint" and "hf"
// (transformers, SDPA, with and without gradient checkpointing; hf_checkpoint.py), "streambp-official" (the
// authors' StreamBP from PyPI; streambp_official.py), "liger-flce" and "cce" (fused linear cross-entropy
// kernels on transformers' checkpointing; liger_flce.py, cce.py).
std::vector<std::string> peer_names();
bool is_peer(const std::string& impl);
// strategy_names() then peer_names(): what a results file's impl axis may hold.
std::vector<std::string> recorded_impl_names();

}  // namespace bpbench
