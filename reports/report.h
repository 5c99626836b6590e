// report.h: `bpbench report RESULTS.json --out DIR`: results.json -> DIR/report.md (the paper's tables) and
// DIR/*.png (the paper's figures, drawn by reports/plot.py with Debian's python3-matplotlib), and
// DIR/report.html: one self-contained page with the same tables, sortable, every figure as inline SVG with
// values on hover, a row per cell with links to its files, and every cell's memory timeline, interactive
// (reports/html/: markdown_html.h, html_page.h, report_html.h, report.js).
//
// report.md, in the StreamBP paper's layout (see docs/compare.md for every format):
//   Table 3   maximum sequence length: rows model (objective, ...), columns impl, "20.5k" (k = 1000 tokens)
//   Fig. 3    peak BP memory: rows impl, columns seq_len, "peak (+above base)"  -> peak_vs_seq_len.png
//   Table 1   BP time: rows impl, columns seq_len, median seconds
//   Fig. 5    BP time and peak vs partition size, for every partition sweep     -> partition_sweep.png
//   Table 7   gradient error: rows parameter group, columns (impl, dtype) cells, Er_abs and Er_rel
//   Fig. 1/8  the stacked memory timeline by category of one cell               -> timeline.png
//   ranks     distributed cells (world_size > 1): per rank its status, peak, BP time and collectives
// Cells that did not run read "oom", "skipped: reason" or "error: reason" wherever they would have a value.
//
// The C++ side does all the selection and grouping and writes DIR/plot_data.json; plot.py only draws it. When
// python or matplotlib is missing the report is written without figures and one warning line goes to stderr.
//
// Files, one job each:
//   results_file.h/.cpp  loading and checking results.json, and the formatters shared with compare.cpp
//                        (included here, so users of this header keep seeing them)
//   analysis.h/.cpp      the model of a results file that every table reads (internal: report_detail)
//   sections.h           the sections below, one file each (internal: report_detail):
//     table_max_length.cpp (Table 3), table_memory.cpp (Fig. 3), table_time.cpp (Table 1),
//     table_partition.cpp (Fig. 5), table_grad_error.cpp (Table 7), timeline.cpp (Fig. 1/8),
//     table_distributed.cpp (per-rank cells)
//   figures.h/.cpp       running plot.py, finding it
//   report.cpp           the document: the summary, the sections in order, the cells that did not run, and
//                        this header's functions
#pragma once

#include <filesystem>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "reports/results_file.h"

namespace bpbench {

struct ReportOptions {
  std::filesystem::path results;        // results.json (or its directory)
  std::filesystem::path out_dir;        // empty: "report" next to results.json
  std::optional<size_t> timeline_cell;  // index into "cells"; none: the first cell with a timeline
  std::string python = "/usr/bin/python3";
  std::string plot_script;  // empty: find_plot_script()
};

struct ReportOutput {
  std::filesystem::path markdown;            // DIR/report.md
  std::filesystem::path html;                // DIR/report.html: the same tables, every figure as inline SVG
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
