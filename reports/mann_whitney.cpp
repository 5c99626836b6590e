// mann_whitney.cpp: U from mid-ranks; p exact by counting U's distribution over every arrangement of the
// pooled sample, or from the normal approximation with the tie correction and a continuity correction
// (scipy's "asymptotic" method).
#include "reports/mann_whitney.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace bpbench {

namespace {

// How many arrangements of n1 a's and n2 b's give each U (0 .. n1 n2): the recurrence of Mann and Whitney,
// counts(n1, n2, u) = counts(n1 - 1, n2, u - n2) + counts(n1, n2 - 1, u), the last element an a or a b.
std::vector<double> u_counts(int64_t n1, int64_t n2) {
  const int64_t top = n1 * n2;
  // by_b[j][u]: arrangements of i a's (the outer loop) and j b's
  std::vector<std::vector<double>> by_b(n2 + 1, std::vector<double>(top + 1, 0.0));
  for (int64_t j = 0; j <= n2; ++j) by_b[j][0] = 1;  // no a's: U = 0 once
  for (int64_t i = 1; i <= n1; ++i) {
    std::vector<std::vector<double>> next(n2 + 1, std::vector<double>(top + 1, 0.0));
    next[0][0] = 1;  // no b's: U = 0
    for (int64_t j = 1; j <= n2; ++j)
      for (int64_t u = 0; u <= i * j; ++u)
        next[j][u] = (u >= j ? by_b[j][u - j] : 0.0) + next[j - 1][u];  // the last an a (beats j b's), or a b
    by_b = std::move(next);
  }
  return by_b[n2];
}

}  // namespace

double smallest_two_sided_p(int64_t n1, int64_t n2) {
  double combinations = 1;  // C(n1 + n2, n1)
  for (int64_t k = 1; k <= n1; ++k)
    combinations = combinations * static_cast<double>(n2 + k) / static_cast<double>(k);
  return std::min(1.0, 2.0 / combinations);
}

UTestResult mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.empty() || b.empty()) throw std::invalid_argument("mann_whitney_u: both samples need a value");
  const auto n1 = static_cast<int64_t>(a.size()), n2 = static_cast<int64_t>(b.size());
  const int64_t n = n1 + n2;
  std::vector<std::pair<double, int>> pooled;  // (value, 0 for a / 1 for b)
  for (double x : a) pooled.emplace_back(x, 0);
  for (double x : b) pooled.emplace_back(x, 1);
  std::sort(pooled.begin(), pooled.end());
  double rank_sum_a = 0, tie_term = 0;  // tie_term: sum of t^3 - t over groups of t equal values
  bool ties = false;
  for (int64_t i = 0; i < n;) {
    int64_t j = i;
    while (j < n && pooled[j].first == pooled[i].first) ++j;
    const double t = static_cast<double>(j - i), mid_rank = 0.5 * static_cast<double>(i + 1 + j);
    if (j - i > 1) ties = true;
    tie_term += t * t * t - t;
    for (int64_t k = i; k < j; ++k)
      if (pooled[k].second == 0) rank_sum_a += mid_rank;
    i = j;
  }
  UTestResult r;
  r.u = rank_sum_a - 0.5 * static_cast<double>(n1 * (n1 + 1));
  const double mean = 0.5 * static_cast<double>(n1 * n2);
  if (!ties && n1 * n2 <= 400) {
    const std::vector<double> counts = u_counts(n1, n2);
    double total = 0, at_most = 0, at_least = 0;
    for (size_t u = 0; u < counts.size(); ++u) {
      total += counts[u];
      if (static_cast<double>(u) <= r.u) at_most += counts[u];
      if (static_cast<double>(u) >= r.u) at_least += counts[u];
    }
    r.p = std::min(1.0, 2.0 * std::min(at_most, at_least) / total);
    r.exact = true;
    return r;
  }
  const double nd = static_cast<double>(n);
  const double variance = static_cast<double>(n1 * n2) / 12.0 * ((nd + 1) - tie_term / (nd * (nd - 1)));
  if (variance <= 0) return r;  // every value equal: nothing tells the samples apart, p = 1
  const double z = std::max(0.0, std::abs(r.u - mean) - 0.5) / std::sqrt(variance);
  r.p = std::min(1.0, std::erfc(z / std::sqrt(2.0)));
  return r;
}

}  // namespace bpbench
