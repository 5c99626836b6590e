// history.h: `bpbench history`: runs kept over time in one JSON-lines file, and the trend of a metric for the
// cells that repeat.
//
//   bpbench history append RESULTS.json... --to HISTORY.jsonl
//     one line per results file: its key (machine, GPU or CPU, versions, commit), when and what ran, and per
//     cell its axes, status, peak bytes, median time, spread (cv), tokens per second and max length. A run
//     already in the file (same scenario, start time and machine) is refused.
//   bpbench history report HISTORY.jsonl --out DIR [--metric NAME]
//     DIR/history.md: per machine and device (a trend compares a machine with itself), one table per metric
//     of the cells that appear in two runs or more, a column per run in the order appended; and
//     DIR/history_<metric>.png through reports/plot.py where matplotlib is installed; and DIR/history.html,
//     the same tables and every trend as inline SVG in one self-contained page (reports/html/html_page.h).
//
// Exit status: 0; 2 for bad input (one line `bpbench: error: ...`).
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bpbench {

inline constexpr const char* kHistorySchema = "bpbench.history/1";

// The history line of one loaded results document (bpbench's or a peer's); `source` is where it was read.
nlohmann::json history_entry(const nlohmann::json& results, const std::string& source);

// The metrics a report can trend: peak_bytes, median_s, tokens_per_s, cv, max_seq_len.
const std::vector<std::string>& history_metrics();

// history.md's text for these lines (parsed), the given metrics only.
std::string history_markdown(const std::vector<nlohmann::json>& entries,
                             const std::vector<std::string>& metrics);

int history_main(const std::vector<std::string>& args);
int history_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace bpbench
