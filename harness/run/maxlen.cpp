// maxlen.cpp: grow-then-bisect search over sequence lengths.
#include "harness/run/maxlen.h"

#include <algorithm>

namespace bpbench {

bool probe_failed_to_fit(const Probe& p) {
  return p.status == "oom" || p.status == "killed";
}

MaxLenResult search_max_seq_len(const MaxLenSearch& search, const std::function<Probe(int64_t)>& probe,
                                const std::function<void(const Probe&)>& on_probe) {
  const int64_t g = std::max<int64_t>(1, search.granularity);
  const int64_t upper = std::max(g, search.upper / g * g);
  MaxLenResult r;
  auto run = [&](int64_t T) {
    Probe p = probe(T);
    p.seq_len = T;
    r.probes.push_back(p);
    if (on_probe) on_probe(p);
    if (p.status != "ok" && !probe_failed_to_fit(p))
      r.error = "probe at T=" + std::to_string(T) + ": " + p.reason;
    return p.status == "ok";
  };

  const double growth = std::max(1.01, search.growth);
  // The next length up from `t` (at least one step of g) and down from it (at least one step, at least g).
  auto up = [&](int64_t t) {
    return std::min(upper, std::max(t + g, (static_cast<int64_t>(t * growth) + g - 1) / g * g));
  };
  auto down = [&](int64_t t) {
    return std::max(g, std::min(t - g, static_cast<int64_t>(t / growth) / g * g));
  };
  int64_t fit = 0, fail = 0;  // largest T known to fit, smallest known not to (0: none yet)
  int64_t T = std::clamp((std::max(search.start, g) + g / 2) / g * g, g, upper);
  // Grow (or shrink, when the estimate overshoots) by `growth` until the answer is bracketed.
  if (run(T)) {
    fit = T;
    while (fit < upper) {
      T = up(fit);
      if (!run(T)) {
        fail = T;
        break;
      }
      fit = T;
    }
    if (!r.error.empty()) return r;
    if (fail == 0) {
      r.max_seq_len = fit;
      r.hit_upper = true;
      return r;
    }
  } else {
    if (!r.error.empty()) return r;
    fail = T;
    while (fail > g) {
      T = down(fail);
      if (run(T)) {
        fit = T;
        break;
      }
      if (!r.error.empty()) return r;
      fail = T;
    }
    if (fit == 0) return r;  // not even g tokens fit
  }
  // Bisect on multiples of g in (fit, fail).
  while (fail - fit > g) {
    const int64_t mid = (fit + fail) / 2 / g * g;
    if (mid <= fit) break;
    if (run(mid))
      fit = mid;
    else {
      if (!r.error.empty()) return r;
      fail = mid;
    }
  }
  r.max_seq_len = fit;
  return r;
}

}  // namespace bpbench
