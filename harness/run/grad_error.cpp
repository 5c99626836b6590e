// grad_error.cpp: streamed float64 error statistics between a cell's gradients and the reference's.
#include "harness/run/grad_error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace bpbench {

namespace {
// Elements per slice: bounds the float64 temporaries to a few tens of MB whatever the tensor size.
constexpr int64_t kSlice = int64_t{1} << 22;
}  // namespace

nlohmann::json ErrorStats::to_json() const {
  return {{"er_abs", er_abs}, {"er_rel", er_rel}, {"max_abs", max_abs}, {"rel_l2", rel_l2}, {"count", count}};
}

void GradErrorAccumulator::add(const std::string& group, const torch::Tensor& ref, const torch::Tensor& got) {
  torch::NoGradGuard no_grad;
  const auto r_all = ref.detach().reshape({-1});
  const auto g_all = got.defined() ? got.detach().reshape({-1}) : torch::Tensor();
  if (g_all.defined() && g_all.numel() != r_all.numel())
    throw std::runtime_error(fmt::format("gradient error: {} vs {} elements", g_all.numel(), r_all.numel()));
  Sums s;
  for (int64_t off = 0, n = r_all.numel(); off < n; off += kSlice) {
    const int64_t len = std::min(kSlice, n - off);
    const auto r = r_all.narrow(0, off, len).to(torch::kDouble);
    // The reference may live on another device (a CPU reference of a CUDA cell): compare on the reference's.
    const auto g =
        g_all.defined() ? g_all.narrow(0, off, len).to(r.device(), torch::kDouble) : torch::zeros_like(r);
    const auto diff = (r - g).abs_();
    s.abs += diff.sum().item<double>();
    s.rel += (diff / (r + 1e-10).abs_()).sum().item<double>();
    s.max_abs = std::max(s.max_abs, diff.max().item<double>());
    s.sq_diff += diff.square().sum().item<double>();
    s.sq_ref += r.square().sum().item<double>();
    s.count += len;
  }
  for (const std::string& key : {group, std::string("all")}) {
    Sums& t = sums_[key];
    t.abs += s.abs;
    t.rel += s.rel;
    t.max_abs = std::max(t.max_abs, s.max_abs);
    t.sq_diff += s.sq_diff;
    t.sq_ref += s.sq_ref;
    t.count += s.count;
  }
}

std::map<std::string, ErrorStats> GradErrorAccumulator::stats() const {
  std::map<std::string, ErrorStats> out;
  for (const auto& [group, s] : sums_) {
    ErrorStats e;
    e.count = s.count;
    if (s.count > 0) {
      e.er_abs = s.abs / static_cast<double>(s.count);
      e.er_rel = s.rel / static_cast<double>(s.count);
    }
    e.max_abs = s.max_abs;
    e.rel_l2 = s.sq_ref > 0 ? std::sqrt(s.sq_diff / s.sq_ref) : std::sqrt(s.sq_diff);
    out[group] = e;
  }
  return out;
}

std::map<std::string, ErrorStats> gradient_error(const std::vector<NamedParameter>& ref,
                                                 const std::vector<NamedParameter>& got) {
  GradErrorAccumulator acc;
  for (const auto& g : got) {
    auto it = std::find_if(ref.begin(), ref.end(), [&](const NamedParameter& r) { return r.name == g.name; });
    if (it == ref.end()) throw std::runtime_error("gradient error: the reference has no parameter " + g.name);
    if (it->tensor.sizes() != g.tensor.sizes())
      throw std::runtime_error("gradient error: shapes of " + g.name + " differ from the reference");
    const auto r_grad = it->tensor.grad();
    // No gradient arrived in the reference: it is exactly zero.
    acc.add(param_group_name(g.group), r_grad.defined() ? r_grad : torch::zeros_like(it->tensor),
            g.tensor.grad());
  }
  return acc.stats();
}

}  // namespace bpbench
