// estimate_training.cpp: estimate_training.h.
#include "harness/estimate/estimate_training.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

namespace bpbench::estimate_detail {

// The most elements of one trainable tensor of a layer, and of the model: AdamW's step holds two temporaries
// of that size.
int64_t largest_layer_numel(const MemoryTerms& D) {
  const int64_t mlp = D.moe() ? D.Ie : D.I;  // a routed MLP's widest is an expert's (the router: E x d)
  const int64_t widest = std::max({D.d, D.Aq, D.Akv, mlp});
  if (!D.full) return D.r * widest;  // a LoRA factor: (r, in) or (out, r)
  return std::max({mlp * D.d, D.E * D.d, D.Aq * D.d, D.Akv * D.d});
}
int64_t largest_trainable_numel(const MemoryTerms& D) {
  return D.full ? std::max(D.V * D.d, largest_layer_numel(D)) : largest_layer_numel(D);  // embedding: V x d
}

namespace {

// Offload optimizer (harness/run/train_optimizer.h): what AdamW sees is a host copy of each of the P weights
// it updates, with a host gradient (o bytes each: float32 with "mixed", else the model's), its two moments,
// and its step's two temporaries of the largest tensor, all in host memory; the device holds none of it.
// Each step copies the P gradients out and the new weights back (s bytes each): `back` of them, the P less
// those of offloaded parameter shards, which stay on the host.
void offload_optimizer_to_host(int64_t P, int64_t back, int64_t largest, int64_t o, int64_t s,
                               MemoryEstimate& e) {
  e.optimizer = 4 * P * o;
  e.host_bytes += e.optimizer + 2 * largest * o;
  e.offload_traffic_bytes += (P + back) * s;
}

}  // namespace

// A training run around the step (harness/run/train_loop.cpp), `P` trainable parameters, the largest tensor
// of them `largest` elements:
// - every batch of the run is built before it and kept;
// - AdamW's moments exp_avg and exp_avg_sq (zeros_like each optimized tensor, made by the first optimizer
//   step), in float32 with precision "mixed", where float32 master weights and their gradients (made before
//   step 1) are what the optimizer updates; in the model dtype with precision "model";
// - so every forward + backward from step 2 on runs with all of it alive (step 1: the masters);
// - the optimizer step itself: for each tensor, `(exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps)`
//   holds the square root and the quotient at once, two temporaries of the tensor's size. The gradients'
//   norm and clipping run in place (the norms are scalars).
// With the optimizer offloaded every one of these tensors is in host memory (offload_optimizer_to_host).
void add_training_run(const TrainEstimate& t, const MemoryTerms& D, int64_t P, int64_t largest,
                      MemoryEstimate& e) {
  e.batch *= t.batches;
  e.base = e.params + e.grads + e.batch;
  const int64_t o = t.mixed ? 4 : D.s;  // element size of the optimized tensors and the moments
  if (t.offload_optimizer) return offload_optimizer_to_host(P, P, largest, o, D.s, e);
  const int64_t masters = t.mixed ? 2 * P * 4 : 0, moments = 2 * P * o;
  e.optimizer = masters + moments;
  const EstimateTerm masters_term{"2 x P*4: float32 master weights and their gradients (mixed)", masters};
  const EstimateTerm moments_term{fmt::format("2 x P*{}: AdamW's exp_avg and exp_avg_sq", o), moments};
  for (auto& p : e.phases) {
    if (t.steps >= 2) {
      p.terms.push_back({"the optimizer's tensors, alive from step 2 on (masters, moments)", e.optimizer});
      p.bytes += e.optimizer;
    } else if (masters > 0) {
      p.terms.push_back(masters_term);
      p.bytes += masters;
    }
  }
  PhaseEstimate step{"optimizer step", 0, {}};
  if (masters > 0) step.terms.push_back(masters_term);
  step.terms.push_back(moments_term);
  step.terms.push_back({fmt::format("2 x largest trainable tensor*{}: sqrt(exp_avg_sq) and its quotient", o),
                        2 * largest * o});
  for (const auto& term : step.terms) step.bytes += term.bytes;
  e.phases.push_back(step);
}

// The same around one rank's step of a distributed strategy (harness/run/train_sharded.cpp), ZeRO-2: the
// rank's AdamW updates its slice of every gradient group, rank 0's [0, padded / R) the largest (the last
// rank's padding is nobody's), so its P is its shards' elements, `shards` bytes / s. The optimizer is made
// after step 1 (its layout is step 1's shards): from step 2 on every phase runs with it alive. Then:
// - the optimizer step: the step's shards, the optimizer's tensors and 2 x the largest slice AdamW updates
//   at once, on the rank with the most (a parameter's part of a shard: the embedding's, else a slice of the
//   untied head, else at most a layer's widest tensor);
// - offload optimizer: its tensors all in host memory (offload_optimizer_to_host), the step's on the host;
// - the new weights all-gathered group by group: the rank's slice copied into a send buffer (padded / R)
//   and the gathered group (padded), both in the model dtype, the largest group's; Gloo (CPU) gathers
//   through one more flat copy. zero3: the embedding's and the head's only (a layer's slice is its shard).
// The step's losses (0-dim, f bytes each) are alive through both.
void add_sharded_training_run(const TrainEstimate& t, const MemoryTerms& D, int64_t shards,
                              int64_t largest_in_layer, bool cuda, const dist::DistOptions& sharding,
                              MemoryEstimate& e) {
  e.batch *= t.batches;
  e.base = e.params + e.grads + e.batch;
  // The elements of rank 0's slice of a group (from zero1 on), or of the whole group (none).
  const bool everything = !sharding.shard_optimizer;
  auto slice = [&](int64_t numel) { return everything ? numel : D.bucket(numel) / D.ranks / D.s; };
  const int64_t routed = D.L - D.dense_layers;
  const int64_t layer_slices = routed * slice(D.layer_group) + D.dense_layers * slice(D.dense_layer_group);
  const int64_t P = slice(D.embedding_group) + slice(D.head_group) + layer_slices;
  const int64_t o = t.mixed ? 4 : D.s;
  const int64_t masters = t.mixed ? 2 * P * 4 : 0, moments = 2 * P * o;
  e.optimizer = masters + moments;
  const int64_t piece = std::min(D.layer_group ? slice(D.layer_group) : 0, largest_in_layer);
  // The most any rank updates at once: a later rank's slice of an untied head lies all in the LM head; none:
  // the embedding, else the LM head (its group less the final norm), else a layer's widest tensor.
  const int64_t largest_slice =
      everything
          ? std::max({D.embedding_group, D.head_group > D.d ? D.head_group - D.d : D.head_group, piece})
          : std::max({slice(D.embedding_group), slice(D.head_group), piece});
  if (t.offload_optimizer)
    offload_optimizer_to_host(P, sharding.offload_params ? P - layer_slices : P, largest_slice, o, D.s, e);
  const int64_t on_device = t.offload_optimizer ? 0 : e.optimizer;
  if (t.steps >= 2 && on_device > 0)
    for (auto& p : e.phases) {
      p.terms.push_back(
          {"the optimizer's tensors, alive from step 2 on (this rank's moments, masters)", on_device});
      p.bytes += on_device;
    }
  const EstimateTerm shards_term{sharding.whole_gradients ? "this rank's whole gradients of the step"
                                                          : "this rank's gradient shards of the step",
                                 shards};
  // The micro-batches' losses (0-dim), read once the step is over.
  const EstimateTerm losses_term{"the step's losses: grad_accum x f", t.grad_accum * D.f};
  const EstimateTerm optimizer_term{t.offload_optimizer
                                        ? std::string("this rank's optimizer: in host memory")
                                        : fmt::format("this rank's optimizer: 2 x P_r*{} moments{}", o,
                                                      t.mixed ? " + 2 x P_r*4 masters" : ""),
                                    on_device};
  PhaseEstimate step{"optimizer step", 0, {shards_term, optimizer_term, losses_term}};
  if (!t.offload_optimizer)
    step.terms.push_back({fmt::format("2 x the largest slice*{}: sqrt(exp_avg_sq) and its quotient", o),
                          2 * largest_slice * o});
  std::vector<PhaseEstimate*> added = {&step};
  // Offloaded, the shards' slices are copied into the host gradients and the new weights back: no device
  // tensor beyond the step's. none: every rank has every new weight, nothing is gathered.
  PhaseEstimate gather{"weights all_gather", 0, {shards_term, optimizer_term, losses_term}};
  if (!everything) {
    int64_t group = std::max(D.bucket(D.embedding_group), D.bucket(D.head_group)) / D.s;
    if (!sharding.shard_params)  // zero3: a layer's slice is its parameter shard, not gathered
      group = std::max({group, D.bucket(D.layer_group) / D.s, D.bucket(D.dense_layer_group) / D.s});
    gather.terms.push_back({fmt::format("the largest group's send buffer and gathered weights: "
                                        "(padded / R + padded)*{}",
                                        D.s),
                            (group / D.ranks + group) * D.s});
    if (!cuda)  // Gloo gathers a list of tensors through a flat output of its own, then copies it out
      gather.terms.push_back({"Gloo's flat copy of the gathered weights: padded*s", group * D.s});
    added.push_back(&gather);
  }
  for (auto* p : added) {
    for (const auto& term : p->terms) p->bytes += term.bytes;
    e.phases.push_back(*p);
  }
}

// A layer's parameters, every one (frozen ones too): what ZeRO-3 shards and gathers. A routed model's
// largest kind of layer.
int64_t layer_parameters(const ModelConfig& c, int64_t adapters) {
  const int64_t outside = c.vocab * c.hidden + c.hidden + (c.tie_embeddings ? 0 : c.vocab * c.hidden);
  return (c.parameter_count() - outside + adapters) / c.layers;
}

// ZeRO-3 (sharding zero3; impls/machinery/dist_common.h: shard_params): each layer's parameters live as this
// rank's shard of the flattened layer padded to a multiple of R, gathered whole around the layer's forward
// and again around its backward, and freed after. So the parameters hold L shards instead of L layers, and
// every phase inside a layer (the forward, each layer backward) one gathered layer more. Not modelled: the
// moment of the all_gather itself, when the gathered layer and, on the CPU, Gloo's flat buffer it fills first
// are alive with whatever the layer's first phase has not made yet.
void shard_layer_parameters(const MemoryTerms& D, int64_t layer, MemoryEstimate& e) {
  const int64_t gathered = D.bucket(layer), shard = gathered / D.ranks;
  e.params -= D.L * (layer * D.s - shard);
  for (auto& p : e.phases) {
    if (p.name.rfind("layer", 0) != 0 && p.name != "forward") continue;
    p.terms.push_back({"the gathered layer's parameters (zero3): padded layer*s", gathered});
    p.bytes += gathered;
  }
}

// ZeRO-Infinity's offload_param (dist_common.h: offload_params): the shards leave the device's base for the
// host. A gather copies the shard to the device and all-gathers from that copy, which dies with the gather:
// the moment shard_layer_parameters leaves out, so no phase changes. Each step copies every shard in twice.
// (The optimizer's new weights of a layer slice land in the host shard: add_sharded_training_run.)
void offload_layer_shards(const MemoryTerms& D, int64_t layer, MemoryEstimate& e) {
  const int64_t shards = D.L * (D.bucket(layer) / D.ranks);
  e.params -= shards;
  e.host_bytes += shards;
  e.micro_batch_traffic_bytes += 2 * shards;
  e.offload_traffic_bytes += 2 * shards;
}

}  // namespace bpbench::estimate_detail
