// train_sharded.cpp: the distributed placement of train_optimizer.h (sharding none, zero1, zero2, zero3).
//
// A rank's shard of a gradient group is a run of flat elements [lo, hi) of the group (its parameters
// flattened in model order, zero-padded to a multiple of R). It cuts each parameter it overlaps into one
// piece: AdamW updates the piece, a view of that parameter's slice (or with precision "mixed" a float32
// master of it), with the piece of the shard as its gradient. Pieces inherit their parameter's weight decay,
// so both AdamW groups are the replicated run's restricted to the rank.
#include <fmt/format.h>

#include <map>
#include <stdexcept>

#include "harness/run/train_optimizer.h"
#include "impls/machinery/dist_common.h"
#include "profiles/host_memory.h"
#include "profiles/memory.h"

namespace bpbench {

using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;

namespace {

// The layer index of a gradient group's name "layer <i>", or -1 (embedding, head).
int64_t layer_of_group(const std::string& group) {
  return group.rfind("layer ", 0) == 0 ? std::stoll(group.substr(6)) : -1;
}

class ShardedOptimizer final : public TrainOptimizer {
 public:
  ShardedOptimizer(const TrainSpec& spec, Model& model, const dist::DistStrategy& strategy, bool offload)
      : strategy_(strategy), copies_(spec.precision == "mixed" || offload), offload_(offload) {
    comm_ = dist::current_communicator();
    if (!comm_) throw std::logic_error("train: a sharded optimizer without a process group");
    std::map<std::string, NamedParameter> trainable;
    for (auto& p : model.trainable_parameters()) trainable.emplace(p.name, p);
    const auto& shards = strategy.last_gradient_shards();
    if (shards.empty()) throw std::logic_error("train: a sharded optimizer before the strategy's first step");
    const int64_t R = comm_->world_size(), rank = comm_->rank();
    std::vector<torch::Tensor> masters;
    std::vector<bool> decays;
    // sharding none: the rank updates every element; else its slice [lo, hi). The gradient tensor starts at
    // `base` of the flat group: 0 where it is whole (none, zero1), else lo.
    const bool everything = !strategy.options().shard_optimizer;
    reduces_norm_ = !everything;
    for (size_t g = 0; g < shards.size(); ++g) {
      const auto& shard = shards[g];
      const int64_t per = everything ? shard.padded : shard.padded / R, lo = everything ? 0 : rank * per,
                    hi = lo + per, base = shard.whole ? 0 : lo;
      const int64_t layer = layer_of_group(shard.group);
      const torch::Tensor layer_shard = layer >= 0 && strategy.options().shard_params
                                            ? strategy.layer_parameter_shard(layer)
                                            : torch::Tensor();
      if (layer_shard.defined()) check_whole_layer_trains(model, layer, shard);
      Group group{g, !layer_shard.defined() && !everything, {}};
      for (size_t k = 0; k < shard.names.size(); ++k) {
        const NamedParameter& p = trainable.at(shard.names[k]);
        group.params.push_back(p.tensor);
        const int64_t first = shard.offsets[k], n = c10::multiply_integers(shard.shapes[k]);
        const int64_t a = std::max(lo, first), b = std::min(hi, first + n);
        if (a >= b) continue;
        Piece piece{
            g, a - base, a - lo, b - a, {}, {}, layer_shard.defined() && strategy.options().offload_params};
        // ZeRO-3: the layer's parameter shard has the gradient shard's layout (every weight trains).
        piece.value = layer_shard.defined() ? layer_shard.narrow(0, a - lo, b - a)
                                            : p.tensor.detach().view({-1}).narrow(0, a - first, b - a);
        piece.master = optimized_tensor(piece.value, spec.precision == "mixed", offload);
        masters.push_back(piece.master);
        decays.push_back(takes_weight_decay(p));
        pieces_.push_back(std::move(piece));
      }
      groups_.push_back(std::move(group));
    }
    adamw_ = make_adamw(spec, masters, decays);
    masters_ = std::move(masters);
  }

  double gather_and_clip(double max_norm, double scale) override {
    torch::NoGradGuard no_grad;
    const auto& shards = strategy_.last_gradient_shards();
    if (shards.size() != groups_.size()) throw std::logic_error("train: the gradient groups changed");
    if (scale != 1.0)
      for (const auto& s : shards) s.shard.mul_(scale);
    for (auto& p : pieces_) {
      auto grad = shards[p.group].shard.narrow(0, p.offset, p.length);
      if (copies_) {
        p.master.mutable_grad().copy_(grad);
        if (offload_) profiles::count_host_transfer(static_cast<int64_t>(grad.nbytes()));  // out to the host
      } else {
        p.master.mutable_grad() = grad;
      }
    }
    // The global norm: every rank's sum of squares, all-reduced (the padding elements are no piece's); under
    // sharding none each rank's pieces are all of it.
    const auto accumulate =
        shards.front().shard.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    torch::Tensor squares = torch::zeros({1}, torch::TensorOptions().dtype(torch::kDouble));
    {
      MemoryScope scope(Category::comm);
      for (const auto& p : pieces_)
        squares += at::linalg_vector_norm(p.master.grad(), 2, c10::nullopt, false, accumulate)
                       .to(torch::kDouble)
                       .square()
                       .cpu();
      squares = squares.to(shards.front().shard.device());  // nccl reduces device tensors
      if (reduces_norm_) comm_->all_reduce(squares, dist::ReduceOp::sum, "gradient norm");
    }
    const double total = std::sqrt(squares.item<double>());
    clip_gradients(masters_, max_norm, total);
    return total;
  }

  void step(double lr) override {
    PhaseScope phase("optimizer step");
    adamw_step(*adamw_, lr, offload_);
    torch::NoGradGuard no_grad;
    for (auto& p : pieces_) {
      if (copies_) p.value.copy_(p.master);
      // Back to the device, unless the slice is an offloaded parameter shard (host to host).
      if (offload_ && !p.value_on_host) profiles::count_host_transfer(static_cast<int64_t>(p.value.nbytes()));
      // The shard's views let go, so the step's shards are freed when the next step starts, as in one step.
      if (!copies_) p.master.mutable_grad().reset();
    }
    const auto& shards = strategy_.last_gradient_shards();
    const int64_t R = comm_->world_size();
    for (const auto& group : groups_) {
      if (!group.gathers) continue;  // ZeRO-3's layers: the next forward gathers them
      const auto& shard = shards[group.shard];
      PhaseScope gather(fmt::format("{} weights all_gather", shard.group));
      MemoryScope scope(Category::comm);
      auto send = torch::zeros({shard.padded / R}, group.params.front().options().requires_grad(false));
      for (const auto& p : pieces_)
        if (p.group == group.shard) send.narrow(0, p.slot, p.length).copy_(p.value);
      const auto full = comm_->all_gather(send, shard.group + " weights");  // (padded)
      send = torch::Tensor();
      for (size_t k = 0; k < group.params.size(); ++k)
        group.params[k].detach().view({-1}).copy_(
            full.narrow(0, shard.offsets[k], c10::multiply_integers(shard.shapes[k])));
    }
  }

 private:
  struct Piece {
    size_t group;                // index of its gradient group in the strategy's shards
    int64_t offset;              // where it lies in the group's gradient tensor (a shard, or whole)
    int64_t slot, length;        // where it lies in the rank's slice [lo, hi) of the group
    torch::Tensor value;         // the weights' slice it updates
    torch::Tensor master;        // what AdamW sees: `value`, or a copy of it (optimized_tensor)
    bool value_on_host = false;  // `value` is an offloaded parameter shard's (offload parameters)
  };
  struct Group {
    size_t shard;
    bool gathers;                       // its new weights all-gathered into every rank's full tensors
    std::vector<torch::Tensor> params;  // the model's, in the group's order
  };

  // ZeRO-3 updates a layer's parameter shard through its gradient shard, the same elements only when every
  // parameter of the layer trains (the parameter shards hold the frozen ones too).
  static void check_whole_layer_trains(const Model& model, int64_t layer, const dist::GradientShard& shard) {
    const std::string prefix = fmt::format("model.layers.{}.", layer);
    size_t parameters = 0;
    for (const auto& p : model.named_parameters()) parameters += p.name.rfind(prefix, 0) == 0 ? 1 : 0;
    if (parameters != shard.names.size())
      throw std::invalid_argument(fmt::format(
          "train: sharding zero3 with frozen layer weights (LoRA: {} of layer {}'s {} parameters train) is "
          "not built (valid: sharding zero2, or full fine-tuning)",
          shard.names.size(), layer, parameters));
  }

  const dist::DistStrategy& strategy_;
  bool copies_, offload_;     // AdamW updates copies (mixed: float32; offload: in host memory)
  bool reduces_norm_ = true;  // the ranks' squares summed (not under sharding none)
  dist::Communicator* comm_ = nullptr;
  std::vector<Group> groups_;
  std::vector<Piece> pieces_;
  std::vector<torch::Tensor> masters_;  // pieces_' masters, in order: what AdamW and clipping see
  std::unique_ptr<torch::optim::AdamW> adamw_;
};

}  // namespace

std::unique_ptr<TrainOptimizer> make_sharded_optimizer(const TrainSpec& spec, Model& model,
                                                       const dist::DistStrategy& strategy, bool offload) {
  return std::make_unique<ShardedOptimizer>(spec, model, strategy, offload);
}

}  // namespace bpbench
