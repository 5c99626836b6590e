// dist_common.cpp: the shared machinery of the data-parallel strategies: rank batches, global loss
// normalisation, ZeRO-2 gradient buckets and shards, ZeRO-3-style layer parameter shards (see dist_common.h).
#include "impls/machinery/dist_common.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>

#include "impls/machinery/layerwise.h"
#include "impls/machinery/sequence_parallel.h"
#include "profiles/host_memory.h"
#include "profiles/memory.h"

namespace bpbench::dist {

using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;

namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  const std::string s(v);
  return s == "1" || s == "true" || s == "on" || s == "yes";
}

std::mutex g_options_mutex;
std::optional<DistOptions> g_options;

int64_t round_up(int64_t n, int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// The layer index of "model.layers.<i>.…", or -1.
int64_t layer_of(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  return std::stoll(name.substr(prefix.size(), name.find('.', prefix.size()) - prefix.size()));
}

}  // namespace

// ---- options ----------------------------------------------------------------------------------------------

DistOptions DistOptions::from_env() {
  DistOptions o;
  o.naive_comm = env_flag("BPBENCH_DIST_NAIVE_COMM");
  return o;
}

DistOptions DistOptions::of_sharding(const std::string& sharding) {
  DistOptions o = from_env();
  o.shard_params = sharding == "zero3";
  o.whole_gradients = sharding == "none" || sharding == "zero1";
  o.shard_optimizer = sharding != "none";
  return o;
}

std::string DistOptions::sharding() const {
  if (shard_params) return "zero3";
  if (!whole_gradients) return "zero2";
  return shard_optimizer ? "zero1" : "none";
}

std::string DistOptions::label() const {
  return sharding() + (naive_comm ? "+naive_comm" : "") +
         (ulysses_degree > 1 ? fmt::format("+ulysses_degree={}", ulysses_degree) : "");
}

std::vector<std::string> sharding_names() {
  return {"none", "zero1", "zero2", "zero3"};
}

void set_default_dist_options(const DistOptions& options) {
  std::lock_guard<std::mutex> lock(g_options_mutex);
  g_options = options;
}

DistOptions default_dist_options() {
  std::lock_guard<std::mutex> lock(g_options_mutex);
  return g_options ? *g_options : DistOptions::from_env();
}

// ---- rank batch -------------------------------------------------------------------------------------------

Batch rank_batch(const Batch& global, int rank, int world_size) {
  TORCH_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank_batch: rank ", rank, " of ",
              world_size);
  TORCH_CHECK(global.examples % world_size == 0, "rank_batch: ", global.examples,
              " examples do not split evenly over ", world_size, " ranks");
  const int64_t rows = global.sequences() / world_size;
  auto slice = [&](const torch::Tensor& t) {
    return t.defined() ? t.narrow(0, rank * rows, rows).clone() : torch::Tensor();
  };
  Batch b = global;
  b.input_ids = slice(global.input_ids);
  b.targets = slice(global.targets);
  b.ref_sums = slice(global.ref_sums);
  b.ref_logps = slice(global.ref_logps);
  b.old_logps = slice(global.old_logps);
  b.advantages = slice(global.advantages);
  b.token_weight = slice(global.token_weight);
  b.examples = global.examples / world_size;
  b.loss_tokens = b.targets.ne(kIgnoreIndex).sum().item<int64_t>();
  return b;
}

int64_t global_examples(const Strategy& strategy, int64_t examples, int world) {
  return strategy.sequence_parallel() ? examples : examples * world;
}

Batch local_batch(const Strategy& strategy, const Batch& global, int rank, int world) {
  if (const auto* d = dynamic_cast<const DistStrategy*>(&strategy))
    return d->local_slice(global, rank, world);
  return rank_batch(global, rank, world);  // only distributed strategies are sequence parallel
}

Batch DistStrategy::local_slice(const Batch& global, int rank, int world) const {
  return sequence_parallel() ? shard_batch(global, rank, world) : rank_batch(global, rank, world);
}

// ---- strategy state ---------------------------------------------------------------------------------------

namespace {

// A layer's parameters under shard_params: the flattened, padded layer, of which this rank keeps one shard.
struct LayerParams {
  std::vector<torch::Tensor> params;  // every parameter of the layer (frozen ones too): model handles
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> offsets;
  int64_t numel = 0, padded = 0;
  torch::Tensor shard;   // (padded / R)
  bool on_host = false;  // offload parameters: the shard in host memory
  bool gathered = false;
};

}  // namespace

struct DistStrategy::State {
  GradientShards shards;    // the last step's
  bool accumulate = false;  // the next step adds to `shards` (accumulate_gradients)
  CommStats last_comm;
  Communicator* comm = nullptr;  // the group of the last step
  std::vector<LayerParams> layers;
};

namespace {

// Whether `layers` holds the shards of exactly this model's layers, which are empty (sharded). The shards
// keep the parameter handles alive, so a new model can never reuse their addresses.
bool holds_sharded(const std::vector<LayerParams>& layers, const Model& m) {
  if (layers.empty() || static_cast<int64_t>(layers.size()) != m.config.layers) return false;
  std::vector<size_t> seen(layers.size(), 0);
  for (const auto& p : m.named_parameters()) {
    const int64_t li = layer_of(p.name);
    if (li < 0) continue;
    const auto& lp = layers[li];
    const size_t k = seen[li]++;
    if (k >= lp.params.size() || lp.params[k].unsafeGetTensorImpl() != p.tensor.unsafeGetTensorImpl() ||
        p.tensor.numel() != 0)
      return false;
  }
  for (size_t i = 0; i < layers.size(); ++i)
    if (seen[i] != layers[i].params.size()) return false;
  return true;
}

// What a layer's all_gather sends: its shard, or (offload parameters) a copy of it on the layer's device,
// made in the same code on the CPU as on a GPU so that its bytes are the device's.
torch::Tensor on_device(const LayerParams& lp) {
  if (!lp.on_host) return lp.shard;
  profiles::count_host_transfer(static_cast<int64_t>(lp.shard.nbytes()));
  return lp.shard.to(lp.params.front().device(), /*non_blocking=*/false, /*copy=*/true);
}

}  // namespace

DistStrategy::DistStrategy(std::string name, std::string schedule, DistOptions options)
    : name_(std::move(name)),
      schedule_(std::move(schedule)),
      options_(options),
      state_(std::make_unique<State>()) {}
DistStrategy::~DistStrategy() = default;

std::string DistStrategy::description() const {
  return fmt::format("{} ({})", schedule_, options_.label());
}

std::string sequence_parallel_balance_refusal(int64_t seq_len, int64_t multiple) {
  return fmt::format(
      "the routers' load-balancing loss under sequence parallelism needs T divisible by {} (T = {} is "
      "padded by {} row(s), which it would count); not implemented",
      multiple, seq_len, multiple - seq_len % multiple);
}

std::optional<std::string> DistStrategy::unsupported(const CellTraits& traits) const {
  if (options_.ulysses_degree > 1 && !runs_on_mesh())
    return fmt::format(
        "{}: ulysses_degree {} is the 2-D mesh of the ring strategies ({}); {} runs with ulysses_degree 1",
        name(), options_.ulysses_degree, fmt::join(mesh_strategy_names(), ", "), name());
  if (sequence_parallel() && traits.model && traits.model->linear_attention)
    return fmt::format(
        "{}: {} has Gated DeltaNet layers, whose state runs along the whole sequence: the sequence-parallel "
        "strategies do not pass it from rank to rank (valid on it: streambp-dist, checkpoint-dist, or one "
        "process's strategies)",
        name(), traits.model->name);
  if (splits_heads() && traits.model && traits.world_size > 1)
    if (auto why = sequence_parallel_refusal(*traits.model, traits.world_size)) return why;
  if (sequence_parallel() && traits.router_balance && traits.world_size > 1 && traits.seq_len > 0 &&
      traits.seq_len % unpadded_multiple(traits.world_size) != 0)
    return sequence_parallel_balance_refusal(traits.seq_len, unpadded_multiple(traits.world_size));
  if (current_communicator() || CommConfig::env_present() || traits.world_size > 1) return std::nullopt;
  return "needs a process group: world_size >= 2 in the scenario, or a torchrun-style launch (RANK, "
         "WORLD_SIZE, MASTER_ADDR, MASTER_PORT)";
}

const GradientShards& DistStrategy::last_gradient_shards() const {
  return state_->shards;
}

CommStats DistStrategy::last_step_comm() const {
  return state_->last_comm;
}

std::vector<NamedParameter> DistStrategy::gather_full_gradients() const {
  if (!state_->comm) throw std::logic_error(name() + ": gather_full_gradients before any step");
  std::vector<NamedParameter> out;
  for (const auto& g : state_->shards) {
    MemoryScope scope(Category::grads);
    auto full = g.whole ? g.shard : state_->comm->all_gather(g.shard, g.group + " gradients (gather)");
    for (size_t k = 0; k < g.names.size(); ++k) {
      const int64_t n = c10::multiply_integers(g.shapes[k]);
      out.push_back({g.names[k], g.kinds[k], full.narrow(0, g.offsets[k], n).view(g.shapes[k]).clone()});
    }
  }
  return out;
}

void DistStrategy::load_full_gradients(Model& model) const {
  std::map<std::string, torch::Tensor> by_name;
  for (auto& p : gather_full_gradients()) by_name[p.name] = p.tensor;
  for (auto& p : model.trainable_parameters()) {
    auto it = by_name.find(p.name);
    if (it == by_name.end()) throw std::runtime_error(fmt::format("{}: no gradient for {}", name(), p.name));
    p.tensor.mutable_grad() = it->second;
  }
}

void DistStrategy::restore_parameters(Model& model) const {
  if (!holds_sharded(state_->layers, model)) return;
  Communicator* comm = state_->comm ? state_->comm : current_communicator();
  if (!comm) throw std::logic_error(name() + ": restore_parameters without a process group");
  MemoryScope scope(Category::params);
  for (size_t i = 0; i < state_->layers.size(); ++i) {
    auto& lp = state_->layers[i];
    auto full = comm->all_gather(on_device(lp), fmt::format("layer {} parameters (restore)", i));
    for (size_t k = 0; k < lp.params.size(); ++k)
      lp.params[k].set_data(
          full.narrow(0, lp.offsets[k], c10::multiply_integers(lp.shapes[k])).view(lp.shapes[k]).clone());
  }
  state_->layers.clear();
}

void DistStrategy::accumulate_gradients(bool on) const {
  state_->accumulate = on;
}

torch::Tensor DistStrategy::layer_parameter_shard(int64_t i) const {
  const auto& layers = state_->layers;
  return i >= 0 && i < static_cast<int64_t>(layers.size()) ? layers[i].shard : torch::Tensor();
}

// ---- one step ---------------------------------------------------------------------------------------------

struct DistStep::Group {
  GradientShard out;                  // layout, and the shard being accumulated
  std::vector<torch::Tensor> params;  // trainable parameters, handles into the model
  torch::Tensor bucket;               // (padded) while open
};

DistStep::DistStep(const DistStrategy& strategy, const StepInputs& in) : strategy_(strategy), in_(in) {
  const Model& m = in.model;
  comm_ = &communicator_or_init_from_env(m.device().is_cuda() ? "cuda" : "cpu");
  comm_->settle();  // a collective queued before the step (nccl) is not this step's
  comm_before_ = comm_->stats_with_subgroups();  // the 2-D mesh's groups carry some of a step
  const int R = comm_->world_size();
  auto& st = *strategy_.state_;
  if (strategy.options_.whole_gradients && strategy.options_.naive_comm)
    throw std::invalid_argument(fmt::format(
        "{}: BPBENCH_DIST_NAIVE_COMM reduces a layer between its chunks, which only sharded gradients take "
        "(valid: sharding zero2 or zero3)",
        strategy.name()));
  // A step's shards replace the previous step's, or a micro-batch's add to them.
  GradientShards previous = std::move(st.shards);
  st.shards.clear();
  if (!st.accumulate) previous.clear();

  // Global normalisers: [target tokens, examples, examples^2] summed over ranks.
  batch_ = in.batch;
  {
    MemoryScope scope(Category::comm);
    const int64_t E = batch_.examples;
    auto counts = torch::tensor({batch_.loss_tokens, E, E * E}, torch::TensorOptions().dtype(torch::kLong))
                      .to(m.device());
    comm_->all_reduce(counts, ReduceOp::sum, "loss normalisers");
    counts = counts.cpu();
    const int64_t tokens = counts[0].item<int64_t>(), sum_e = counts[1].item<int64_t>(),
                  sum_e2 = counts[2].item<int64_t>();
    if (strategy.sequence_parallel()) {
      // Every rank holds a slice of the same sequences (sequence_parallel.h): each weight gradient is the
      // sum of the ranks' parts. The loss: linear objectives' shares add up; DPO's f(S) is the same on every
      // rank (its S all-reduced first).
      if (sum_e != E * R || sum_e2 != E * E * R)
        throw std::logic_error("sequence parallelism: the ranks hold different sequences");
      if (in.objective.mean_over_target_tokens()) {
        if (tokens == 0)
          throw std::invalid_argument(
              fmt::format("{}: no target token in the sequences", in.objective.name()));
        batch_.loss_tokens = tokens;
      }
      grad_op_ = ReduceOp::sum;
      loss_op_ = in.objective.outer_is_linear() ? ReduceOp::sum : ReduceOp::avg;
    } else if (in.objective.mean_over_target_tokens()) {
      if (tokens == 0)
        throw std::invalid_argument(fmt::format("{}: no rank has a target token", in.objective.name()));
      batch_.loss_tokens = tokens;  // rank loss = its share of the global mean: gradients add up
      grad_op_ = loss_op_ = ReduceOp::sum;
    } else {
      if (sum_e2 * R != sum_e * sum_e)  // equality holds iff every rank has the same count
        throw std::invalid_argument(fmt::format(
            "{}: every rank must hold the same number of examples ({} over {} ranks) for the mean of "
            "per-rank means to be the global mean",
            in.objective.name(), sum_e, R));
      grad_op_ = loss_op_ = ReduceOp::avg;  // rank loss = mean over its examples = R x its share
    }
  }
  if (m.router_balance->on()) {
    // The load-balancing loss counts the global batch's rows: every rank's tally summed before its first use
    // (harness/model/router_balance.h). Its gradient is each row's part of the global loss, so where the
    // gradients are averaged over the ranks it goes in R times. A padded sequence-parallel slice would count
    // its padding rows.
    if (strategy.sequence_parallel() && in.batch.whole_seq_len % strategy.unpadded_multiple(R) != 0)
      throw std::invalid_argument(
          sequence_parallel_balance_refusal(in.batch.whole_seq_len, strategy.unpadded_multiple(R)));
    m.router_balance->set_reduce(
        [comm = comm_](torch::Tensor& tally) {
          MemoryScope scope(Category::comm);
          comm->all_reduce(tally, ReduceOp::sum, "router load-balancing counts");
        },
        grad_op_ == ReduceOp::avg ? R : 1);
  }

  // shard_params: keep 1/R of each layer's flattened parameters and free the full tensors. Done on the first
  // step; the model's layers stay sharded between steps (restore_parameters puts them back).
  const int64_t L = m.config.layers;
  layers_ = L;
  if (strategy_.options_.shard_params) shard_parameters();
  std::map<const void*, std::vector<int64_t>> sharded_shape;  // a sharded parameter's true shape
  for (const auto& lp : st.layers)
    for (size_t k = 0; k < lp.params.size(); ++k)
      sharded_shape[lp.params[k].unsafeGetTensorImpl()] = lp.shapes[k];

  // Parameter groups from the trainable parameters: embedding, layer 0..L-1, head (model order).
  groups_.resize(static_cast<size_t>(L + 2));
  groups_[0].out.group = "embedding";
  for (int64_t i = 0; i < L; ++i) groups_[layer(i)].out.group = fmt::format("layer {}", i);
  groups_.back().out.group = "head";
  for (auto& p : m.trainable_parameters()) {
    const int64_t li = layer_of(p.name);
    Group& g =
        li >= 0 ? groups_[layer(li)]
                : (p.tensor.unsafeGetTensorImpl() == m.embed_weight.unsafeGetTensorImpl() ? groups_[0]
                                                                                          : groups_.back());
    auto it = sharded_shape.find(p.tensor.unsafeGetTensorImpl());
    const auto shape = it != sharded_shape.end() ? it->second : p.tensor.sizes().vec();
    g.out.names.push_back(p.name);
    g.out.kinds.push_back(p.group);
    g.out.shapes.push_back(shape);
    g.out.offsets.push_back(g.out.numel);
    g.out.numel += c10::multiply_integers(shape);
    g.params.push_back(p.tensor);
  }
  for (auto& g : groups_) g.out.padded = round_up(g.out.numel, R);
  for (auto& p : previous)
    for (auto& g : groups_)
      if (g.out.group == p.group) {
        if (p.padded != g.out.padded)
          throw std::logic_error(fmt::format("accumulating '{}': the model changed", p.group));
        g.out.shard = std::move(p.shard);
      }
}

void DistStep::shard_parameters() {
  const Model& m = in_.model;
  auto& st = *strategy_.state_;
  const int64_t L = m.config.layers, R = comm_->world_size();
  if (holds_sharded(st.layers, m)) return;
  PhaseScope phase("shard parameters");
  MemoryScope scope(Category::params);
  torch::NoGradGuard no_grad;
  st.layers.assign(static_cast<size_t>(L), LayerParams{});
  for (auto& p : m.named_parameters()) {
    const int64_t li = layer_of(p.name);
    if (li < 0) continue;
    auto& lp = st.layers[li];
    lp.params.push_back(p.tensor);
    lp.shapes.push_back(p.tensor.sizes().vec());
    lp.offsets.push_back(lp.numel);
    lp.numel += p.tensor.numel();
  }
  const int64_t rank = comm_->rank();
  const bool host = strategy_.options_.offload_params;
  for (auto& lp : st.layers) {
    lp.padded = round_up(lp.numel, R);
    const int64_t per_rank = lp.padded / R;
    {
      std::optional<profiles::HostMemoryScope> on_host;
      if (host) on_host.emplace();
      auto options = lp.params.front().options().requires_grad(false);
      lp.shard = torch::zeros({per_rank}, host ? options.device(torch::kCPU) : options);
      lp.on_host = host;
    }
    // Elements [rank per_rank, (rank+1) per_rank) of the flat layer, copied parameter by parameter.
    const int64_t lo = rank * per_rank, hi = lo + per_rank;
    for (size_t k = 0; k < lp.params.size(); ++k) {
      const int64_t a = std::max(lo, lp.offsets[k]), b = std::min(hi, lp.offsets[k] + lp.params[k].numel());
      if (a < b)
        lp.shard.narrow(0, a - lo, b - a)
            .copy_(lp.params[k].detach().reshape({-1}).narrow(0, a - lp.offsets[k], b - a));
    }
    for (auto& p : lp.params) p.set_data(torch::empty({0}, p.options().requires_grad(false)));
  }
}

DistStep::~DistStep() {
  // After a failure: leave no bucket or gathered layer behind.
  try {
    for (size_t g = 0; g < groups_.size(); ++g)
      if (groups_[g].bucket.defined()) close(static_cast<int>(g));
    auto& st = *strategy_.state_;
    for (size_t i = 0; i < st.layers.size(); ++i)
      if (st.layers[i].gathered) release_layer(static_cast<int64_t>(i));
  } catch (...) {
  }
}

bool DistStep::tied() const {
  return in_.model.config.tie_embeddings;
}

void DistStep::open(int group) {
  Group& g = groups_.at(group);
  if (g.params.empty() || g.bucket.defined()) return;
  MemoryScope scope(Category::grads);
  torch::NoGradGuard no_grad;
  g.bucket = torch::zeros({g.out.padded}, g.params.front().options().requires_grad(false));
  for (size_t k = 0; k < g.params.size(); ++k) {
    auto view =
        g.bucket.narrow(0, g.out.offsets[k], c10::multiply_integers(g.out.shapes[k])).view(g.out.shapes[k]);
    auto& grad = g.params[k].mutable_grad();
    if (grad.defined()) view.copy_(grad);  // accumulate into what was there
    grad = view;
  }
}

void DistStep::open_head() {
  open(head());
  if (tied()) open(embedding());
}

void DistStep::reduce(int group) {
  Group& g = groups_.at(group);
  if (g.params.empty()) return;
  if (!g.bucket.defined()) throw std::logic_error(fmt::format("reduce of closed group '{}'", g.out.group));
  MemoryScope scope(Category::grads);
  torch::NoGradGuard no_grad;
  if (strategy_.options_.whole_gradients) {  // all_reduce in place: the bucket becomes the group's gradient
    PhaseScope phase(fmt::format("{} all_reduce", g.out.group));
    comm_->all_reduce(g.bucket, grad_op_, g.out.group + " gradients");  // (padded)
    g.out.whole = true;
    if (!g.out.shard.defined()) {
      g.out.shard = g.bucket;  // close() lets the bucket's handle go; the gradient keeps its memory
      return;
    }
    g.out.shard.add_(g.bucket);  // a later micro-batch's
    g.bucket.zero_();
    return;
  }
  PhaseScope phase(fmt::format("{} reduce_scatter", g.out.group));
  auto part = comm_->reduce_scatter(g.bucket, grad_op_, g.out.group + " gradients");  // (padded / R)
  if (g.out.shard.defined())
    g.out.shard.add_(part);
  else
    g.out.shard = part;
  g.bucket.zero_();  // Gloo reduced it in place; the next contributions start from zero
}

void DistStep::close(int group) {
  Group& g = groups_.at(group);
  for (auto& p : g.params) p.mutable_grad().reset();
  g.bucket = torch::Tensor();
}

void DistStep::gather_layer(int64_t i) {
  if (!strategy_.options_.shard_params) return;
  auto& lp = strategy_.state_->layers.at(i);
  if (lp.gathered) return;
  PhaseScope phase(fmt::format("layer {} all_gather", i));
  MemoryScope scope(Category::params);
  auto full = comm_->all_gather(on_device(lp), fmt::format("layer {} parameters", i));  // (padded)
  for (size_t k = 0; k < lp.params.size(); ++k)
    lp.params[k].set_data(
        full.narrow(0, lp.offsets[k], c10::multiply_integers(lp.shapes[k])).view(lp.shapes[k]));
  lp.gathered = true;
}

void DistStep::release_layer(int64_t i) {
  if (!strategy_.options_.shard_params) return;
  auto& lp = strategy_.state_->layers.at(i);
  for (auto& p : lp.params) p.set_data(torch::empty({0}, p.options().requires_grad(false)));
  lp.gathered = false;
}

std::vector<torch::Tensor> DistStep::checkpointed_forward(int64_t rows) {
  const Model& m = in_.model;
  if (!strategy_.options_.shard_params) return bpbench::checkpointed_forward(m, batch_.input_ids, rows);
  PhaseScope phase("forward");
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> xs;
  {
    MemoryScope scope(Category::checkpoints);
    xs.push_back(m.embed(batch_.input_ids));  // (N, T, d)
  }
  for (int64_t i = 0; i < m.config.layers; ++i) {
    gather_layer(i);
    MemoryScope scope(Category::checkpoints);
    xs.push_back(m.layer_in_chunks(i, xs.back(), rows));  // (N, T, d)
    release_layer(i);
  }
  return xs;
}

torch::Tensor DistStep::layers_backward(std::vector<torch::Tensor>& xs, torch::Tensor dy,
                                        const Layer& layer) {
  const Model& m = in_.model;
  for (int64_t i = m.config.layers - 1; i >= 0; --i) {
    PhaseScope phase(fmt::format("layer {} backward", i));
    gather_layer(i);
    open(this->layer(i));
    {
      MemoryScope scope(Category::activations);
      auto x_in = xs[i].detach().requires_grad_(m.input_gradient_needed(i));
      xs[i] = torch::Tensor();
      layer(i, x_in).backward(dy);
      dy = x_in.grad();  // (N, rows, d)
    }
    reduce_and_close(this->layer(i));
    release_layer(i);
  }
  return dy;
}

void DistStep::embedding_backward(const torch::Tensor& dx) {
  open(embedding());
  bpbench::embedding_backward(in_.model, batch_.input_ids, dx);
  reduce_and_close(embedding());
}

torch::Tensor DistStep::finish(const torch::Tensor& local_loss) {
  auto& st = *strategy_.state_;
  for (auto& g : groups_) {
    if (g.params.empty()) continue;
    if (!g.out.shard.defined())
      throw std::logic_error(fmt::format("{}: group '{}' was never reduced", strategy_.name(), g.out.group));
    st.shards.push_back(std::move(g.out));
  }
  groups_.clear();
  const torch::Tensor loss = global_loss(local_loss);
  comm_->settle();  // nccl: the device seconds of the step's last collective (comm.h)
  st.last_comm = comm_->stats_with_subgroups().since(comm_before_);
  st.comm = comm_;
  return loss;
}

torch::Tensor DistStep::global_loss(const torch::Tensor& local_loss) {
  MemoryScope scope(Category::comm);
  auto loss = local_loss.detach().to(torch::kDouble).reshape({1}).clone();
  comm_->all_reduce(loss, loss_op_, "loss");  // SFT: shares add up; others: mean of equal-sized means
  return loss.reshape({}).to(local_loss.scalar_type());
}

}  // namespace bpbench::dist
