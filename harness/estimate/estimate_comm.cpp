// estimate_comm.cpp: estimate_comm.h. Per step of one rank (legend: model_config.h; P ranks, U the mesh's
// Ulysses degree, R = P / U its ring, s the model dtype's bytes, f the accumulation dtype's):
//   gradients    one call per group with a trainable parameter (embedding, each layer, head), its bucket
//                padded to a multiple of P: reduce_scatter, or all_reduce under none and zero1
//                (impls/machinery/dist_common.h)
//   the loss     all_reduce of the normalisers (3 int64) and of the loss (1 float64)
//   zero3        all_gather of each layer's padded parameters, for its forward and again for its backward
//   ulysses      around each of a layer's three attention runs, q, k, v to the heads (N Ts (Aq + 2 Hk' hd) s,
//                Hk' = Hkv x its copies) and o back (N Ts Aq s); on the mesh over the U ranks of a group,
//                the rank's 2b/U rows (sequence_parallel.h, mesh_attention.h)
//   ring         the K/V pair (2 N Hk hd 2b s) in each run's sends, the dK/dV accumulator (2 N Hk hd 2b f)
//                in the backward's, as ring_sends counts them (ring_attention.h); streambp-ring's with-grad
//                run and backward in Hkv passes on the plain ring: the same bytes in Hkv x the calls
#include "harness/estimate/estimate_comm.h"

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <stdexcept>

#include "harness/estimate/estimate_training.h"
#include "harness/objectives/objective.h"
#include "impls/interface/strategy.h"
#include "impls/machinery/dist_common.h"
#include "impls/machinery/mesh_attention.h"
#include "impls/machinery/ring_attention.h"
#include "impls/machinery/sequence_parallel.h"

namespace bpbench {

using dist::Collective;

double CollectiveEstimate::wire_bytes() const {
  const double n = static_cast<double>(bytes), R = static_cast<double>(group_ranks);
  if (group_ranks <= 1) return 0;
  switch (kind) {
    case Collective::reduce_scatter:
    case Collective::all_gather:
    case Collective::all_to_all:
      return (R - 1) / R * n;
    case Collective::all_reduce:
      return 2 * (R - 1) / R * n;
    case Collective::broadcast:
    case Collective::send_recv:
      return n;
    case Collective::barrier:
      return 0;
  }
  return 0;
}

int64_t CommEstimate::calls(Collective kind) const {
  int64_t n = 0;
  for (const auto& c : collectives) n += c.kind == kind ? c.calls : 0;
  return n;
}

int64_t CommEstimate::bytes(Collective kind) const {
  int64_t n = 0;
  for (const auto& c : collectives) n += c.kind == kind ? c.bytes : 0;
  return n;
}

namespace {

bool spans_ranks(const Strategy& s) {
  return s.data_parallel() || s.sequence_parallel();
}

// The gradient groups' calls and padded bytes (an empty group is skipped, as DistStep skips it).
void gradient_groups(const MemoryTerms& D, int64_t& calls, int64_t& bytes) {
  auto add = [&](int64_t numel, int64_t count) {
    if (numel <= 0 || count <= 0) return;
    calls += count;
    bytes += count * D.bucket(numel);
  };
  add(D.embedding_group, 1);
  add(D.layer_group, D.L - D.dense_layers);
  add(D.dense_layer_group, D.dense_layers);
  add(D.head_group, 1);
}

void add_ulysses(const EstimateInput& in, const MemoryTerms& D, int64_t group_ranks, CommGroup group,
                 int64_t rows, CommEstimate& e) {
  const int64_t copies = dist::kv_copies(D.Hkv, group_ranks);
  const int64_t qkv = D.N * rows * (D.Aq + 2 * D.Hkv * copies * D.hd) * D.s, o = D.N * rows * D.Aq * D.s;
  const int64_t runs = 3 * in.config.layers;  // the no-grad forward, again with grad, its backward
  e.collectives.push_back(
      {Collective::all_to_all, "q, k, v to the heads", group, group_ranks, runs, runs * qkv});
  e.collectives.push_back({Collective::all_to_all, "o to the rows", group, group_ranks, runs, runs * o});
}

void add_ring(const EstimateInput& in, const MemoryTerms& D, const CommSchedule& schedule, CommEstimate& e) {
  const ModelConfig& c = in.config;
  const int64_t P = in.ranks, U = in.ulysses_degree, R = P / U;
  dist::ZigzagLayout ring = dist::zigzag_layout(in.seq_len, P, 0);
  int64_t kv_heads = D.Hkv;
  const CommGroup group = U > 1 ? CommGroup::ring : CommGroup::world;
  if (U > 1) {
    const dist::MeshLayout mesh = dist::mesh_layout(in.seq_len, U, R, 0);
    ring = mesh.ring_layout();
    kv_heads = D.Hkv * dist::kv_copies(D.Hkv, U) / U;
    add_ulysses(in, D, U, CommGroup::ulysses, mesh.rows(), e);
  }
  const int64_t passes = schedule.ring_per_kv_head && U == 1 ? D.Hkv : 1;
  const int64_t pair = 2 * D.N * kv_heads * ring.rows() * D.hd;  // elements of K and V, or dK and dV
  int64_t pair_calls = 0, pair_sends = 0, grad_calls = 0, grad_sends = 0;
  for (int64_t i = 0; i < c.layers; ++i) {
    const dist::RingSends sends = dist::ring_sends(ring, c.window_of(i));
    pair_calls += sends.forward + passes * (sends.forward + sends.backward_pairs);
    pair_sends += 2 * sends.forward + sends.backward_pairs;
    grad_calls += passes * sends.backward_grads;
    grad_sends += sends.backward_grads;
  }
  e.collectives.push_back(
      {Collective::send_recv, "K/V round the ring", group, R, pair_calls, pair_sends * pair * D.s});
  e.collectives.push_back(
      {Collective::send_recv, "dK/dV round the ring", group, R, grad_calls, grad_sends * pair * D.f});
}

// What the collectives need of `in`: they follow the model's shapes alone, so the memory estimate's gaps
// (the sequence-parallel strategies on MLA, windows on data parallelism, micro-batches) are not theirs.
void check_comm_input(const EstimateInput& in) {
  if (in.seq_len <= 0 || in.sequences <= 0 || in.ranks < 1)
    throw std::invalid_argument("estimate: seq_len, sequences and ranks must be > 0");
  check_estimate_sharding(in.sharding);
  if (in.ulysses_degree < 1 || in.ranks % in.ulysses_degree != 0)
    throw std::invalid_argument(
        fmt::format("estimate: --ulysses-degree {} does not divide --ranks {}", in.ulysses_degree, in.ranks));
}

// One rank of a distributed strategy, as both estimates read it; none for a single process.
struct Rank {
  std::unique_ptr<Strategy> strategy;
  MemoryTerms D;
  dist::DistOptions sharding;
};
std::optional<Rank> rank_of(const EstimateInput& in) {
  check_comm_input(in);
  auto strategy = make_strategy(in.impl);  // throws naming the valid ones
  if (!spans_ranks(*strategy) || in.ranks < 2) return std::nullopt;
  return Rank{std::move(strategy), estimate_terms(in), dist::DistOptions::of_sharding(in.sharding)};
}

}  // namespace

CommEstimate estimate_step_comm(const EstimateInput& in) {
  CommEstimate e;
  const auto rank = rank_of(in);
  if (!rank) return e;
  const auto& [strategy, D, sharding] = *rank;
  const int64_t P = in.ranks;

  int64_t calls = 0, bytes = 0;
  gradient_groups(D, calls, bytes);
  e.collectives.push_back({sharding.whole_gradients ? Collective::all_reduce : Collective::reduce_scatter,
                           "gradients", CommGroup::world, P, calls, bytes});
  e.collectives.push_back(
      {Collective::all_reduce, "loss normalisers and loss", CommGroup::world, P, 2, 4 * 8});
  // A non-linear objective (DPO) on sequence-parallel ranks: every rank's part of the sequence sums (N).
  if (strategy->sequence_parallel() && !make_objective(in.objective)->outer_is_linear())
    e.collectives.push_back({Collective::all_reduce, "sequence sums", CommGroup::world, P, 1, D.N * D.f});
  if (sharding.shard_params) {
    // Every parameter of a layer, frozen ones too; full fine-tuning: its gradient group.
    const int64_t routed =
        D.full ? D.layer_group : estimate_detail::layer_parameters(in.config, D.L * D.layer_group);
    const int64_t dense = D.full ? D.dense_layer_group : routed;
    const int64_t L = D.L - D.dense_layers;
    e.collectives.push_back({Collective::all_gather, "layer parameters", CommGroup::world, P, 2 * D.L,
                             2 * (L * D.bucket(routed) + D.dense_layers * D.bucket(dense))});
  }
  const CommSchedule schedule = strategy->comm_schedule();
  if (schedule.exchange == CommSchedule::Exchange::ulysses) {
    if (in.config.mla && dist::latent_travels(in.config, dist::sequence_layout(in.config, in.seq_len, P, 0)))
      throw std::invalid_argument(fmt::format(
          "estimate: the collectives of {} on {}'s latent attention (its latent rows gathered per layer) are "
          "not estimated yet (valid: the rings, data parallelism, or a model without MLA)",
          in.impl, in.config.name));
    add_ulysses(in, D, P, CommGroup::world, (in.seq_len + P - 1) / P, e);
  } else if (schedule.exchange == CommSchedule::Exchange::ring)
    add_ring(in, D, schedule, e);
  return e;
}

CommEstimate estimate_optimizer_comm(const EstimateInput& in) {
  CommEstimate e;
  const auto rank = rank_of(in);
  if (!rank || !rank->sharding.shard_optimizer) return e;  // none: every rank updates every weight
  const int64_t P = in.ranks;
  e.collectives.push_back({Collective::all_reduce, "gradient norm", CommGroup::world, P, 1, 8});
  int64_t calls = 0, bytes = 0;
  MemoryTerms gathered = rank->D;
  if (rank->sharding.shard_params)
    gathered.layer_group = gathered.dense_layer_group = 0;  // the next forward's
  gradient_groups(gathered, calls, bytes);
  e.collectives.push_back({Collective::all_gather, "new weights", CommGroup::world, P, calls, bytes});
  return e;
}

}  // namespace bpbench
