// mxfp4.cpp: MXFP4 dequantization (mxfp4.h).
#include "harness/model/mxfp4.h"

namespace bpbench {

torch::Tensor dequantize_mxfp4(const torch::Tensor& blocks, const torch::Tensor& scales,
                               torch::ScalarType dtype) {
  TORCH_CHECK(blocks.scalar_type() == torch::kByte && scales.scalar_type() == torch::kByte,
              "MXFP4: blocks and scales must be uint8, got ", blocks.scalar_type(), " and ",
              scales.scalar_type());
  TORCH_CHECK(blocks.dim() >= 2 && blocks.size(-1) == 16 &&
                  blocks.sizes().slice(0, blocks.dim() - 1) == scales.sizes(),
              "MXFP4: blocks (..., G, 16) and scales (..., G), got ", blocks.sizes(), " and ",
              scales.sizes());
  // E2M1's 16 codes: sign in the top bit, then 0, 0.5, 1, 1.5, 2, 3, 4, 6.
  const auto table =
      torch::tensor({0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0},
                    torch::TensorOptions().dtype(torch::kFloat).device(blocks.device()));
  const auto low = table.index_select(0, blocks.bitwise_and(0x0F).flatten().to(torch::kLong));
  const auto high = table.index_select(0, blocks.bitwise_right_shift(4).flatten().to(torch::kLong));
  // (..., G, 16, 2): each byte's low value, then its high one.
  auto values = torch::stack({low.view(blocks.sizes()), high.view(blocks.sizes())}, -1);
  const auto exponents = scales.to(torch::kInt) - 127;  // (..., G)
  values = torch::ldexp(values, exponents.unsqueeze(-1).unsqueeze(-1).to(torch::kFloat));
  auto shape = scales.sizes().vec();
  shape.back() *= 32;
  return values.reshape(shape).to(dtype);
}

}  // namespace bpbench
