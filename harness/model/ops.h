// ops.h: the numerical building blocks of the decoder, shared by every strategy through Model's pieces.
//
// Shapes use the legend of model_config.h. All functions are differentiable with LibTorch autograd.
#pragma once

#include <torch/torch.h>

namespace bpbench {

// The dtype losses and norms are computed in: float32 for float32/bfloat16 models, float64 for float64 ones
// (Hugging Face upcasts to float32; a float64 reference must stay float64).
at::ScalarType compute_dtype(at::ScalarType model_dtype);

// RMSNorm over the last dimension, Hugging Face style: normalise in compute_dtype, cast back, scale by
// weight.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// Causal attention for a block of queries that are the LAST rows of the key range:
//   q: (N, Hq, c, hd) at global positions e-c .. e-1;   k, v: (N, Hkv, e, hd) at positions 0 .. e-1
//   -> (N, c, Hq * hd)
// Rule: the query at global position p sees keys 0..p (bottom-right causal alignment). c = e is a whole
// sequence, c < e one StreamBP chunk. GQA without a repeat of K/V: dK/dV come out already summed over each
// group. No kernel builds a score matrix (Hq x c x e) or a mask: the kernels are fused (attention.cpp says
// which runs where; attention_kernels.h lists them).
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

}  // namespace bpbench
