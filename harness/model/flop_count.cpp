// flop_count.cpp: the tally behind flop_count.h and the hooks that carry each call's backward to it.
#include "harness/model/flop_count.h"

#include <mutex>
#include <stdexcept>

namespace bpbench {

struct FlopCounter::Tally {
  std::atomic<int64_t> forward_matmul{0}, forward_attention{0}, backward_matmul{0}, backward_attention{0},
      recompute_matmul{0}, recompute_attention{0}, attention_rescore{0}, attention_masked{0},
      attention_dense{0};
};

namespace {

// The live counter's tally. The flag keeps the uncounted path (every step but the counted one) to one load.
std::atomic<bool> g_counting{false};
std::mutex g_mutex;
std::shared_ptr<FlopCounter::Tally> g_tally;

std::shared_ptr<FlopCounter::Tally> active_tally() {
  if (!g_counting.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_tally;
}

// Whether this thread is inside a CountedAsRecompute.
thread_local bool t_counted_as_recompute = false;

// What one call's backward computes, by tally counter.
struct BackwardWork {
  int64_t matmul = 0, attention = 0, rescore = 0, masked = 0, dense = 0;
  bool recompute = false;  // made under CountedAsRecompute: its matmuls are recomputation
};

// Tallies `work` when autograd computes the gradient of `y`, i.e. when the backward of y's call runs.
void on_backward(const torch::Tensor& y, std::shared_ptr<FlopCounter::Tally> tally, BackwardWork work) {
  y.register_hook([tally = std::move(tally), work](const torch::Tensor&) {
    (work.recompute ? tally->recompute_matmul : tally->backward_matmul) += work.matmul;
    tally->backward_attention += work.attention;
    tally->attention_rescore += work.rescore;
    tally->attention_masked += work.masked;
    tally->attention_dense += work.dense;
  });
}

}  // namespace

FlopCounter::FlopCounter() : tally_(std::make_shared<Tally>()) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_tally) throw std::logic_error("FlopCounter: another counter is already counting");
  g_tally = tally_;
  g_counting.store(true, std::memory_order_release);
}

FlopCounter::~FlopCounter() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_counting.store(false, std::memory_order_release);
  g_tally.reset();
}

CountedAsRecompute::CountedAsRecompute() : outer_(t_counted_as_recompute) {
  t_counted_as_recompute = true;
}

CountedAsRecompute::~CountedAsRecompute() {
  t_counted_as_recompute = outer_;
}

FlopCounts FlopCounter::counts() const {
  const Tally& t = *tally_;
  FlopCounts c;
  c.forward_matmul = t.forward_matmul.load();
  c.forward_attention = t.forward_attention.load();
  c.backward_matmul = t.backward_matmul.load();
  c.backward_attention = t.backward_attention.load();
  c.recompute_matmul = t.recompute_matmul.load();
  c.recompute_attention = t.recompute_attention.load();
  c.attention_rescore = t.attention_rescore.load();
  c.attention_masked = t.attention_masked.load();
  c.attention_dense = t.attention_dense.load();
  return c;
}

void count_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& y) {
  auto tally = active_tally();
  if (!tally) return;
  const int64_t in = weight.size(1), out = weight.size(0);
  const int64_t rows = in == 0 ? 0 : x.numel() / in;
  const int64_t flops = 2 * rows * in * out;
  if (!torch::GradMode::is_enabled()) {
    tally->recompute_matmul += flops;
    return;
  }
  (t_counted_as_recompute ? tally->recompute_matmul : tally->forward_matmul) += flops;
  if (!y.requires_grad()) return;
  // What linear's backward will compute, decided now as autograd decides it: from what requires grad.
  BackwardWork work;
  work.recompute = t_counted_as_recompute;
  work.matmul = (x.requires_grad() ? flops : 0) + (weight.requires_grad() ? flops : 0);
  if (work.matmul > 0) on_backward(y, std::move(tally), work);
}

namespace {
// A matmul-like call of `flops` forward whose backward computes `backward` FLOPs (0: none).
void count_product(const torch::Tensor& y, int64_t flops, int64_t backward) {
  auto tally = active_tally();
  if (!tally) return;
  if (!torch::GradMode::is_enabled()) {
    tally->recompute_matmul += flops;
    return;
  }
  (t_counted_as_recompute ? tally->recompute_matmul : tally->forward_matmul) += flops;
  if (!y.requires_grad() || backward == 0) return;
  BackwardWork work;
  work.recompute = t_counted_as_recompute;
  work.matmul = backward;
  on_backward(y, std::move(tally), work);
}
}  // namespace

void count_matmul(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& y) {
  const int64_t flops = 2 * y.numel() * a.size(-1);
  count_product(y, flops, (a.requires_grad() ? flops : 0) + (b.requires_grad() ? flops : 0));
}

void count_unit_triangular_solve(const torch::Tensor& A, const torch::Tensor& b, const torch::Tensor& x) {
  const int64_t c = A.size(-1), solve = x.numel() * (c - 1);
  // db is one more solve, which dA = -db x^T needs too.
  const bool any = A.requires_grad() || b.requires_grad();
  count_product(x, solve, (any ? solve : 0) + (A.requires_grad() ? 2 * x.numel() * c : 0));
}

void count_attention(int64_t sequences, int64_t query_heads, int64_t head_dim, const AttentionPairs& pairs,
                     const torch::Tensor& out) {
  auto tally = active_tally();
  if (!tally) return;
  const int64_t per_pair = sequences * query_heads * head_dim;  // x pairs: one (query, key) dot product
  const int64_t visible = pairs.visible, all = pairs.all, masked = pairs.executed - pairs.visible;
  tally->attention_dense += 4 * per_pair * all;
  tally->attention_masked += 4 * per_pair * masked;
  if (!torch::GradMode::is_enabled()) {
    tally->recompute_attention += 4 * per_pair * visible;
    return;
  }
  tally->forward_attention += 4 * per_pair * visible;
  if (!out.requires_grad()) return;
  BackwardWork work;
  work.attention = 8 * per_pair * visible;
  work.dense = 8 * per_pair * all;
  work.masked = 8 * per_pair * masked;
  work.rescore = pairs.rescored ? 2 * per_pair * pairs.executed : 0;  // the math kernel kept its scores
  on_backward(out, std::move(tally), work);
}

}  // namespace bpbench
