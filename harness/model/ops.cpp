// ops.cpp: the dtype rule and RMSNorm (attention: attention.cpp).
#include "harness/model/ops.h"

#include <ATen/ops/_fused_rms_norm.h>

#include <stdexcept>
#include <string>

namespace bpbench {

at::ScalarType compute_dtype(at::ScalarType model_dtype) {
  return model_dtype == at::kDouble ? at::kDouble : at::kFloat;
}

NormKernel default_norm_kernel(const torch::Device& device) {
  return device.is_cuda() ? NormKernel::fused : NormKernel::hf;
}

const char* norm_kernel_name(NormKernel k) {
  return k == NormKernel::fused ? "fused" : "hf";
}

NormKernel parse_norm_kernel(const std::string& name) {
  if (name == "hf") return NormKernel::hf;
  if (name == "fused") return NormKernel::fused;
  throw std::invalid_argument("unknown rms_norm kernel '" + name + "' (valid: hf, fused)");
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps, NormKernel kernel) {
  if (kernel == NormKernel::fused) return std::get<0>(at::_fused_rms_norm(x, {x.size(-1)}, weight, eps));
  const auto input_dtype = x.scalar_type();
  auto xc = x.to(compute_dtype(input_dtype));
  auto normed = xc * torch::rsqrt(xc.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(input_dtype);
}

namespace {
// x upcast to compute_dtype, normalised, scaled by w (or 1 + w) in compute_dtype, cast back once.
torch::Tensor scaled_before_cast(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                                 bool unit_offset) {
  const auto input_dtype = x.scalar_type(), compute = compute_dtype(input_dtype);
  auto xc = x.to(compute);
  auto normed = xc * torch::rsqrt(xc.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (normed * (unit_offset ? 1.0 + weight.to(compute) : weight.to(compute))).to(input_dtype);
}
}  // namespace

torch::Tensor unit_offset_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return scaled_before_cast(x, weight, eps, /*unit_offset=*/true);
}

torch::Tensor rms_norm_scaled_before_cast(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return scaled_before_cast(x, weight, eps, /*unit_offset=*/false);
}

torch::Tensor clamped_swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  const auto g = gate.clamp_max(kSwigluLimit);
  return (up.clamp(-kSwigluLimit, kSwigluLimit) + 1) * (g * torch::sigmoid(g * kSwigluAlpha));
}

}  // namespace bpbench
