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

#include "harness/model/memory_terms.h"
#include "harness/model/model.h"
#include "harness/objectives/batch.h"
#include "harness/objectives/objective.h"

namespace bpbench {

struct Partitioning {
  int64_t rows = 0;         // `partition`: rows per chunk of a transformer layer (c)
  int64_t logits_rows = 0;  // `logits_partition`: rows per chunk of the LM head
};

class CheckpointStore;  // impls/machinery/offload.h

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
  const ModelConfig* model = nullptr;  // the cell's model, where it could be read
  int64_t seq_len = 0;                 // T; 0 where a max-length search finds it
  bool router_balance = false;  // the routers' load-balancing loss is on (harness/model/router_balance.h)
};

// Where a strategy runs the model's work again, for the FLOP estimate (harness/estimate/estimate_flops.h):
// every strategy runs one forward with grad of the layers and the head and its backward; these say what it
// adds.
struct FlopSchedule {
  bool attention_by_partition = false;  // attention with grad in calls of `partition` queries (else all T);
                                        // the ring's: its pairs in tiles of `partition` rows (else whole)
  bool recomputes_layers = false;  // every layer once more without grad (its checkpointed forward), in the
                                   // same query blocks as its attention with grad
  bool recomputes_head = false;    // the head once more without grad, for every objective (MsT's loss sums)
  bool recomputes_mlp = false;     // every MLP once more without grad (MsT's mini-sequence forward)
  bool recomputes_kv = false;      // every layer's k and v projections once more without grad (StreamBP's
                                   // K and V values, made before its chunks recompute their rows' graph)
  bool streams_head = false;       // the head in logits_partition rows: DPO, whose loss needs the sequence
                                   // sums first, runs it once more without grad
  bool recomputes_q = false;       // every layer's q projection once more without grad (streambp-ulysses'
                                   // q, k, v values before their exchange)
  bool recomputes_attention = false;  // every layer's attention once more without grad, in the same blocks
                                      // (streambp-ulysses' attention output before its MLP chunks)
  bool ring_attention = false;  // a rank's 2b zigzag rows, every head, attention round the ring of ranks
                                // (impls/machinery/ring_attention.h: ring_attention_pairs)
};

// What a distributed strategy sends besides its gradient groups and ZeRO-3's layer gathers, for the
// collective estimate (harness/estimate/estimate_comm.h). Each layer's attention runs three times on a rank:
// the no-grad forward, again with grad, and its backward.
struct CommSchedule {
  enum class Exchange {
    none,     // data parallel: nothing but the gradients (and zero3's gathers)
    ulysses,  // q, k, v to the heads and o back to the rows, around each of the three (all_to_all)
    ring      // the K/V pair round the ring in each, and the backward's dK/dV (send_recv)
  };
  Exchange exchange = Exchange::none;
  bool ring_per_kv_head = false;  // streambp-ring: the with-grad run and the backward one call per K/V head
                                  // on the plain ring (the same bytes, Hkv times the calls)
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
  // Whether x_0 is among them; false where layer 0's input is made again from the ids (layerwise.h:
  // FirstInputRecomputed), so L - 1 of them go to host memory.
  virtual bool keeps_first_input() const { return true; }
  // Forward and backward; returns the loss (0-dim, detached).
  virtual torch::Tensor forward_backward(const StepInputs& in) const = 0;
  // What every caller runs: forward_backward, with the routers' load-balancing loss where the model has it
  // on (harness/model/router_balance.h): counted in this step's first forward, its gradient added in the
  // backward, its value added to the returned loss.
  torch::Tensor step(const StepInputs& in) const;

  // Its estimate, next to the code it describes (harness/estimate/estimate.h asks for it; a strategy that
  // returns false from estimated() is refused by `bpbench estimate` by name):
  virtual bool estimated() const { return false; }
  // Why its estimate does not hold for `model` in `dtype` on `device` ("cpu", "cuda") though estimated() is
  // true; nullopt where it does. `bpbench estimate` refuses such a request with the reason, and leaves the
  // strategy out of its default list.
  virtual std::optional<std::string> estimate_gap(const std::string& /*device*/, at::ScalarType /*dtype*/,
                                                  const ModelConfig& /*model*/) const {
    return std::nullopt;
  }
  // Data parallel over a process group (impls/machinery/dist_common.h): its phases count the gradient buckets
  // and shards of one rank and no pre-allocated gradients (harness/estimate/estimate.cpp takes them apart).
  virtual bool data_parallel() const { return false; }
  // Sequence parallel over a process group (impls/machinery/sequence_parallel.h): every rank gets the same
  // sequences and takes its slice of their rows (the runner gives it the whole batch, or dist::local_batch's
  // slice).
  virtual bool sequence_parallel() const { return false; }
  // Whether it takes a cell's ulysses_degree (the ring strategies' 2-D mesh, impls/machinery/ring_layer.h);
  // the others refuse a degree above 1 as a skipped cell.
  virtual bool runs_on_mesh() const { return false; }
  // The phases one step goes through, in the order it runs them, each with the tensors alive at its high
  // point above base (memory_terms.h's terms for `D`; `partition` rows per chunk, clamped to 1..T).
  virtual std::vector<PhaseEstimate> memory_phases(const MemoryTerms& D, const Partitioning& partition) const;
  virtual FlopSchedule flop_schedule() const { return {}; }
  virtual CommSchedule comm_schedule() const { return {}; }
};

std::unique_ptr<Strategy> make_strategy(const std::string& name);  // throws listing the valid names
std::vector<std::string> strategy_names();
std::vector<std::string> offloading_strategy_names();  // those whose uses_offload() is true
std::vector<std::string> mesh_strategy_names();        // those whose runs_on_mesh() is true
std::vector<std::string> estimated_strategy_names();   // those whose estimated() is true
// Those of `names` whose sequence_parallel() is `sequence_parallel`, in order: a list of distributed
// strategies split into its data-parallel and sequence-parallel ones, as help texts and errors name them.
std::vector<std::string> strategies_where_sequence_parallel(const std::vector<std::string>& names,
                                                            bool sequence_parallel);
// The strategy every other must match (gradient error's reference, the first column of a training run).
const std::string& reference_strategy_name();
// The strategy the peers are set beside in a merged report (the paper's StreamBP): the peers' table's ratios.
const std::string& peer_comparison_strategy_name();

// Peers: implementations outside bpbench whose results bpbench reads (report, compare) but never runs,
// written in bpbench's results schema by the modules of impls/peers/: "hf-checkpoint", "hf" and
// "hf-checkpoint-offload" (transformers, SDPA, with and without gradient checkpointing, and with its
// checkpoint offload; hf_checkpoint.py), "streambp-official" (the authors' StreamBP from PyPI;
// streambp_official.py), "liger-flce" and "cce" (fused linear cross-entropy kernels on transformers'
// checkpointing; liger_flce.py, cce.py), "alst-tiled" (ALST's tiled MLP and tiled loss through DeepSpeed;
// alst_tiled.py) and "alst-ulysses" (the same over P ranks with DeepSpeed's Ulysses; alst_ulysses.py).
std::vector<std::string> peer_names();
bool is_peer(const std::string& impl);
// strategy_names() then peer_names(): what a results file's impl axis may hold.
std::vector<std::string> recorded_impl_names();

}  // namespace bpbench
