// deepspeed_states.cpp: DeepSpeed 0.19.8's formulas (deepspeed_states.h), with zero_init as its default.
#include "harness/estimate/deepspeed_states.h"

#include <algorithm>
#include <stdexcept>

namespace bpbench {

DeepSpeedModelStates deepspeed_model_states(int stage, int64_t params, int64_t largest_layer_params,
                                            int64_t gpus, bool offload_optimizer, bool offload_params,
                                            double buffer_factor) {
  if (stage != 2 && stage != 3) throw std::invalid_argument("deepspeed_model_states: stage 2 or 3");
  const int64_t per_node = std::min<int64_t>(gpus, 8), nodes = (gpus + per_node - 1) / per_node;
  const double P = static_cast<double>(params), N = static_cast<double>(gpus);
  DeepSpeedModelStates s;
  s.stage = stage;
  if (stage == 2) {
    s.function = "estimate_zero2_model_states_mem_needs";
    if (offload_optimizer) {
      s.formula = "2P";
      s.gpu_bytes = 2 * params;
      s.cpu_bytes =
          static_cast<int64_t>(P * static_cast<double>(std::max<int64_t>(4 * gpus, 16)) * buffer_factor);
    } else {
      s.formula = "2P + 18P/N";
      s.gpu_bytes = 2 * params + static_cast<int64_t>(18 * P / N);
      s.cpu_bytes = static_cast<int64_t>(P * 4 * static_cast<double>(per_node) * buffer_factor);
    }
    return s;
  }
  s.function = "estimate_zero3_model_states_mem_needs";
  const int64_t largest = 4 * largest_layer_params;
  const double node_share = 1.0 / static_cast<double>(nodes);
  if (offload_optimizer && offload_params) {
    s.formula = "4 x largest layer";
    s.gpu_bytes = largest;
    s.cpu_bytes = static_cast<int64_t>(P * 18 * node_share * buffer_factor);
  } else if (offload_optimizer) {
    s.formula = "4 x largest layer + 2P/N";
    s.gpu_bytes = largest + static_cast<int64_t>(2 * P / N);
    s.cpu_bytes = static_cast<int64_t>(P * 16 * node_share * buffer_factor);
  } else {
    s.formula = "4 x largest layer + 18P/N";
    s.gpu_bytes = largest + static_cast<int64_t>(18 * P / N);
    s.cpu_bytes = static_cast<int64_t>(static_cast<double>(largest_layer_params) * 4 *
                                       static_cast<double>(per_node) * buffer_factor);
  }
  return s;
}

}  // namespace bpbench
