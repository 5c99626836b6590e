// attention_partial.h: attention of a block of queries over one block of keys, returned with its logsumexp so
// that blocks computed apart (and on other ranks: ring context parallelism, impls/machinery/ring_attention.h)
// merge into one softmax over all their keys; and the backward of one such pair given the MERGED output and
// logsumexp, which recomputes the pair's true probabilities exp(s - lse), so that the pairs' dQ terms add up
// to dQ and each pair's dK, dV are its keys' whole share. The same split as the CPU kernel's prefix and
// diagonal (attention_cpu.cpp), with the pairs chosen by the caller.
//
// Legend (model_config.h): N batch, Hq query heads, Hkv kv heads (Hq a multiple), c query rows, e keys, hd
// head size. Kernels: PyTorch's fused CPU kernel on the CPU (K/V per kv head, no repeat); on CUDA, where the
// model's attention runs FlashAttention-2 (bfloat16, float16: attention_kernels.h), flash's own forward,
// which returns the logsumexp, and its backward given the merged output and logsumexp; elsewhere the math
// form's grouped matmuls (the scores materialised, c x e per head).
#pragma once

#include <torch/torch.h>

#include <tuple>

namespace bpbench {

enum class KeyBlockMask {
  all,     // every query sees every key: the key block lies wholly before the query block
  causal,  // c = e, the same positions: query row i sees keys 0..i
};

// A sliding window over one pair (Gemma 3's local layers on the ring): query row i, at position query0 + i,
// sees key j, at key0 + j, where query0 + i - window < key0 + j <= query0 + i. The caller passes only rows
// that see at least one of the pair's keys (a fully hidden row has no softmax to merge).
struct KeyBand {
  int64_t query0 = 0, key0 = 0, window = 0;
};

enum class PartialKernel {
  cpu_fused,   // PyTorch's fused CPU kernel (the CPU's)
  cuda_flash,  // FlashAttention-2 through ATen (CUDA, where attention_kernel_for picks flash)
  math,        // grouped matmuls, the scores materialised (every other case)
};
PartialKernel partial_kernel_for(const torch::Device& device, at::ScalarType dtype, int64_t head_dim);

struct PartialAttention {
  torch::Tensor out;  // (N, Hq, c, hd), in q's dtype
  torch::Tensor lse;  // (N, Hq, c), float32 for reduced-precision q (the kernels' accumulation), else q's
};

// q (N, Hq, c, hd), k and v (N, Hkv, e, hd). Not differentiable (the callers' autograd nodes own the
// backward: partial_attention_backward).
PartialAttention partial_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   double scale, KeyBlockMask mask);
PartialAttention partial_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   double scale, KeyBlockMask mask, PartialKernel kernel);

// The same under a window's band: the CPU kernel with the band as an additive mask (every score computed);
// every other device the math form, the band masked (flash's own window is aligned to the pair's corner, not
// to positions; not wired).
PartialAttention partial_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   double scale, const KeyBand& band);

// `acc` becomes, in place, the attention over its keys and `next`'s: lse = log(e^lse_a + e^lse_n), out
// weighted by e^(lse_a - lse) and e^(lse_n - lse) in lse's dtype, rounded to out's once. acc's tensors may be
// views of the caller's buffers (the ring writes each query block's rows of one (N, Hq, 2b, hd) output);
// what the merge allocates is transient: two (N, Hq, c) (the new lse, one weight at a time) and one (N, Hq,
// c, hd) in lse's dtype (and, for reduced-precision out, the two upcast copies). A caller's first pair is
// copied in, not merged.
void merge_partial(const PartialAttention& acc, const PartialAttention& next);

// The pair's (dQ, dK, dV): dQ (N, Hq, c, hd) this pair's term, dK and dV (N, Hkv, e, hd) its keys' whole
// gradient, given grad_out and the merged out and lse (all of the query block's key blocks).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> partial_attention_backward(
    const torch::Tensor& grad_out, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, double scale, KeyBlockMask mask);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> partial_attention_backward(
    const torch::Tensor& grad_out, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, double scale, KeyBlockMask mask,
    PartialKernel kernel);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> partial_attention_backward(
    const torch::Tensor& grad_out, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, double scale, const KeyBand& band);

}  // namespace bpbench
