// attention_reference.h: attention written plainly, the reference every attention kernel is tested against
// (tests/model/test_attention.cpp on the CPU, tests/device/test_device_backend.cpp on CUDA).
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace bpbench::testing {

// Nothing clever: K/V repeated per query head, an (c, e) mask built from the rule, softmax over every key.
// q (N, Hq, c, hd); k, v (N, Hkv, e, hd) -> (N, c, Hq * hd). Query row i sits at position e - c + i; with a
// sliding window (> 0) it sees only keys after e - c + i - window. sink_logits (Hq), gpt-oss's attention
// sinks: as transformers' eager gpt_oss attention has them, one more score column per head, softmaxed with
// the rest and dropped.
inline torch::Tensor masked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      int64_t window = 0, const torch::Tensor& sink_logits = {}) {
  const int64_t n = q.size(0), hq = q.size(1), c = q.size(2), hd = q.size(3), e = k.size(2);
  const int64_t group = hq / k.size(1);
  auto keys = k.repeat_interleave(group, 1), values = v.repeat_interleave(group, 1);  // (N, Hq, e, hd)
  auto scores = torch::matmul(q, keys.transpose(-1, -2)) / std::sqrt(static_cast<double>(hd));
  auto row = torch::arange(c).unsqueeze(1), col = torch::arange(e).unsqueeze(0);
  auto hidden = col > row + (e - c);  // (c, e): key j is after query row i's position e - c + i
  if (window > 0) hidden = hidden.logical_or(col <= row + (e - c) - window);  // before the row's window
  scores = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity());
  torch::Tensor probs;
  if (sink_logits.defined()) {
    auto column = sink_logits.view({1, hq, 1, 1}).expand({n, hq, c, 1});
    probs = torch::softmax(torch::cat({scores, column}, -1), -1).narrow(-1, 0, e);
  } else {
    probs = torch::softmax(scores, -1);
  }
  auto out = torch::matmul(probs, values);  // (N, Hq, c, hd)
  return out.transpose(1, 2).reshape({n, c, hq * hd});
}

}  // namespace bpbench::testing
