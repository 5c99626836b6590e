// layerwise_estimate.h: the estimate's phases that the layerwise strategies share (layerwise.h's pieces):
// the layer checkpoints, the no-grad checkpointed forward, and a whole-sequence re-forward's backward. Each
// strategy's file composes these with memory_terms.h's into its own memory_phases().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/model/memory_terms.h"
#include "harness/model/phase_builder.h"
#include "impls/interface/strategy.h"

namespace bpbench {

// `count` layer checkpoints (N, T, d) in the model dtype.
int64_t checkpoints_bytes(const MemoryTerms& D, int64_t count);

// "layer inputs ...: K x N*T*d*s" for the `count` checkpoints alive at a phase. Offloaded
// (impls/machinery/offload.h), only `offloaded_on_device` of them are on the device: two in the forward (the
// input being read and the output being built) and in a layer's backward (its own input and the next one
// down, prefetched); one at the head (x_L: layer L-1's comes back after the head). The others are named as in
// host memory.
void add_checkpoints(PhaseBuilder& p, const MemoryTerms& D, const std::string& which, int64_t count,
                     int64_t offloaded_on_device = 2);

// Whether layer 0's input x_0 is among the checkpoints or made again from the ids when layer 0's backward
// needs it (layerwise.h: FirstInputRecomputed).
enum class FirstInput { kept, recomputed };

// The layer inputs alive while layer `index` runs backward (from x_0, or x_1 where x_0 is recomputed, to
// x_index; layer 0's own input either way), and the label naming them.
int64_t layer_inputs_alive(int64_t index, FirstInput first);
std::string layer_inputs_label(int64_t index, FirstInput first);

// The no-grad checkpointed forward's high point (layerwise.h: checkpointed_forward), queries in blocks of
// `rows`: at the topmost layer of each attention type, the stored inputs, the output being built, K and V
// for all rows and one query block's attention or MLP.
PhaseEstimate checkpointed_forward_phase(const MemoryTerms& D, int64_t rows,
                                         FirstInput first = FirstInput::kept);

// A whole-sequence re-forward's attention backward at the top layer of each attention type (the largest:
// every lower checkpoint still alive), with `flows` (N, T, d) gradients in flight, named by `flow_note`.
PhaseEstimate whole_attention_backward(const MemoryTerms& D, int64_t flows, const std::string& flow_note);

// A whole-sequence re-forward's token mixer (checkpoint, mst), whose graph over all T rows is alive while
// its layer's MLP runs backward: the top layer's attention half (its K path and RoPE tables), and on a hybrid
// the topmost Gated DeltaNet block (Note [A Gated DeltaNet block over all rows], linear_memory_terms.h). Its
// layer's lower checkpoints are alive with it.
struct WholeMixer {
  int64_t layer = 0;
  bool linear = false;
  std::string name;
  int64_t bytes = 0;
};
std::vector<WholeMixer> whole_mixers(const MemoryTerms& D);

// The MLP backward of a whole-layer re-forward (checkpoint) above `mixer`: "layer mlp backward", or "layer
// linear mlp backward" at a Gated DeltaNet layer.
PhaseEstimate whole_mlp_backward(const MemoryTerms& D, const WholeMixer& mixer);

// The phases of checkpointing (checkpoint.cpp; whole or chunked head) and of StreamBP (streambp.cpp; x_0
// made again or kept), which their data-parallel versions share.
std::vector<PhaseEstimate> checkpoint_phases(const MemoryTerms& D, const Partitioning& partition,
                                             bool chunked_head);
std::vector<PhaseEstimate> streambp_phases(const MemoryTerms& D, const Partitioning& partition,
                                           FirstInput first);

// streambp's "head chunk" phase on a rank's rows view R (R.T: the rank's rows; x_0 made again), its chunks of
// logits_rows clamped to those rows: the whole sequence's clamp to T would count, at R.T < c_l < T, rows the
// rank never has (small, T = 256 on 4 ranks, c_l = 128: 5.6 MB too many). The sequence-parallel strategies'.
PhaseEstimate rows_head_chunk(const MemoryTerms& R, const Partitioning& partition);
// What StreamBP runs again (streambp.cpp), the same for one process and one rank: attention by partition,
// the layers without grad, the head in chunks, each layer's K and V values.
FlopSchedule streambp_flop_schedule();

// A data-parallel step (impls/machinery/dist_common.h, ZeRO-2) of one rank, from the single-process phases of
// the same schedule with D.N the rank's rows: no gradient is pre-allocated; each phase adds the group buckets
// open in it and the shards reduced before it, a layer's phase at the top layer or at layer 0, whichever
// holds more (going down, a layer shard more and a layer input less); then the embedding's backward.
// `first`: whether the strategy keeps x_0 (then going down a layer frees one input) or makes it again (then
// layer 0 holds one input as layer 1 does). Sequence-parallel strategies pass their rows view (D.T = Ts).
std::vector<PhaseEstimate> data_parallel_phases(const MemoryTerms& D, std::vector<PhaseEstimate> phases,
                                                FirstInput first = FirstInput::kept);

}  // namespace bpbench
