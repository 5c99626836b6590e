// mann_whitney.h: the Mann-Whitney U test on two samples of step times, as Google Benchmark's compare.py
// decides a timing change (there through scipy.stats.mannwhitneyu). compare.h uses it for `time`.
//
// The test asks whether one sample tends to be larger than the other without assuming a distribution: step
// times on a shared machine have long right tails (a preempted step), which a t-test would mistake for a
// shift. With few runs it cannot be significant at all: n1 = n2 = 3 can reach no p below 0.1, so a run of 3
// repeats is never judged at alpha = 0.05 (smallest_two_sided_p says what the sizes allow).
#pragma once

#include <cstdint>
#include <vector>

namespace bpbench {

struct UTestResult {
  double u = 0;  // U of the first sample: how many (a, b) pairs have a > b, ties counting one half
  double p = 1;  // two-sided p-value
  bool exact =
      false;  // p from U's exact distribution (no ties, n1 * n2 <= 400), else the normal approximation
};

// Two-sided: a and b come from one distribution (p large) or one is shifted (p small). Both need 1+ values.
UTestResult mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b);

// The smallest two-sided p any samples of these sizes can give (complete separation, no ties): 2 / C(n1+n2,
// n1).
double smallest_two_sided_p(int64_t n1, int64_t n2);

}  // namespace bpbench
