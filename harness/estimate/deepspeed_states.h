// deepspeed_states.h: DeepSpeed's own calculator of the model states, to set beside bpbench's estimate.
//
// DeepSpeed's estimate_zero2_model_states_mem_needs and estimate_zero3_model_states_mem_needs (0.19.8, in
// deepspeed/runtime/zero/stage_1_and_2.py and stage3.py) count per GPU what mixed-precision ZeRO training
// keeps whatever the sequence: 16-bit weights and gradients, float32 masters, float32 gradients and Adam's
// two moments, sharded over the GPUs by stage, and on the host what offload puts there, times a buffer factor
// (1.5 by default, on the host's bytes only). They know no sequence length: the activations, the part that
// long-context training is about, are not in them. bpbench computes the same formulas here, so `bpbench
// estimate --train` prints them beside its own model-state part (tests/peers check them against the real
// functions).
#pragma once

#include <cstdint>
#include <string>

namespace bpbench {

struct DeepSpeedModelStates {
  int stage = 2;          // 2 or 3
  int64_t gpu_bytes = 0;  // per GPU
  int64_t cpu_bytes = 0;  // per node, the buffer factor included
  std::string function;   // "estimate_zero2_model_states_mem_needs"
  std::string formula;    // the GPU's, as the source writes it: "2P + 18P/N"
};

// P parameters (DeepSpeed counts every parameter), the largest module's own (for ZeRO-3), `gpus` ranks of
// which min(gpus, 8) a node. offload_optimizer: cpu_offload; offload_params: ZeRO-3's cpu_offload_params.
DeepSpeedModelStates deepspeed_model_states(int stage, int64_t params, int64_t largest_layer_params,
                                            int64_t gpus, bool offload_optimizer, bool offload_params = false,
                                            double buffer_factor = 1.5);

}  // namespace bpbench
