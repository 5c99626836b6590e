// attention.cpp: causal_attention (ops.h), which picks a kernel (attention_kernels.h) by device and dtype.
//
// CPU: always the fused CPU kernel (float64, float32, bfloat16). CUDA: flash for bfloat16/float16 (the
// fastest; K/V stay per kv head, though its backward expands dK/dV to Hq heads while it runs), the
// memory-efficient kernel for float32 (the paper's fp32 columns; it takes K/V repeated to Hq heads), and math
// for float64 (no fused CUDA kernel takes it; float64 on a GPU is for exactness checks, not length: it holds
// N x Hq x c x e scores).
#include <algorithm>
#include <cmath>

#include "harness/model/attention_kernels.h"
#include "harness/model/flop_count.h"
#include "harness/model/ops.h"

namespace bpbench {

namespace {
struct KernelEntry {
  const char* name;
  AttentionKernelFn run;
};
// Indexed by AttentionKernel, in its order.
constexpr KernelEntry kKernels[] = {{"cpu-fused", cpu_fused_attention},
                                    {"flash", flash_attention},
                                    {"efficient", efficient_attention},
                                    {"math", math_attention}};
const KernelEntry& entry(AttentionKernel kernel) {
  return kKernels[static_cast<int>(kernel)];
}
}  // namespace

const char* attention_kernel_name(AttentionKernel kernel) {
  return entry(kernel).name;
}

AttentionKernel attention_kernel_for(const torch::Device& device, at::ScalarType dtype, int64_t head_dim,
                                     int64_t window, bool sinks) {
  if (!device.is_cuda()) return AttentionKernel::cpu_fused;
  // Both CUDA kernels want 8-element aligned head rows; flash takes head sizes up to 256.
  const bool aligned = head_dim % 8 == 0;
  const bool half = dtype == at::kBFloat16 || dtype == at::kHalf;
  if (half && aligned && head_dim <= 256) return AttentionKernel::flash;
  if ((half || dtype == at::kFloat) && aligned && window <= 0 && !sinks) return AttentionKernel::efficient;
  return AttentionKernel::math;
}

int64_t visible_pairs(int64_t c, int64_t e, int64_t window) {
  if (window <= 0 || window >= e) return causal_pairs(c, e);
  // Rows at key positions p = e - c .. e - 1 see min(window, p + 1) keys: those with p + 1 <= window see p
  // + 1.
  const int64_t first = e - c, short_end = std::min(e, window);  // rows p in [first, short_end) see p + 1
  const int64_t short_rows = std::max<int64_t>(0, short_end - first);
  const int64_t short_pairs = short_rows * (first + 1) + short_rows * (short_rows - 1) / 2;
  return short_pairs + (c - short_rows) * window;
}

int64_t executed_pairs(AttentionKernel kernel, int64_t c, int64_t e, int64_t window) {
  if (kernel == AttentionKernel::math) return c * e;
  if (kernel == AttentionKernel::cpu_fused && window > 0 && window < e)
    return cpu_window_executed_pairs(c, e, window);
  return visible_pairs(c, e, window);
}

AttentionPairs attention_pairs(AttentionKernel kernel, int64_t c, int64_t e, int64_t window) {
  return {visible_pairs(c, e, window), executed_pairs(kernel, c, e, window), c * e,
          /*rescored=*/kernel != AttentionKernel::math};
}

torch::Tensor attention_into_sink(AttentionKernelFn run, const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, double scale, int64_t window,
                                  const torch::Tensor& sink_logits, const KvGradSink& sink) {
  // Leaves that alias k and v: hooks add their gradients into the sink as the kernel's backward makes them;
  // the leaves and their .grad go with the graph once its backward is done.
  auto k_leaf = k.detach().requires_grad_(true), v_leaf = v.detach().requires_grad_(true);
  k_leaf.register_hook([dk = sink.dk](const torch::Tensor& grad) { dk.add_(grad); });
  v_leaf.register_hook([dv = sink.dv](const torch::Tensor& grad) { dv.add_(grad); });
  return run(q, k_leaf, v_leaf, scale, window, sink_logits);
}

void SinkNodeData::save(torch::autograd::AutogradContext* ctx) const {
  ctx->saved_data["k"] = k;
  ctx->saved_data["v"] = v;
  ctx->saved_data["dk_sink"] = sink.dk;
  ctx->saved_data["dv_sink"] = sink.dv;
  ctx->saved_data["scale"] = scale;
}

SinkNodeData SinkNodeData::load(torch::autograd::AutogradContext* ctx) {
  auto& d = ctx->saved_data;
  return {d["k"].toTensor(), d["v"].toTensor(), KvGradSink{d["dk_sink"].toTensor(), d["dv_sink"].toTensor()},
          d["scale"].toDouble()};
}

torch::Tensor sink_backward_by_key_blocks(int64_t c, int64_t e, int64_t block, const KvGradSink& sink,
                                          const SinkBlockCall& call) {
  return backward_by_key_blocks(c, e, block, call,
                                [&](int64_t key0, int64_t keys, torch::Tensor dk, torch::Tensor dv) {
                                  sink.dk.narrow(2, key0, keys).add_(dk);
                                  dk.reset();
                                  sink.dv.narrow(2, key0, keys).add_(dv);
                                });
}

torch::Tensor backward_by_key_blocks(int64_t c, int64_t e, int64_t block, const SinkBlockCall& call,
                                     const KeyBlockGrads& take) {
  // dQ is a sum over the key blocks. In bfloat16 or float16 each partial sum would be rounded once more per
  // block, an error that grows with T / block and is StreamBP's alone (plain BP's kernel accumulates dQ in
  // float32 inside one call): exactly what the paper's Table 7 compares. So the sum is kept in float32 and
  // rounded once, as one call would; float32 and float64 sum in their own type.
  torch::Tensor dq;
  at::ScalarType dq_type = at::kFloat;
  auto run = [&](int64_t key0, int64_t keys, bool causal) {
    auto [dq_part, dk_part, dv_part] = call(key0, keys, causal);
    take(key0, keys, std::move(dk_part), std::move(dv_part));
    if (dq.defined()) {
      dq.add_(dq_part);  // float32 += the block's terms (a float32 copy of them on the CPU)
    } else {
      dq_type = dq_part.scalar_type();
      const bool reduced = dq_type == at::kBFloat16 || dq_type == at::kHalf;
      dq = reduced && c < e ? dq_part.to(at::kFloat) : std::move(dq_part);
    }
  };
  const int64_t prefix = e - c;
  for (int64_t key0 = 0; key0 < prefix; key0 += block) run(key0, std::min(block, prefix - key0), false);
  run(prefix, c, /*causal=*/true);
  return dq.scalar_type() == dq_type ? dq : dq.to(dq_type);
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               int64_t window, double scale, const KvGradSink& sink,
                               const torch::Tensor& sink_logits) {
  const int64_t n = q.size(0), hq = q.size(1), c = q.size(2), hd = q.size(3);
  const int64_t hkv = k.size(1), e = k.size(2);
  TORCH_CHECK(e >= c, "causal_attention: ", c, " queries need at least as many keys, got ", e);
  TORCH_CHECK(hq % hkv == 0, "causal_attention: ", hq, " query heads are not groups of ", hkv, " kv heads");
  if (scale <= 0.0) scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const AttentionKernel kernel =
      attention_kernel_for(q.device(), q.scalar_type(), hd, window, sink_logits.defined());
  TORCH_CHECK(!sink_logits.defined() || (sink_logits.dim() == 1 && sink_logits.size(0) == hq),
              "causal_attention: ", hq, " query heads need as many sink logits, got ", sink_logits.sizes());
  TORCH_CHECK(!sink.defined() || (sink.dk.sizes() == k.sizes() && sink.dv.sizes() == v.sizes()),
              "causal_attention: the gradient sink's shapes are not k's and v's");
  torch::Tensor out;  // (N, Hq, c, hd)
  if (!sink.defined())
    out = entry(kernel).run(q, k, v, scale, window, sink_logits);
  else if (kernel == AttentionKernel::cpu_fused)
    out = cpu_fused_attention(q, k, v, scale, window, sink_logits, sink);
  else if (kernel == AttentionKernel::flash)
    out = flash_attention(q, k, v, scale, window, sink_logits, sink);
  else  // efficient (float32) and math (float64): whole dK, dV, then added
    out = attention_into_sink(entry(kernel).run, q, k, v, scale, window, sink_logits, sink);
  count_attention(n, hq, hd, attention_pairs(kernel, c, e, window), out);
  return out.transpose(1, 2).reshape({n, c, hq * hd});
}

}  // namespace bpbench
