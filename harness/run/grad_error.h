// grad_error.h: how far a cell's gradients are from a high-precision reference, per parameter group.
//
// The paper's measures (appendix B.1), over the concatenation g of a group's gradients, g_ref the reference:
//   Er_abs(g) = mean_i |g_ref_i - g_i|
//   Er_rel(g) = mean_i |g_ref_i - g_i| / |g_ref_i + 1e-10|
// plus max_i |g_ref_i - g_i| and the relative L2 error ||g_ref - g|| / ||g_ref|| (the absolute L2 error when
// the reference is exactly zero). Computed in float64 by streaming slices of each tensor, so the
// concatenation is never materialised (an 8B model's embedding alone is 5 GB in float64).
#pragma once

#include <torch/torch.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/model/model.h"

namespace bpbench {

struct ErrorStats {
  double er_abs = 0, er_rel = 0, max_abs = 0, rel_l2 = 0;
  int64_t count = 0;  // elements
  nlohmann::json to_json() const;
};

class GradErrorAccumulator {
 public:
  // Adds one tensor's elements to `group` and to "all". An undefined `got` counts as zeros.
  void add(const std::string& group, const torch::Tensor& ref, const torch::Tensor& got);
  std::map<std::string, ErrorStats> stats() const;  // every group seen, plus "all"

 private:
  struct Sums {
    double abs = 0, rel = 0, max_abs = 0, sq_diff = 0, sq_ref = 0;
    int64_t count = 0;
  };
  std::map<std::string, Sums> sums_;
};

// Compares the .grad of every parameter of `got` with the parameter of the same name in `ref`, grouped by
// param_group_name. Throws std::runtime_error when a parameter has no counterpart or a different shape.
std::map<std::string, ErrorStats> gradient_error(const std::vector<NamedParameter>& ref,
                                                 const std::vector<NamedParameter>& got);

}  // namespace bpbench
