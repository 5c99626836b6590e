// flop_count.h: the one counting seam for FLOPs. The model's ops (Linear, the LM head, causal_attention, the
// gated delta rule's products and solves) report each call's shapes here; while a FlopCounter is alive every
// call is tallied, with no formula per strategy: what a strategy executes is what gets counted.
//
// A call made with grad enabled is the model's forward; its backward is tallied when autograd reaches it (a
// hook on the output, which carries what the call's backward will compute: dX only where the input needs a
// gradient, dW only where the weight is trained). A call made without grad is recomputation: the no-grad
// forward of checkpointing, an extra LM-head pass, MsT's mini-sequence pass. So a strategy that runs every op
// once with grad has the same `model` counts as plain BP, and its `hardware` is model + recompute.
//
// Units: one multiply-add is 2 FLOPs, as torch.utils.flop_counter counts them (2 M K N for a matmul). Legend
// (model_config.h): N sequences, Hq query heads, hd head size, c query rows of a call, e keys it sees.
//   linear (M rows, K in, N out):  forward 2MKN; backward 2MKN for dX + 2MKN for dW
//   attention, per (sequence, query head), p = c e - c (c - 1) / 2 visible (query, key) pairs, r = c e:
//     forward  4 hd p   (Q K^T and P V over the visible pairs)
//     backward 8 hd p   (dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q)
//     fused kernels (CPU, flash, memory-efficient) skip masked tiles but recompute Q K^T in their backward:
//       + 2 hd x (the pairs they compute), tallied as `attention_rescore`
//     a kernel that computes x > p pairs (the math kernel: all r; the CPU kernel under a sliding window: its
//       banded blocks) adds 4 hd (x - p) forward and 8 hd (x - p) backward, tallied as `attention_masked`
//   `attention_dense` tallies each call at r (forward 4 hd r, backward 8 hd r): what an implementation that
//   computes every score of its key range under an explicit mask runs, the paper's accounting (its Section 3:
//   a StreamBP chunk scores its prefix only, about half of a full Q K^T). Partial tiles on the diagonal are
//   not counted: a fused kernel's true work lies between p and r, within one tile band of p.
// docs/estimate.md has the same formulas per strategy.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <memory>

namespace bpbench {

struct FlopCounts {
  int64_t forward_matmul = 0, forward_attention = 0;      // calls made with grad
  int64_t backward_matmul = 0, backward_attention = 0;    // their backward
  int64_t recompute_matmul = 0, recompute_attention = 0;  // calls made without grad
  int64_t attention_rescore = 0;                          // fused kernels' backward: Q K^T again
  int64_t attention_masked = 0;  // the math kernel's masked scores, forward and backward
  int64_t attention_dense = 0;   // every call at c x e scores (not part of hardware)

  // The model's own forward + backward: what plain BP needs, no recomputation.
  int64_t model() const { return forward_matmul + forward_attention + backward_matmul + backward_attention; }
  // What ran: the model's work plus every recomputation and wasted score.
  int64_t hardware() const {
    return model() + recompute_matmul + recompute_attention + attention_rescore + attention_masked;
  }
  int64_t model_matmul() const { return forward_matmul + backward_matmul; }
  int64_t model_attention() const { return forward_attention + backward_attention; }
};

// Counts every op of the seam while alive; one at a time (nesting is a programming error). Hooks created in
// its lifetime keep counting into it after it ends, so read counts() only once the step's backward is done.
class FlopCounter {
 public:
  FlopCounter();
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;
  FlopCounts counts() const;

  struct Tally;  // atomic counters: backward hooks run on autograd's device threads

 private:
  std::shared_ptr<Tally> tally_;
};

// While alive on its thread, calls made with grad are tallied as recomputation, their backward too: work a
// strategy runs again with a graph, beyond the model's own (StreamBP's key blocks expanded from MLA's latent
// for a second chunk: latent_attention.cpp).
class CountedAsRecompute {
 public:
  CountedAsRecompute();
  ~CountedAsRecompute();
  CountedAsRecompute(const CountedAsRecompute&) = delete;
  CountedAsRecompute& operator=(const CountedAsRecompute&) = delete;

 private:
  bool outer_;
};

// ---- the seam: the ops call these with their inputs and output
// ---------------------------------------------

// y = x W^T (the bias is not counted): x (..., K), weight (N, K), y (..., N).
void count_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& y);
// Every matmul of the model goes through here: x W^T (+ bias), counted (the FLOP counter's seam).
inline torch::Tensor counted_linear(const torch::Tensor& x, const torch::Tensor& weight,
                                    const torch::Tensor& bias = {}) {
  auto y = torch::nn::functional::linear(x, weight, bias);
  count_linear(x, weight, y);
  return y;
}

// A batched matmul y = a b, a (..., M, K), b (..., K, N): 2 M K N a batch element forward, as much again for
// each of dA and dB its backward computes (the gated delta rule's products: gated_delta.cpp).
void count_matmul(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& y);
inline torch::Tensor counted_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  auto y = a.matmul(b);
  count_matmul(a, b, y);
  return y;
}
// x = A^-1 b for a unit lower-triangular A (..., c, c) and b (..., c, R): c (c - 1) R a batch element
// forward; its backward solves again for db (the same) and, where A trains, forms dA = -db x^T (2 c c R).
void count_unit_triangular_solve(const torch::Tensor& A, const torch::Tensor& b, const torch::Tensor& x);

// One attention call's (query, key) pairs per (sequence, query head).
struct AttentionPairs {
  int64_t visible = 0;   // what the rule lets the queries see: the model's work
  int64_t executed = 0;  // what the kernel computes (>= visible: masked scores it did not skip)
  int64_t all = 0;       // c x e: what a dense-mask kernel computes
  bool rescored = true;  // the kernel's backward computes Q K^T again (every fused kernel; not math)
};

// An attention call of ops.h's contract (out: its output, for the backward's hook).
void count_attention(int64_t sequences, int64_t query_heads, int64_t head_dim, const AttentionPairs& pairs,
                     const torch::Tensor& out);

// Per (sequence, query head): the (query, key) pairs c queries see over the e keys ending with them.
inline int64_t causal_pairs(int64_t c, int64_t e) {
  return c * e - c * (c - 1) / 2;
}

}  // namespace bpbench
