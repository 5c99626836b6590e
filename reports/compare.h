// compare.h: `bpbench compare BASE.json NEW.json`: a regression gate between two results files.
//
// Cells are matched by their axes (keys that only one file knows are ignored, so a newer bpbench that adds a
// grid key still matches; repeated axes match in order). Per matched cell:
//   status  a cell that was measured in BASE and is now oom, error or skipped is a regression; the reverse is
//           "better".
//   memory  memory.peak_bytes: NEW > BASE * (1 + mem_tol%) is worse (a regression), NEW < BASE * (1 -
//   mem_tol%)
//           better; a peak that is no longer measured is a regression. Max-length searches are judged on
//           max_seq_len instead (their peak grows with it): smaller beyond the tolerance is a regression,
//           larger is better.
//   time    a two-sided Mann-Whitney U test on both sides' runs_s (mann_whitney.h): p < time_alpha and the
//           median changed by more than time_tol% is "slower" / "faster", else "same (noise)"; runs too
//           few to ever reach p < time_alpha are "n/a". Reported, not gated, unless gate_time.
// A cell only in BASE is "missing" (a regression: a measurement vanished); only in NEW it is "new" (not one).
//
// Exit status of compare_main: the number of regressions, capped at 125 (0: no regression); 126 for bad input
// (missing file, malformed JSON, wrong schema, bad option), with one line `bpbench: error: ...` on stderr.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace bpbench {

inline constexpr int kCompareMaxRegressions = 125;  // exit statuses 0..125 count regressions
inline constexpr int kCompareInputError = 126;

struct CompareOptions {
  double mem_tol_pct = 0;  // CPU peaks are deterministic: any increase is a regression by default
  // The least change of the median time that counts (the effect size). 10%: consecutive runs of one build on
  // the shared 2-core CI machine differed by up to 8% at p ~ 0.01 (tests/fixtures/compare_time_*.json).
  double time_tol_pct = 10;
  double time_alpha = 0.05;  // the U test's significance level
  bool gate_time = false;    // true: "slower" counts as a regression
};

enum class Verdict { better, same, worse, missing, added };
const char* verdict_name(Verdict v);  // "better", "same", "worse", "missing", "new"

struct CompareRow {
  std::string label;                           // the axes that tell this cell from the others
  std::string base_status, new_status;         // "" where the cell is absent on that side
  std::optional<int64_t> base_peak, new_peak;  // memory.peak_bytes
  std::optional<int64_t> base_max_len, new_max_len;
  std::optional<double> base_time, new_time;  // time.median_s
  std::string memory;                         // "better" | "same" | "worse" | "" (not compared)
  std::string time;  // "faster" | "slower" | "same (noise)" | "n/a (3 and 3 runs)" | "" (not timed)
  Verdict verdict = Verdict::same;
  bool regression = false;
  std::vector<std::string> notes;  // what changed: "became oom", "peak +1 B (+0.00%)", ...
  // Per metric, for the formats that report each apart (compare_formats.h):
  std::string status_note;         // "became oom: ...", "now ok (was skipped)", ...; "" where unchanged
  bool status_regression = false;  // the status change (or the cell's absence from NEW) is a regression
  std::string time_note;  // the U test's reading: "time +12.0% (median ... s → ... s, U test p = ...)"
  bool time_regression = false;        // slower, with --gate-time
  size_t base_runs = 0, new_runs = 0;  // time.runs_s of each side
};

struct CompareReport {
  CompareOptions options;
  std::vector<CompareRow> rows;  // BASE's order, then cells only in NEW
  int regressions = 0;
  int count(Verdict v) const;
  int exit_code() const;         // min(regressions, 125)
  std::string markdown() const;  // the table plus a summary line
};

// A change of bytes as the table shows it: "0", "+512 B (+0.19%)", "-1.5 MiB (-2.00%)".
std::string delta_text(int64_t base, int64_t now);

// Pure: compares two parsed results documents. Throws InputError when either is not a bpbench results file.
CompareReport compare_results(const nlohmann::json& base, const nlohmann::json& now,
                              const CompareOptions& options);

// `bpbench compare` (args: what follows "compare"): prints the markdown to `out`, returns the exit status
// above.
int compare_main(const std::vector<std::string>& args);
int compare_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace bpbench
