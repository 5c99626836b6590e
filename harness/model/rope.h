// rope.h: the rotary position embedding of a model, one small piece used by every strategy through
// Model::project_q / project_kv. Which RoPE (type, theta, scaling) is harness/model/rope_config.h.
//
// The tables are computed in float64 and cast once to the model dtype, as transformers computes them in
// float32 and casts once: a float64 model stays exact, and a bfloat16 model gets correctly rounded tables.
#pragma once

#include <torch/torch.h>

#include "harness/model/rope_config.h"

namespace bpbench {

// The inverse frequencies (hd/2), float64 on `device`, that `rope` gives a sequence of seq_len tokens (only
// dynamic depends on seq_len).
torch::Tensor rope_inverse_frequencies(const RopeConfig& rope, int64_t head_dim, int64_t seq_len,
                                       const torch::Device& device);

// cos and sin at positions pos0 .. pos0 + rows - 1 of a seq_len-token sequence, (rows, hd) each in options'
// dtype and device, already multiplied by yarn's attention factor.
struct RopeTables {
  torch::Tensor cos, sin;
};
RopeTables rope_tables(const RopeConfig& rope, int64_t head_dim, int64_t pos0, int64_t rows, int64_t seq_len,
                       const torch::TensorOptions& options);

// x rotated to its absolute positions: x: (N, H, rows, hd) at positions pos0 .. pos0 + rows - 1 of a
// seq_len-token sequence -> same shape. A chunk [s, e) passes pos0 = s (never 0) and the whole T.
torch::Tensor apply_rope(const torch::Tensor& x, int64_t pos0, int64_t seq_len, const RopeConfig& rope);

}  // namespace bpbench
