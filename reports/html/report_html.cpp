// report_html.cpp: report.html's cell index and its timelines (report_html.h).
#include "reports/html/report_html.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "reports/sections.h"

namespace bpbench::report_detail {

namespace {

// Phases carried a timeline: enough for the innermost phase under the cursor, bounded for the page's size.
constexpr size_t kMaxPhases = 4000;

// A file of the results directory as a link from the page's directory.
std::string link_from(const fs::path& out_dir, const fs::path& results_dir, const std::string& file) {
  const fs::path target = fs::absolute(results_dir / file).lexically_normal();
  const fs::path rel = target.lexically_relative(fs::absolute(out_dir).lexically_normal());
  return (rel.empty() ? target : rel).generic_string();
}

// A cell's files, as [label, file] pairs, those it has.
std::vector<std::pair<std::string, std::string>> cell_files(const CellView& c) {
  std::vector<std::pair<std::string, std::string>> files;
  const std::pair<const char*, const char*> kinds[] = {{"timeline", "timeline_file"},
                                                       {"memory_viz snapshot", "snapshot_file"},
                                                       {"Chrome trace", "trace_file"}};
  for (const auto& [label, key] : kinds)
    if (!text(c.memory, key).empty()) files.emplace_back(label, text(c.memory, key));
  return files;
}

double point_time(const json& p) {
  return number(p, "t_ms").value_or(0.0);
}

json timeline_for_page(const Analysis& a, const CellView& c, const json& timeline, const fs::path& out_dir) {
  const json& points = field(timeline, "points");
  const auto cats = timeline_categories(points);
  const auto keep = thin_to_columns(points, kTimelineColumns);
  const size_t peak = peak_point(points);
  json t_ms = json::array(), live = json::array(), by = json::object();
  for (const auto& cat : cats) by[cat] = json::array();
  size_t peak_at = 0;
  for (size_t k = 0; k < keep.size(); ++k) {
    const json& p = points[keep[k]];
    if (keep[k] == peak) peak_at = k;
    t_ms.push_back(std::round(point_time(p) * 1e4) / 1e4);  // 0.1 us: finer than any recorder's clock
    live.push_back(point_live(p));
    for (const auto& cat : cats) by[cat].push_back(integer(field(p, "by_category"), cat.c_str()).value_or(0));
  }
  const double end = points.empty() ? 0.0 : point_time(points.back());
  // Shallow phases first, so that a bound keeps the rows drawn and drops the deepest.
  std::vector<const json*> phases;
  for (const auto& ph : field(timeline, "phases")) phases.push_back(&ph);
  std::stable_sort(phases.begin(), phases.end(), [](const json* x, const json* y) {
    return integer(*x, "depth").value_or(0) < integer(*y, "depth").value_or(0);
  });
  json page_phases = json::array();
  for (const json* ph : phases) {
    if (page_phases.size() >= kMaxPhases) break;
    const double b = number(*ph, "begin_ms").value_or(0.0);
    double e = number(*ph, "end_ms").value_or(-1.0);
    if (e < 0) e = std::max(end, b);
    page_phases.push_back({{"name", text(*ph, "name")},
                           {"begin_ms", b},
                           {"end_ms", e},
                           {"depth", integer(*ph, "depth").value_or(0)}});
  }
  json links = json::array();
  for (const auto& [label, file] : cell_files(c))
    links.push_back({{"label", label}, {"href", link_from(out_dir, a.results_dir, file)}});
  const json highest = points.empty() ? json::object() : points[peak];
  return {{"cell", c.index},
          {"title",
           fmt::format("Cell #{}: {}", c.index, axes_label(c.axes, a.heading_keys({}, {"impl", "seq_len"})))},
          {"categories", cats},
          {"t_ms", t_ms},
          {"live", live},
          {"by_category", by},
          {"phases", page_phases},
          {"peak",
           {{"index", peak_at},
            {"t_ms", point_time(highest)},
            {"bytes", point_live(highest)},
            {"phase", innermost_phase(field(timeline, "phases"), point_time(highest))}}},
          {"estimate_bytes", c.estimate ? json(*c.estimate) : json(nullptr)},
          {"budget_bytes", a.budget ? json(*a.budget) : json(nullptr)},
          {"points_total", points.size()},
          {"links", links}};
}

}  // namespace

std::string section_cells(const Analysis& a, const fs::path& out_dir) {
  if (a.cells.empty()) return "";
  const auto keys = a.heading_keys({}, {"impl", "seq_len"});
  std::vector<std::string> header = {"cell"};
  for (const auto& k : keys) header.push_back(k);
  header.insert(header.end(), {"status", "peak", "estimate", "BP time", "files"});
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : a.cells) {
    std::vector<std::string> row = {fmt::format("#{}", c.index)};
    for (const auto& k : keys) row.push_back(c.axis(k));
    row.push_back(c.ok() ? "ok" : outcome_text(c));
    row.push_back(c.peak ? format_bytes(*c.peak) : kDash);
    row.push_back(c.estimate ? format_bytes(*c.estimate) : kDash);
    row.push_back(c.time_median ? format_time(*c.time_median) : kDash);
    std::vector<std::string> links;
    for (const auto& [label, file] : cell_files(c))
      links.push_back(fmt::format("[{}]({})", label, link_from(out_dir, a.results_dir, file)));
    row.push_back(fmt::format("{}", fmt::join(links, ", ")));
    rows.push_back(std::move(row));
  }
  return "\n## Cells\n\nEvery cell of the results, one row each (a click on a heading sorts).\n\n" +
         md_table(header, rows, 1 + keys.size() + 1);
}

std::vector<size_t> thin_to_columns(const json& points, size_t columns) {
  const size_t n = points.size();
  std::vector<size_t> keep;
  if (n == 0) return keep;
  const double t0 = point_time(points.front()), t1 = point_time(points.back());
  const size_t cols = std::max<size_t>(columns, 1);
  auto column_of = [&](size_t i) {
    if (!(t1 > t0)) return size_t{0};
    const double f = (point_time(points[i]) - t0) / (t1 - t0);
    return std::min(cols - 1, static_cast<size_t>(std::max(0.0, f) * static_cast<double>(cols)));
  };
  keep.push_back(0);
  // One pass over runs of consecutive points in one column (time only grows, so a column is one run).
  for (size_t i = 0; i < n;) {
    const size_t col = column_of(i);
    size_t lo = i, hi = i;
    int64_t lowest = point_live(points[i]), highest = lowest;
    size_t j = i + 1;
    for (; j < n && column_of(j) == col; ++j) {
      const int64_t live = point_live(points[j]);
      if (live < lowest) lo = j, lowest = live;
      if (live > highest) hi = j, highest = live;
    }
    keep.push_back(std::min(lo, hi));
    keep.push_back(std::max(lo, hi));
    i = j;
  }
  keep.push_back(n - 1);
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());  // runs follow each other: already ascending
  return keep;
}

json html_timelines(const Analysis& a, const fs::path& out_dir, std::optional<size_t> first,
                    std::vector<std::string>& problems) {
  std::vector<const CellView*> order;
  for (const auto& c : a.cells) {
    if (first && c.index == *first)
      order.insert(order.begin(), &c);
    else
      order.push_back(&c);
  }
  json out = json::array();
  for (const CellView* c : order) {
    if (!c->has_timeline()) continue;
    try {
      const json timeline = read_timeline(*c, a.results_dir);
      if (field(timeline, "points").is_array() && !field(timeline, "points").empty())
        out.push_back(timeline_for_page(a, *c, timeline, out_dir));
    } catch (const std::exception& e) {
      problems.push_back(fmt::format("cell #{}: {}", c->index, e.what()));
    }
  }
  return out;
}

}  // namespace bpbench::report_detail
