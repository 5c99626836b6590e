// train_optimizer.h: where a training run's AdamW tensors live and how a step's gradients reach them.
//
// One interface, two placements:
// - replicated (train_optimizer.cpp): one process; the optimizer sees the model's trainable weights, or with
//   precision "mixed" float32 master copies of them, whole.
// - sharded (train_sharded.cpp): a distributed strategy over R ranks. Its step leaves each rank the shard
//   [r padded/R, (r+1) padded/R) of every flattened gradient group (zero2, zero3), or the whole reduced group
//   (none, zero1; impls/machinery/dist_common.h). From zero1 on, the rank's AdamW updates the slice
//   [r padded/R, (r+1) padded/R) of the weights, so its moments (and masters) are 1/R of the replicated
//   ones, and the new slices are all-gathered, group by group, into every rank's full weights. zero3: a
//   layer's slice IS the rank's parameter shard, which the next forward gathers; the embedding and the head,
//   never sharded, are gathered as zero2's. none: every rank updates every weight from the whole gradients,
//   as DDP does.
// With `offload` (offload optimizer, as DeepSpeed's CPU Adam) the tensors AdamW sees are always copies in
// host memory (the weights' dtype, float32 with "mixed"), their moments and its step on the host's CPU: each
// step copies the gradients to the host and the new weights back. On the CPU they are allocated under a
// HostMemoryScope (profiles/host_memory.h), so the device's peak loses them and the host's counts them.
// AdamW is elementwise, so a slice's update is the whole tensor's restricted to it: the trajectories of R
// ranks equal one process's on the global batch to round-off (tests/run/test_train_distributed.cpp).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "harness/model/model.h"
#include "harness/run/train_spec.h"

namespace bpbench {

namespace dist {
class DistStrategy;
}

class TrainOptimizer {
 public:
  virtual ~TrainOptimizer() = default;
  // After a step's last micro-batch: its summed gradients times `scale` (1 / grad_accum), their global L2
  // norm (returned, before clipping), and clipping to max_norm (> 0) as torch.nn.utils.clip_grad_norm_ does.
  virtual double gather_and_clip(double max_norm, double scale) = 0;
  // AdamW's update at learning rate `lr`, and the new weights where the model's next forward reads them.
  virtual void step(double lr) = 0;
};

std::unique_ptr<TrainOptimizer> make_replicated_optimizer(const TrainSpec& spec, const Model& model,
                                                          bool offload);
// `strategy` must have run a step (its gradient shards give the layout). Throws std::invalid_argument for
// ZeRO-3 over a layer with frozen weights (LoRA), whose gradient and parameter shards do not line up.
std::unique_ptr<TrainOptimizer> make_sharded_optimizer(const TrainSpec& spec, Model& model,
                                                       const dist::DistStrategy& strategy, bool offload);

// AdamW over `tensors` in two groups, as Hugging Face's Trainer makes them: norm weights and biases
// (decays[i] false) without weight decay, every other weight with it.
std::unique_ptr<torch::optim::AdamW> make_adamw(const TrainSpec& spec,
                                                const std::vector<torch::Tensor>& tensors,
                                                const std::vector<bool>& decays);
// The tensor AdamW updates for `value` (a weight or a slice of one): `value` itself, or where precision is
// "mixed" or the optimizer is offloaded a copy (float32 with "mixed"; in host memory when offloaded) with a
// zeroed gradient of its own. Allocated under the optimizer's category.
torch::Tensor optimized_tensor(const torch::Tensor& value, bool mixed, bool offload);
// AdamW's step, its moments made by the first, under the optimizer's category (offload: in host memory).
void adamw_step(torch::optim::AdamW& adamw, double lr, bool offload);

// torch.nn.utils.clip_grad_norm_'s scaling: the gradients of `tensors` times max_norm / (total + 1e-6) where
// that is below 1 (total: their global norm; max_norm <= 0: no clipping).
void clip_gradients(const std::vector<torch::Tensor>& tensors, double max_norm, double total);

// Whether a trainable parameter takes weight decay (make_adamw's decays): not a norm's weight, not a bias.
bool takes_weight_decay(const NamedParameter& p);

}  // namespace bpbench
