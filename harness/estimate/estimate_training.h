// estimate_training.h: what a training run adds to a step's estimate (estimate.cpp calls them): AdamW's
// tensors on one process or over one rank's shards, on the device or offloaded, and ZeRO-3's layer shards.
// docs/estimate.md, "Training runs", derives each term.
#pragma once

#include <cstdint>

#include "harness/estimate/estimate.h"
#include "harness/model/memory_terms.h"
#include "harness/model/model_config.h"
#include "impls/machinery/dist_common.h"

namespace bpbench::estimate_detail {

// The most elements of one trainable tensor of a layer, and of the model.
int64_t largest_layer_numel(const MemoryTerms& D);
int64_t largest_trainable_numel(const MemoryTerms& D);
// One process: `P` trainable parameters, the largest of them `largest` elements.
void add_training_run(const TrainEstimate& t, const MemoryTerms& D, int64_t P, int64_t largest,
                      MemoryEstimate& e);
// One rank of a distributed strategy: `shards` bytes of its gradients (shards, or whole under none and
// zero1); `sharding` says where its optimizer and parameters live (offload_params: the layer slices' new
// weights stay on the host); cuda: no Gloo flat copy.
void add_sharded_training_run(const TrainEstimate& t, const MemoryTerms& D, int64_t shards,
                              int64_t largest_in_layer, bool cuda, const dist::DistOptions& sharding,
                              MemoryEstimate& e);
// A layer's parameters, every one (frozen ones too), and ZeRO-3's sharding of them in `e`.
int64_t layer_parameters(const ModelConfig& c, int64_t adapters);
void shard_layer_parameters(const MemoryTerms& D, int64_t layer, MemoryEstimate& e);
// offload parameters: those L shards in host memory; each layer's gather, forward and backward, copies its
// shard in.
void offload_layer_shards(const MemoryTerms& D, int64_t layer, MemoryEstimate& e);

}  // namespace bpbench::estimate_detail
