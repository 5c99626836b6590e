// ops.h: the numerical building blocks of the decoder, shared by every strategy through Model's pieces.
//
// Shapes use the legend of model_config.h. All functions are differentiable with LibTorch autograd.
#pragma once

#include <torch/torch.h>

namespace bpbench {

// The dtype losses and norms are computed in: float32 for float32/bfloat16 models, float64 for float64 ones
// (Hugging Face upcasts to float32; a float64 reference must stay float64).
at::ScalarType compute_dtype(at::ScalarType model_dtype);

// How RMSNorm is computed.
//   hf:    Hugging Face's formula: the input upcast whole to compute_dtype, normalised, cast back, then
//          scaled. In bfloat16 that puts float32 copies of the activation in the autograd graph.
//   fused: PyTorch's fused kernel (at::_fused_rms_norm): float32 accumulation inside the kernel, only the
//          input and a per-row rstd saved; it scales before the single cast, so bfloat16 values can differ
//          from hf's in the last bit. On CUDA it is one kernel; on the CPU it is PyTorch's composite (the
//          same arithmetic as hf, in another order), which is why the CPU defaults to hf.
enum class NormKernel { hf, fused };
NormKernel default_norm_kernel(const torch::Device& device);  // fused on CUDA, hf elsewhere
const char* norm_kernel_name(NormKernel k);
// Throws std::invalid_argument naming the valid names.
NormKernel parse_norm_kernel(const std::string& name);

// RMSNorm over the last dimension with `weight` (the last dimension's width).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                       NormKernel kernel = NormKernel::hf);

// Gemma 3's RMSNorm (transformers' Gemma3RMSNorm): x upcast to compute_dtype, normalised, scaled by (1 + w)
// in compute_dtype, cast back once at the end. The weight is zero-centred; no fused kernel takes this form,
// so it is always the composite (norm_kernel selects among Qwen and Llama norms only).
torch::Tensor unit_offset_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// OLMo 2 and 3's RMSNorm (transformers' Olmo2RMSNorm): the same, scaled by w itself. In float64 and float32
// it is hf's arithmetic; in bfloat16 the scaling runs in float32 before the one rounding.
torch::Tensor rms_norm_scaled_before_cast(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// gpt-oss's expert activation (transformers' GptOssExperts._apply_gate, its constants): the gate clamped
// above at 7, up to [-7, 7], then (up + 1) * gate * sigmoid(1.702 gate). (N.., I) each -> (N.., I).
inline constexpr double kSwigluLimit = 7.0, kSwigluAlpha = 1.702;
torch::Tensor clamped_swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// Where K's and V's gradients go when the caller accumulates them itself (StreamBP's dK, dV over its
// chunks): dk and dv, the shape of k and v in any floating dtype, receive them, added, during the backward,
// and k and v are constants to autograd. The fused CPU kernel adds them key block by key block, so no
// gradient for all e keys is ever held (attention_cpu.cpp); the CUDA kernels add their whole dK and dV once
// made (attention.cpp).
struct KvGradSink {
  torch::Tensor dk, dv;
  bool defined() const { return dk.defined(); }
};

// Causal attention for a block of queries that are the LAST rows of the key range:
//   q: (N, Hq, c, hd) at global positions e-c .. e-1;   k, v: (N, Hkv, e, hd) at positions 0 .. e-1
//   -> (N, c, Hq * hd)
// Rule: the query at global position p sees keys 0..p (bottom-right causal alignment). c = e is a whole
// sequence, c < e one StreamBP chunk. GQA without a repeat of K/V: dK/dV come out already summed over each
// group. No kernel builds a score matrix (Hq x c x e) or a mask: the kernels are fused (attention.cpp says
// which runs where; attention_kernels.h lists them).
// window > 0: sliding-window attention (Gemma 3's local layers, transformers' sliding_window_overlay): the
// query at position p sees keys p - window + 1 .. p only. Positions still count back from the last key, so
// the keys may start anywhere at or before the first query's window (a StreamBP chunk [s, e) may pass keys
// from max(0, s - window + 1) on). The CPU kernel then runs banded query blocks with a small float mask each
// (attention_cpu.cpp); flash takes the window itself.
// scale: the softmax scale of the scores; 0 means hd^-1/2 (Gemma 3 passes query_pre_attn_scalar^-1/2).
// sink: where dK and dV go instead (above); undefined: to k and v through autograd.
// sink_logits (Hq): gpt-oss's attention sinks, one logit per query head in every row's softmax denominator
// (attention_sinks.h, Note [Attention sinks]); differentiable. Undefined: none.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               int64_t window = 0, double scale = 0.0, const KvGradSink& sink = {},
                               const torch::Tensor& sink_logits = {});

}  // namespace bpbench
