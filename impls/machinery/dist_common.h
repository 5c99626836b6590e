// dist_common.h: what the distributed strategies (streambp-dist, checkpoint-dist; the sequence-parallel
// ulysses and streambp-ulysses use the buckets too: sequence_parallel.h) share: options, the
// rank's slice of a global batch, the loss normalisation across ranks, ZeRO-2 gradient buckets (flatten a
// parameter group's gradients, pad to a multiple of the world size, reduce-scatter, keep the shard, free the
// full buffer; under sharding none and zero1 all-reduce it and keep it whole), ZeRO-3-style layer parameter
// shards, and the gathering of full gradients for checks.
//
// Parameter groups, in model order: "embedding" (embed_tokens), "layer i" (every trainable weight of layer
// i), "head" (final norm, and lm_head when it is not tied). With tied embeddings the lm_head IS embed_tokens:
// its two uses (LM head, embedding) accumulate into one gradient, reduced once after the embedding backward.
// A group without a trainable parameter (LoRA: embedding, head) is never reduced.
//
// Loss across ranks (exact, so the gathered gradient equals single-process plain BP on the concatenated
// batch): the step's loss is the loss of the global batch (all ranks' rows). One all_reduce of
// [target tokens, examples, examples^2] per step gives the global counts.
//   SFT (normalised by target tokens):  rank r's loss = (sum of its token NLLs) / (global target tokens), its
//       share of the global loss; gradients are SUMMED over ranks.
//   DPO, GRPO, others (a mean over examples): every rank must hold the same number of examples (checked); the
//       rank's own mean is R times its share, so gradients are AVERAGED over ranks (DDP semantics).
// The returned loss is the global one on every rank (one scalar all_reduce).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "impls/interface/strategy.h"
#include "impls/machinery/comm.h"

namespace bpbench::dist {

// Why a sequence-parallel step cannot add the routers' load-balancing loss at this length (T not a multiple
// of `multiple`, DistStrategy::unpadded_multiple: its padding rows would be counted).
std::string sequence_parallel_balance_refusal(int64_t seq_len, int64_t multiple);

struct DistOptions {
  bool shard_params = false;  // ZeRO-3-style: a layer's parameters live as shards, gathered around each use
  // offload parameters (ZeRO-Infinity's offload_param), with shard_params: the shards live in host memory
  // (profiles/host_memory.h), each copied to the device before its all_gather.
  bool offload_params = false;
  // sharding none and zero1: every rank all-reduces each gradient group whole and keeps all of it (DDP's
  // gradients); zero2 and zero3 reduce-scatter it and keep one shard.
  bool whole_gradients = false;
  // sharding none: a training run's AdamW on every rank updates every weight; else the rank's slice of each
  // group, all-gathered after (ZeRO-1 on).
  bool shard_optimizer = true;
  bool naive_comm = false;  // streambp-dist: reduce a layer after every chunk (D times the calls)
  // The ring strategies' 2-D mesh (mesh_attention.h): Ulysses over groups of U ranks inside ring groups of
  // world_size / U; 1: the ring over every rank. A cell's grid axis ulysses_degree.
  int64_t ulysses_degree = 1;

  // BPBENCH_DIST_NAIVE_COMM: "1" / "true" to switch on. Sharding is a cell's grid axis (`sharding`).
  static DistOptions from_env();
  // The grid axis `sharding` (sharding_names) to options, and back.
  static DistOptions of_sharding(const std::string& sharding);
  std::string sharding() const;  // "none" | "zero1" | "zero2" | "zero3"
  std::string label() const;     // "zero2", "zero2+naive_comm", "zero3", "zero2+ulysses_degree=2"
};

// The grid axis `sharding`'s values (and `bpbench estimate --sharding`'s), as DeepSpeed's stages: none (DDP:
// whole gradients and optimizer on every rank), zero1 (the optimizer sharded), zero2 (the gradients too),
// zero3 (the parameters too: shard_params).
std::vector<std::string> sharding_names();

// The options the registry's factories (`streambp-dist`, `checkpoint-dist`) use: set here, else from the env.
void set_default_dist_options(const DistOptions& options);
DistOptions default_dist_options();

// Rank `rank`'s batch of a global batch: rows [rank N/R, (rank+1) N/R) of every per-row tensor (ids, targets,
// DPO/GRPO extras), examples B/R, loss_tokens recounted. Throws unless R divides the examples.
Batch rank_batch(const Batch& global, int rank, int world_size);

// A step over `world` ranks with `examples` examples per cell: data parallel, each rank has `examples` of its
// own (the global batch has examples x world); sequence parallel, the ranks share the same `examples`.
int64_t global_examples(const Strategy& strategy, int64_t examples, int world);
// The batch rank `rank` works on: its examples (rank_batch), or its slice of every sequence
// (sequence_parallel.h: shard_batch).
Batch local_batch(const Strategy& strategy, const Batch& global, int rank, int world);

// One parameter group's reduced gradient on this rank: its shard of the flattened, zero-padded group.
struct GradientShard {
  std::string group;                         // "embedding", "layer 3", "head"
  std::vector<std::string> names;            // parameters, in flattening order
  std::vector<ParamGroup> kinds;             // their parameter groups (model.h), for error reports
  std::vector<std::vector<int64_t>> shapes;  // their shapes
  std::vector<int64_t> offsets;              // their first element in the flat group
  int64_t numel = 0;                         // elements of the group
  int64_t padded = 0;                        // numel rounded up to a multiple of the world size
  torch::Tensor shard;                       // (padded / R): flat elements [rank padded/R, (rank+1) padded/R)
  bool whole = false;                        // whole_gradients: `shard` is the whole reduced group (padded)
};
using GradientShards = std::vector<GradientShard>;  // model order: embedding, layer 0..L-1, head

// Layer i forward on this rank's rows (its examples, or its slice of every sequence).
using RowsForward = std::function<torch::Tensor(int64_t i, const torch::Tensor& x)>;

class DistStep;

// A distributed strategy: ZeRO-2 data parallelism over the current process group (comm.h). After a step each
// rank holds only its gradient shards (last_gradient_shards); the parameters' .grad are reset.
class DistStrategy : public Strategy {
 public:
  ~DistStrategy() override;

  std::string name() const override { return name_; }
  std::string description() const override;  // "<schedule> (<options label>)"
  const DistOptions& options() const { return options_; }
  // A reason when there is no process group and none will be made (world_size 1, no torchrun environment),
  // or, sequence parallel, when the model's heads do not split over the ranks (sequence_parallel.h).
  std::optional<std::string> unsupported(const CellTraits& traits) const override;
  // One rank's estimate (layerwise_estimate.h: data_parallel_phases), ZeRO-2 only: shard_params (ZeRO-3
  // style parameter shards) is not estimated.
  bool estimated() const override { return !options_.shard_params; }
  bool data_parallel() const override { return true; }
  // This rank's part of the global batch: its examples (rank_batch), or under sequence parallelism its rows
  // of every sequence (shard_batch; the ring strategies' zigzag_batch).
  virtual Batch local_slice(const Batch& global, int rank, int world) const;
  // Sequence parallel: whether the ranks split the attention by heads (Ulysses: refused where they cannot,
  // sequence_parallel.h), and the multiple of T that needs no padding rows (Ulysses P, the ring 2P).
  virtual bool splits_heads() const { return sequence_parallel(); }
  virtual int64_t unpadded_multiple(int64_t ranks) const { return ranks; }

  const GradientShards& last_gradient_shards() const;
  CommStats last_step_comm() const;  // this rank's collectives during the last forward_backward

  // Collective (every rank calls it): the full gradients of the last step, all-gathered from the shards, in
  // the order of model.trainable_parameters() (names and groups as there).
  std::vector<NamedParameter> gather_full_gradients() const;
  // Collective: gather_full_gradients() written into each trainable parameter's .grad (for the gradient-error
  // report, which reads .grad).
  void load_full_gradients(Model& model) const;
  // Collective: under shard_params, every layer's full parameters put back into `model` (the model's layers
  // are otherwise left sharded between steps: empty tensors whose values live in this strategy's shards).
  void restore_parameters(Model& model) const;

  // Training (harness/run/train_optimizer.h). With `on`, the next steps add their reduced gradients to the
  // shards of the step before (a training step's micro-batches 2..k) instead of replacing them.
  void accumulate_gradients(bool on) const;
  // shard_params: layer i's flat parameter shard (padded / R elements of its parameters in model order),
  // which every forward gathers and the optimizer updates in place; undefined before the first step.
  torch::Tensor layer_parameter_shard(int64_t i) const;
  // Collective: the objective's loss of in.batch (this rank's part of a held-out batch) without grad, the
  // global loss on every rank. The layers as forward_backward's no-grad forward runs them on the rank's rows
  // (no_grad_layer), the head in logits_partition rows: it holds a subset of what a step's forward holds.
  torch::Tensor held_out_loss(const StepInputs& in) const;

 protected:
  // name: the registry's; schedule: what the strategy does, the description before the options label.
  DistStrategy(std::string name, std::string schedule, DistOptions options);

  // Layer i forward without grad on this rank's rows, as forward_backward's forward runs it (default: the
  // layer on the rank's examples, `partition` rows at a time).
  virtual RowsForward no_grad_layer(DistStep& step, const StepInputs& in) const;

  struct State;
  friend class DistStep;
  std::string name_, schedule_;
  DistOptions options_;
  std::unique_ptr<State> state_;  // shards and counters of the last step (forward_backward is const)
};

// One step of a DistStrategy on this rank: the building blocks its schedule is written with.
class DistStep {
 public:
  // Finds the process group, checks the model against the sharding state, builds the parameter groups, and
  // computes the global normalisers (one all_reduce). Under shard_params, shards the layers on first use.
  DistStep(const DistStrategy& strategy, const StepInputs& in);
  ~DistStep();

  Communicator& comm() { return *comm_; }
  const Batch& batch() const { return batch_; }  // this rank's rows with global normalisers

  // Parameter groups: 0 = embedding, 1 + i = layer i, L + 1 = head.
  int embedding() const { return 0; }
  int layer(int64_t i) const { return static_cast<int>(1 + i); }
  int head() const { return static_cast<int>(1 + layers_); }
  bool tied() const;

  // open: the group's gradients become views of one zeroed flat bucket (padded numel; what a .grad held is
  //       copied in), so backward accumulates straight into it. Idempotent.
  // reduce: reduce-scatter the bucket once (SUM or AVG, see the header), add the result into the group's
  //       shard, zero the bucket. Counted as one reduce_scatter.
  // close: reset the group's .grad and free the bucket.
  void open(int group);
  void reduce(int group);
  void close(int group);
  void reduce_and_close(int group) {
    reduce(group);
    close(group);
  }
  // Before the head's backward: open(head()), and with tied embeddings open(embedding()) too. The lm_head IS
  // embed_tokens there, so its bucket stays open until the embedding backward has added its part.
  void open_head();

  // shard_params only (no-ops otherwise): all-gather layer i's parameters into full tensors / free them
  // again.
  void gather_layer(int64_t i);
  void release_layer(int64_t i);

  // checkpointed_forward (layerwise.h; attention in query chunks of `rows`), gathering each layer's
  // parameters around its forward under shard_params: L + 1 tensors (N, T, d).
  std::vector<torch::Tensor> checkpointed_forward(int64_t rows);

  // Layers L-1..0 again from their inputs xs[i] (N, rows, d), each released as it is used, with grad: the
  // layer's backward from dy, its group opened before and reduce-scattered after (and, under shard_params,
  // gathered around it). xs holds x_0..x_{L-1}; dy is taken, not shared (a caller's handle on it would keep
  // the head's gradient alive through every layer). Returns dL/dx_0.
  using Layer = RowsForward;
  torch::Tensor layers_backward(std::vector<torch::Tensor>& xs, torch::Tensor dy, const Layer& layer);

  // The embedding's backward with dL/dx_0 (N, T, d) (layerwise.h), its gradient reduced once and closed.
  void embedding_backward(const torch::Tensor& dx);

  // Ends the step: shards published to the strategy, counters taken. Returns the global loss (all_reduce).
  torch::Tensor finish(const torch::Tensor& local_loss);
  // The global loss from this rank's (one all_reduce: SFT's shares add up, the others' equal means average).
  torch::Tensor global_loss(const torch::Tensor& local_loss);

 private:
  struct Group;
  void shard_parameters();  // shard_params: on the first step, or when the model changed
  const DistStrategy& strategy_;
  const StepInputs& in_;
  Communicator* comm_ = nullptr;
  Batch batch_;
  ReduceOp grad_op_ = ReduceOp::avg;  // of the gradient shards
  ReduceOp loss_op_ = ReduceOp::avg;  // of the ranks' losses
  std::vector<Group> groups_;
  int64_t layers_ = 0;
  CommStats comm_before_;
};

}  // namespace bpbench::dist

namespace bpbench {
// A distributed strategy of the registry (impls/registry.cpp) with these options instead of
// default_dist_options(); throws listing the distributed names.
std::unique_ptr<dist::DistStrategy> make_distributed_strategy(const std::string& name,
                                                              const dist::DistOptions& options);
}  // namespace bpbench
