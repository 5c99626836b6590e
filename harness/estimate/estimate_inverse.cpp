// estimate_inverse.cpp: estimate_inverse.h.
#include "harness/estimate/estimate_inverse.h"

#include <fmt/format.h>

#include <stdexcept>

namespace bpbench {

int64_t largest_fitting_multiple(int64_t granularity, int64_t upper,
                                 const std::function<bool(int64_t)>& fits) {
  int64_t lo = 0, hi = upper / granularity;  // in units of granularity; lo fits (0 trivially), above hi never
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid * granularity))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo * granularity;
}

LongestLength longest_seq_len(EstimateInput in, const LengthBudget& budget) {
  if (budget.granularity < 1 || budget.upper < budget.granularity)
    throw std::invalid_argument(
        fmt::format("estimate: granularity must be >= 1 and at most the upper length (got {} and {})",
                    budget.granularity, budget.upper));
  auto at = [&](int64_t T) {
    in.seq_len = T;
    return estimate_peak(in);
  };
  // A length whose bytes could pass int64 fits no budget (estimate_peak refuses it).
  auto countable = [&](int64_t T) {
    in.seq_len = T;
    return estimate_bytes_fit_in_int64(in);
  };
  auto device_fits = [&](const MemoryEstimate& e) { return e.peak_bytes <= budget.device_bytes; };
  auto host_fits = [&](const MemoryEstimate& e) {
    return !budget.host_bytes || e.host_bytes <= *budget.host_bytes;
  };
  LongestLength r;
  r.seq_len = largest_fitting_multiple(budget.granularity, budget.upper, [&](int64_t T) {
    if (!countable(T)) return false;
    const MemoryEstimate e = at(T);
    return device_fits(e) && host_fits(e);
  });
  r.at = at(r.seq_len > 0 ? r.seq_len : budget.granularity);
  const int64_t next = r.seq_len + budget.granularity;
  if (next > budget.upper) {
    r.bound = "upper";
  } else if (r.seq_len > 0 && !countable(next)) {
    r.bound = "device";
  } else {
    const MemoryEstimate above = r.seq_len > 0 ? at(next) : r.at;
    r.bound = device_fits(above) ? "host" : "device";
  }
  return r;
}

}  // namespace bpbench
