// report_html.h: what report.html holds beyond report.md's tables (internal to reports/, in
// bpbench::report_detail): one row per cell with links to its files, and every cell's memory timeline thinned
// to the pixels report.js draws it on.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

#include "reports/analysis.h"

namespace bpbench::report_detail {

// The timeline's width in SVG units (report.js: W less the margins): one column of thinned points each.
inline constexpr size_t kTimelineColumns = 924;

// Markdown: "## Cells", one row per cell of the results (its axes, status, peak, estimate, BP time) and links
// to its timeline, memory snapshot and Chrome trace, relative to `out_dir` where the page is written.
std::string section_cells(const Analysis& a, const std::filesystem::path& out_dir);

// Indices of the points to draw on `columns` pixel columns: per column the lowest and the highest live
// bytes (the first of equals), in time order, with the first and the last point; the highest point of the
// whole timeline (the first of equals) is kept, so the drawn peak is the measured one.
std::vector<size_t> thin_to_columns(const json& points, size_t columns);

// Every cell's timeline for report.js: [{"cell", "title", "categories", "t_ms", "live", "by_category",
// "phases", "peak": {"index", "t_ms", "bytes", "phase"}, "estimate_bytes", "budget_bytes", "points_total",
// "links"}]: the cell report.md shows (`first`, when it has one) first, so the text above the figure speaks
// of the timeline under it, then the others in order. A timeline that cannot be read is left out and its
// reason added to `problems`.
json html_timelines(const Analysis& a, const std::filesystem::path& out_dir, std::optional<size_t> first,
                    std::vector<std::string>& problems);

}  // namespace bpbench::report_detail
