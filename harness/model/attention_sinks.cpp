// attention_sinks.cpp: the sink merged into a row's attention, and the sink logits' gradient
// (attention_sinks.h, Note [Attention sinks]).
#include "harness/model/attention_sinks.h"

#include <vector>

namespace bpbench {

void merge_attention_sinks(const torch::Tensor& out, const torch::Tensor& lse,
                           const torch::Tensor& sink_logits) {
  torch::NoGradGuard no_grad;
  const auto sinks = sink_logits.detach().to(lse.scalar_type()).view({1, -1, 1});  // (1, Hq, 1)
  auto merged = torch::logaddexp(lse, sinks);                                      // (N, Hq, c)
  // w o in lse's dtype, rounded once into out (an in-place multiply computes each element in the common
  // dtype).
  out.mul_(torch::exp(lse - merged).unsqueeze(-1));
  lse.copy_(merged);
}

torch::Tensor attention_sinks_grad(const torch::Tensor& grad_out, const torch::Tensor& out,
                                   const torch::Tensor& lse, const torch::Tensor& sink_logits) {
  torch::NoGradGuard no_grad;
  const auto acc = lse.scalar_type();
  const auto sinks = sink_logits.detach().to(acc).view({1, -1, 1});
  auto row_dot = (grad_out * out).sum(-1, /*keepdim=*/false, acc);  // rowsum(dO' o'), (N, Hq, c)
  auto sink_probability = torch::exp(sinks - lse);                  // 1 - w, (N, Hq, c)
  return (sink_probability * row_dot).sum(std::vector<int64_t>{0, 2}).neg().to(sink_logits.scalar_type());
}

void save_sink_logits(torch::autograd::AutogradContext* ctx, const torch::Tensor& sink_logits) {
  ctx->saved_data["sink_logits"] = sink_logits.defined() ? sink_logits.detach() : torch::Tensor();
  ctx->saved_data["sinks_need_grad"] = sink_logits.defined() && sink_logits.requires_grad();
}

torch::Tensor sinks_grad_if_needed(torch::autograd::AutogradContext* ctx, const torch::Tensor& grad_out,
                                   const torch::Tensor& out, const torch::Tensor& lse) {
  if (!ctx->saved_data["sinks_need_grad"].toBool()) return {};
  return attention_sinks_grad(grad_out, out, lse, ctx->saved_data["sink_logits"].toTensor());
}

}  // namespace bpbench
