// bench_attention.cpp: one layer's attention half (input norm, q/k/v projections, RoPE, causal attention,
// o_proj, residual), forward + backward, on the `small` preset in float32:
//
//   Whole:   all T queries against all T keys at once, as Model::layer does (plain BP, checkpointing):
//            (N, Hkv, g*T, T) scores and probabilities live until backward.
//   Chunked: StreamBP's order (impls/streambp.cpp): K/V projected once for all T rows and made leaves, then
//            each chunk of c query rows runs forward and backward at once against keys [0, e), its dK/dV
//            added into full-size buffers; the K/V path backpropagates once at the end. Scores are (c x e).
//
// Both compose Model's pieces (attn_norm, project_kv, project_q, attention_block); neither re-implements
// attention. The MLP half is left out so that the difference is attention's alone.
#include <algorithm>

#include "tests/benchmarks/bench_common.h"

namespace bpbench::bench::bench_attention {
namespace {

constexpr int64_t kLayer = 0;

// dL/dx (1, T, d) of the attention half over all rows at once; weight gradients accumulate into .grad.
torch::Tensor whole_step(const Model& m, torch::Tensor& x, const torch::Tensor& dy) {
  auto h = m.attn_norm(kLayer, x);
  auto kv = m.project_kv(kLayer, h);              // (1, Hkv, T, hd)
  auto q = m.project_q(kLayer, h, 0, x.size(1));  // (1, Hq, T, hd)
  auto y = m.attention_block(kLayer, x, q, kv);   // (1, T, d); scores (1, Hkv, g*T, T) saved for backward
  y.backward(dy);
  auto dx = x.grad();
  x.mutable_grad().reset();  // dx is the step's output: allocated inside it, as in chunked_step
  return dx;
}

// The same dL/dx in StreamBP's order, with queries in chunks of `rows`.
torch::Tensor chunked_step(const Model& m, torch::Tensor& x, const torch::Tensor& dy, int64_t rows) {
  const int64_t T = x.size(1);
  // K/V path once for all rows, kept with its graph; its outputs become leaves for the chunks.
  KV kv = m.project_kv(kLayer, m.attn_norm(kLayer, x));  // (1, Hkv, T, hd)
  auto k_leaf = kv.k.detach(), v_leaf = kv.v.detach();
  auto dk = torch::zeros_like(k_leaf), dv = torch::zeros_like(v_leaf);
  auto dx = torch::empty_like(x);
  for (int64_t s = 0; s < T; s += rows) {
    const int64_t c = std::min(rows, T - s), e = s + c;
    auto x_rows = x.detach().narrow(1, s, c).requires_grad_(true);  // (1, c, d)
    auto k_vis = k_leaf.narrow(2, 0, e).requires_grad_(true);       // (1, Hkv, e, hd)
    auto v_vis = v_leaf.narrow(2, 0, e).requires_grad_(true);
    auto q = m.project_q(kLayer, m.attn_norm(kLayer, x_rows), s, T);  // (1, Hq, c, hd) at positions s..e-1
    auto y = m.attention_block(kLayer, x_rows, q, KV{k_vis, v_vis});  // (1, c, d); scores (1, Hkv, g*c, e)
    y.backward(dy.narrow(1, s, c));
    dx.narrow(1, s, c).copy_(x_rows.grad());
    dk.narrow(2, 0, e).add_(k_vis.grad());
    dv.narrow(2, 0, e).add_(v_vis.grad());
  }
  torch::autograd::backward({kv.k, kv.v}, {dk, dv});  // K/V path: adds into x.grad and Wk, Wv, norms
  dx.add_(x.grad());
  x.mutable_grad().reset();
  return dx;
}

void BM_AttentionWhole(benchmark::State& state) {
  const int64_t T = state.range(0);
  const Model& m = small_model();
  auto x = hidden_states(m, T, 1).requires_grad_(true);  // (1, T, d)
  const auto dy = hidden_states(m, T, 2);                // dL/dy (1, T, d)
  PeakCounter peak;
  for (auto _ : state) benchmark::DoNotOptimize(whole_step(m, x, dy).data_ptr());
  peak.report(state);
  report_tokens(state, T);
}

void BM_AttentionChunked(benchmark::State& state) {
  const int64_t T = state.range(0), rows = state.range(1);
  const Model& m = small_model();
  auto x = hidden_states(m, T, 1).requires_grad_(true);
  const auto dy = hidden_states(m, T, 2);
  PeakCounter peak;
  for (auto _ : state) benchmark::DoNotOptimize(chunked_step(m, x, dy, rows).data_ptr());
  peak.report(state);
  report_tokens(state, T);
}

BENCHMARK(BM_AttentionWhole)->Apply(whole_sizes);
BENCHMARK(BM_AttentionChunked)->Apply([](benchmark::internal::Benchmark* b) { chunked_sizes(b, "c"); });

}  // namespace
}  // namespace bpbench::bench::bench_attention
