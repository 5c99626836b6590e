// attention_kernels.h: the kernels behind causal_attention (ops.h), one per device and dtype, and the rule
// that picks one. Each takes the contract's shapes and alignment; none builds a score matrix except `math`,
// kept for what no fused kernel takes (float64 on CUDA, odd head sizes on CUDA). "No repeat of K/V" holds on
// CPU and in flash's forward only: the efficient kernel takes K/V repeated to Hq heads, and flash's backward
// expands dK/dV to Hq heads while it runs (memory_terms.h, Note [Flash attention buffers] and Note
// [Efficient attention buffers], counts both).
//
// Every kernel takes attention sinks (gpt-oss: sink_logits (Hq), one per query head; undefined: none), merged
// into the rows' logsumexp by attention_sinks.h's rule, or (math) as one more score column.
//
// Legend (model_config.h): N batch, Hq query heads, Hkv kv heads, c query rows, e keys, hd head size.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <tuple>

#include "harness/model/attention_blocks.h"
#include "harness/model/flop_count.h"
#include "harness/model/ops.h"

namespace bpbench {

enum class AttentionKernel {  // attention.cpp's table follows this order
  cpu_fused,  // attention_cpu.cpp: PyTorch's fused CPU kernel, prefix and diagonal merged by logsumexp
  flash,      // attention_gpu.cpp: FlashAttention-2 (bfloat16, float16), bottom-right causal, K/V per kv head
  efficient,  // attention_gpu.cpp: memory-efficient kernel (float32 too), bottom-right, K/V repeated to Hq
  math,       // attention_math.cpp: grouped matmul + softmax; materialises N x Hq x c x e scores
};

const char* attention_kernel_name(AttentionKernel kernel);

// The kernel causal_attention uses for queries on `device` of `dtype` with head size `head_dim`, with a
// sliding `window` (> 0) or none (0), with attention sinks or not. A window or sinks on CUDA in float32 run
// the math kernel: the memory-efficient kernel takes a window, but PyTorch's autograd node for it does not
// keep it for the backward, and that node has no place for the sinks.
AttentionKernel attention_kernel_for(const torch::Device& device, at::ScalarType dtype, int64_t head_dim,
                                     int64_t window = 0, bool sinks = false);

// q (N, Hq, c, hd), k and v (N, Hkv, e, hd), c <= e -> (N, Hq, c, hd); differentiable in q, k and v.
// window > 0: query row i (at key position e - c + i) sees keys e - c + i - window + 1 .. e - c + i only.
torch::Tensor cpu_fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double scale, int64_t window, const torch::Tensor& sink_logits);
// Any of them with dK, dV added into `sink` (ops.h) as the kernel's backward makes them whole: for the
// kernels without a sink of their own.
using AttentionKernelFn = torch::Tensor (*)(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                            double, int64_t, const torch::Tensor&);
torch::Tensor attention_into_sink(AttentionKernelFn run, const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, double scale, int64_t window,
                                  const torch::Tensor& sink_logits, const KvGradSink& sink);
// A sink's backward by key blocks (SinkAttention, FlashSinkAttention): `call(key0, keys, causal)` runs one
// backward kernel call for keys [key0, key0 + keys) and returns its (dQ, dK, dV) as (N, H, rows, hd) views;
// the prefix keys [0, e - c) go in blocks of at most `block` (no mask), then the diagonal [e - c, e)
// causally. Each call's dK, dV are added into the sink and released before the next. Returns dQ, the sum,
// accumulated in float32 for bfloat16 and float16 (rounded once at the end, as a single call rounds it).
// What a sink's autograd node (SinkAttention, FlashSinkAttention) keeps beside its saved q, output and
// logsumexp, in its saved_data rather than saved for backward: k and v are read-only views of the caller's K
// and V, and the sinks change between the node's forward and its backward (other nodes add into them), which
// a tensor saved for backward may not.
struct SinkNodeData {
  torch::Tensor k, v;
  KvGradSink sink;
  double scale = 0;
  void save(torch::autograd::AutogradContext* ctx) const;
  static SinkNodeData load(torch::autograd::AutogradContext* ctx);
};
using SinkBlockCall =
    std::function<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>(int64_t, int64_t, bool)>;
torch::Tensor sink_backward_by_key_blocks(int64_t c, int64_t e, int64_t block, const KvGradSink& sink,
                                          const SinkBlockCall& call);
// The same key blocks with each call's dK, dV handed to `take` (which releases them) instead of a sink's add:
// StreamBP through MLA's latent backpropagates them through the block's expansion (latent_attention.h).
using KeyBlockGrads = std::function<void(int64_t key0, int64_t keys, torch::Tensor dk, torch::Tensor dv)>;
torch::Tensor backward_by_key_blocks(int64_t c, int64_t e, int64_t block, const SinkBlockCall& call,
                                     const KeyBlockGrads& take);
// The CPU kernel's own: dK, dV added into `sink` in blocks of at most max(c, kMinSinkKeyBlock) keys
// (attention_blocks.h; under a window: attention_into_sink, its keys being few).
torch::Tensor cpu_fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double scale, int64_t window, const torch::Tensor& sink_logits,
                                  const KvGradSink& sink);
torch::Tensor flash_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              double scale, int64_t window, const torch::Tensor& sink_logits);
// The same with dK, dV added into `sink`, flash's backward by blocks of max(c, kCudaSinkKeyBlock) keys
// (attention_blocks.h; under a window: attention_into_sink).
torch::Tensor flash_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              double scale, int64_t window, const torch::Tensor& sink_logits,
                              const KvGradSink& sink);
// No window and no sinks (attention_kernel_for sends those to math).
torch::Tensor efficient_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double scale, int64_t window, const torch::Tensor& sink_logits);
torch::Tensor math_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             double scale, int64_t window, const torch::Tensor& sink_logits);

// Per (sequence, query head): the (query, key) pairs a call with c queries over the e keys ending with them
// sees, under a sliding `window` (0: none): sum over rows of min(window, e - c + i + 1).
int64_t visible_pairs(int64_t c, int64_t e, int64_t window);
// The pairs `kernel` computes for such a call: the visible ones for the fused kernels (they skip masked
// tiles; partial tiles not counted), c x e for math, and for the CPU kernel under a window the rectangles of
// its banded query blocks (attention_cpu.cpp).
int64_t executed_pairs(AttentionKernel kernel, int64_t c, int64_t e, int64_t window);
// Everything the FLOP counter needs of one call of `kernel` (flop_count.h): visible, executed and all pairs,
// and whether its backward rescores.
AttentionPairs attention_pairs(AttentionKernel kernel, int64_t c, int64_t e, int64_t window);
// attention_cpu.cpp: the CPU kernel's banded blocks under a window, as the kernel runs them.
int64_t cpu_window_executed_pairs(int64_t c, int64_t e, int64_t window);
// The CPU kernel's additive mask for a sliding window over one block of queries and keys: row r sits at
// position pos0 + r, key j at key0 + j; visible (0) where pos - window < key <= pos, else -inf. In
// window_mask_dtype(q): the kernel takes float masks for float and bfloat16 queries, double for double.
torch::Tensor window_mask(int64_t pos0, int64_t rows, int64_t key0, int64_t keys, int64_t window,
                          torch::ScalarType dtype);
torch::ScalarType window_mask_dtype(const torch::Tensor& q);

}  // namespace bpbench
