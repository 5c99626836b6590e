// maxlen.h: the largest sequence length that completes a forward + backward within a memory budget.
//
// Grow, then bisect: starting near an estimate, double T until a probe runs out of memory (or `upper` is
// reached), then bisect between the last length that fit and the first that did not, to `granularity` tokens.
// Every probe is a call of `probe(T)`; the runner makes each one a child process so an out-of-memory leaves
// nothing behind. Peak memory is monotone in T for every strategy here, which is what makes bisection exact.
//
// A probe that was killed from outside (status "killed": its process died of SIGKILL, or the whole run was
// killed while it ran, twice) brackets the search as an out-of-memory does: it is recorded as what it is, and
// the answer is then the longest length that both fit and finished here, which the cell's reason says.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bpbench {

struct Probe {
  int64_t seq_len = 0;
  std::string status;  // "ok" | "oom" | "killed" | "error"; "started": under way (results' in_progress only)
  int64_t peak_bytes = 0;
  std::string reason;
  int64_t attempts = 0;  // "started": how many times this probe has been started without finishing
};

// A probe's outcome that brackets the search from above: it ran out of memory, or was killed from outside.
bool probe_failed_to_fit(const Probe& p);

struct MaxLenSearch {
  int64_t budget_bytes = 0;
  int64_t granularity = 256;  // T values probed are multiples of this
  int64_t upper = 1 << 20;    // never probe above this
  int64_t start = 0;          // first probe (rounded to granularity); 0: granularity
  double growth =
      2.0;  // factor between probes until the answer is bracketed (> 1; smaller from a good start)
};

struct MaxLenResult {
  int64_t max_seq_len = 0;  // 0: not even `granularity` tokens fit
  bool hit_upper = false;   // the answer is at least `upper`: the budget never ran out
  std::vector<Probe> probes;
  std::string error;  // a probe failed for a reason other than memory
};

MaxLenResult search_max_seq_len(const MaxLenSearch& search, const std::function<Probe(int64_t)>& probe,
                                const std::function<void(const Probe&)>& on_probe = {});

}  // namespace bpbench
