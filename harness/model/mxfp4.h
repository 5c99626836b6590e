// mxfp4.h: the MXFP4 weights of gpt-oss's released checkpoints (the OCP microscaling format, as
// transformers' integrations/mxfp4.py reads them), dequantized on load.
//
// A tensor W is stored as two: W_blocks (..., G, 16) uint8, two 4-bit E2M1 values a byte (the low nibble
// first), and W_scales (..., G) uint8, one E8M0 exponent per block of 32 values. Value = E2M1(nibble) x
// 2^(scale - 127), E2M1 being 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives. Each value is exact in
// bfloat16 and float32 (a 2-bit mantissa times a power of two), so dequantizing loses nothing.
#pragma once

#include <torch/torch.h>

namespace bpbench {

// W (..., G*32) in `dtype` from its blocks (..., G, 16) and scales (..., G); both uint8 on any device.
torch::Tensor dequantize_mxfp4(const torch::Tensor& blocks, const torch::Tensor& scales,
                               torch::ScalarType dtype);

}  // namespace bpbench
