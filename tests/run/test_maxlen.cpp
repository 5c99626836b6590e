// test_maxlen.cpp: the max-sequence-length search finds the exact boundary of fake cells whose peak is a
// known function of T, from estimates below, at and above the answer, and reports probes, upper bounds and
// errors.
#include <gtest/gtest.h>

#include "harness/run/maxlen.h"

namespace bpbench::test_maxlen {
namespace {

// peak(T) = a + b T + c T^2 bytes; fits when peak <= budget.
std::function<Probe(int64_t)> fake_cell(int64_t a, int64_t b, int64_t c, int64_t budget) {
  return [=](int64_t T) {
    Probe p;
    p.peak_bytes = a + b * T + c * T * T;
    p.status = p.peak_bytes <= budget ? "ok" : "oom";
    return p;
  };
}

// The true answer by brute force over multiples of g.
int64_t brute_force(int64_t a, int64_t b, int64_t c, int64_t budget, int64_t g, int64_t upper) {
  int64_t best = 0;
  for (int64_t T = g; T <= upper; T += g)
    if (a + b * T + c * T * T <= budget) best = T;
  return best;
}

TEST(MaxLen, FindsTheExactBoundaryFromAnyStart) {
  const int64_t a = 1000000, b = 5000, c = 3, budget = 2000000000, g = 256, upper = 1 << 20;
  const int64_t expected = brute_force(a, b, c, budget, g, upper);
  ASSERT_GT(expected, 0);
  for (int64_t start : {int64_t{1}, int64_t{256}, expected, expected + 256, int64_t{200000}, upper}) {
    MaxLenSearch s{budget, g, upper, start};
    auto r = search_max_seq_len(s, fake_cell(a, b, c, budget));
    EXPECT_EQ(r.max_seq_len, expected) << "start " << start;
    EXPECT_TRUE(r.error.empty());
    EXPECT_FALSE(r.hit_upper);
    // Both sides of the boundary were probed: the answer is proven, not guessed.
    bool saw_fit = false, saw_next_fail = false;
    for (const auto& p : r.probes) {
      saw_fit |= p.seq_len == expected && p.status == "ok";
      saw_next_fail |= p.seq_len == expected + g && p.status == "oom";
    }
    EXPECT_TRUE(saw_fit && saw_next_fail) << "start " << start;
    EXPECT_LT(r.probes.size(), 40u);
  }
}

TEST(MaxLen, LinearCellsAndOddGranularity) {
  for (int64_t g : {1, 7, 100}) {
    const int64_t expected = brute_force(12345, 777, 0, 50000000, g, 1000000);
    auto r = search_max_seq_len({50000000, g, 1000000, 500}, fake_cell(12345, 777, 0, 50000000));
    EXPECT_EQ(r.max_seq_len, expected) << "g " << g;
  }
}

TEST(MaxLen, ReportsUpperBoundAndNothingFits) {
  auto huge = search_max_seq_len({1LL << 40, 256, 4096, 256}, fake_cell(0, 1, 0, 1LL << 40));
  EXPECT_EQ(huge.max_seq_len, 4096);
  EXPECT_TRUE(huge.hit_upper);
  auto none = search_max_seq_len({100, 256, 4096, 1024}, fake_cell(1000, 1, 0, 100));
  EXPECT_EQ(none.max_seq_len, 0);
  EXPECT_FALSE(none.hit_upper);
}

TEST(MaxLen, AnErrorStopsTheSearchWithTheReason) {
  auto probe = [](int64_t T) {
    Probe p;
    p.status = T >= 1024 ? "error" : "ok";
    p.reason = "child died";
    return p;
  };
  auto r = search_max_seq_len({1 << 30, 256, 1 << 20, 256}, probe);
  EXPECT_NE(r.error.find("child died"), std::string::npos);
  EXPECT_NE(r.error.find("1024"), std::string::npos);
}

}  // namespace
}  // namespace bpbench::test_maxlen
