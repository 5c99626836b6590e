// ops.cpp: the dtype rule and RMSNorm (attention: attention.cpp).
#include "harness/model/ops.h"

namespace bpbench {

at::ScalarType compute_dtype(at::ScalarType model_dtype) {
  return model_dtype == at::kDouble ? at::kDouble : at::kFloat;
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const auto input_dtype = x.scalar_type();
  auto xc = x.to(compute_dtype(input_dtype));
  auto normed = xc * torch::rsqrt(xc.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(input_dtype);
}

}  // namespace bpbench
