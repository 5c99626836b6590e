// report.h: `bpbench report RESULTS.json --out DIR`: results.json -> DIR/report.md (the paper's tables) and
// DIR/*.png (the paper's figures, drawn by reports/plot.py with Debian's python3-matplotlib).
//
// report.md, in the StreamBP paper's layout (see reports/README.md for every format):
//   Table 3  maximum sequence length: rows model (objective, ...), columns impl, "20.5k" (k = 1000 tokens)
//   peak     peak BP memory: rows impl, columns seq_len, "peak (+above base)"       -> peak_vs_seq_len.png
//   (Fig. 3) Table 1  BP time: rows impl, columns seq_len, median seconds Fig. 5   BP time and peak vs
//   partition size, for every partition sweep         -> partition_sweep.png Table 7  gradient error: rows
//   parameter group, columns (impl, dtype) cells, Er_abs and Er_rel Fig. 1/8 the stacked memory timeline by
//   category of one cell                    -> timeline.png
// Cells that did not run read "oom", "skipped: reason" or "error: reason" wherever they would have a value.
//
// The C++ side does all the selection and grouping and writes DIR/plot_data.json; plot.py only draws it. When
// python or matplotlib is missing the report is written without figures and one warning line goes to stderr.
//
// The helpers below (loading, byte formatting, axis labels) are shared with reports/compare.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace bpbench {

// Reads and checks a results.json (schema "bpbench.results/1": an object with a "cells" list whose entries
// have an "axes" object and a "status" string). `path` may also name the directory that holds results.json.
// Throws InputError with a one-line message for a missing file, malformed JSON or the wrong schema.
nlohmann::json load_results(const std::filesystem::path& path);
// The same checks on an already parsed document; `origin` names it in messages.
void check_results(const nlohmann::json& doc, const std::string& origin);

// Bytes as rendered text with GiB = 2^30 and MiB = 2^20: "1.23 GiB", "412.6 MiB", "3.42 MiB", "0.366 MiB",
// "<0.001 MiB".
std::string format_bytes(int64_t bytes);
// Seconds with three significant figures or so: "123", "12.3", "1.23", "0.123", "0.00123".
std::string format_time(double seconds);
// A grid value as text: integral numbers without ".0", strings bare, booleans true/false.
std::string axis_value_text(const nlohmann::json& v);
// Axis keys in display order: the scenario's grid_keys() order first, then any others alphabetically.
std::vector<std::string> ordered_axis_keys(const std::vector<nlohmann::json>& axes_list);
// Keys (in display order) with two or more distinct values among the given axes objects (absence is no
// value).
std::vector<std::string> varying_axis_keys(const std::vector<nlohmann::json>& axes_list);
// "impl=plain seq_len=512" for the given keys, skipping keys the axes lack.
std::string axes_label(const nlohmann::json& axes, const std::vector<std::string>& keys);

struct ReportOptions {
  std::filesystem::path results;        // results.json (or its directory)
  std::filesystem::path out_dir;        // empty: "report" next to results.json
  std::optional<size_t> timeline_cell;  // index into "cells"; none: the first cell with a timeline
  std::string python = "/usr/bin/python3";
  std::string plot_script;  // empty: find_plot_script()
};

struct ReportOutput {
  std::filesystem::path markdown;            // DIR/report.md
  std::vector<std::filesystem::path> plots;  // the PNGs that were drawn
  std::vector<std::string> warnings;         // one line each (plots not drawn, timeline file unreadable)
};

// Renders report.md (and the plots) for an already loaded results document. `results_dir` resolves timeline
// files named by "memory"."timeline_file". Throws InputError for a bad --timeline-cell or an unwritable DIR.
ReportOutput write_report(const nlohmann::json& results, const std::filesystem::path& results_dir,
                          const ReportOptions& options);

// Only the markdown, no files written and no plots linked: what write_report puts in report.md when no plot
// could be drawn. `results_dir` as above.
std::string render_report_markdown(const nlohmann::json& results, const std::filesystem::path& results_dir,
                                   std::optional<size_t> timeline_cell = std::nullopt);

// reports/plot.py: BPBENCH_SOURCE_DIR/reports/plot.py when it exists, else next to the running executable
// (EXE_DIR/../reports/plot.py, EXE_DIR/reports/plot.py, EXE_DIR/../share/bpbench/plot.py). Empty when none.
std::string find_plot_script();

// `bpbench report` (args: what follows "report"). 0 success (also when plots could not be drawn: a warning
// line on stderr), 2 bad arguments or unreadable results (one line `bpbench: error: ...` on stderr).
int report_main(const std::vector<std::string>& args);
int report_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace bpbench
