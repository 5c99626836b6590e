// timeline.cpp: Figures 1 and 8, the memory timeline of one cell: which cell, its table of phases, and the
// points plot.py stacks by category.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "harness/run/scenario.h"
#include "reports/sections.h"

namespace bpbench::report_detail {

namespace {

constexpr size_t kMaxTimelinePoints = 6000;  // plotted points; the PNG is ~1600 px wide
constexpr size_t kMaxPhases = 3000;

// Keeps at most ~kMaxTimelinePoints: per bucket of consecutive points the lowest and the highest (in time
// order), so the envelope and the true peak survive.
std::vector<size_t> thin_points(const json& points) {
  std::vector<size_t> keep;
  const size_t n = points.size();
  if (n <= kMaxTimelinePoints) {
    for (size_t i = 0; i < n; ++i) keep.push_back(i);
    return keep;
  }
  const size_t bucket = (n + kMaxTimelinePoints / 2 - 1) / (kMaxTimelinePoints / 2);
  for (size_t b = 0; b < n; b += bucket) {
    size_t lo = b, hi = b;
    for (size_t i = b; i < std::min(n, b + bucket); ++i) {
      const int64_t live = integer(points[i], "live").value_or(0);
      if (live < integer(points[lo], "live").value_or(0)) lo = i;
      if (live > integer(points[hi], "live").value_or(0)) hi = i;
    }
    keep.push_back(std::min(lo, hi));
    if (lo != hi) keep.push_back(std::max(lo, hi));
  }
  return keep;
}

}  // namespace

json read_timeline(const CellView& c, const fs::path& results_dir) {
  const json& inline_tl = field(c.memory, "timeline");
  if (inline_tl.is_object()) return inline_tl;
  const fs::path file = results_dir / text(c.memory, "timeline_file");
  std::ifstream in(file);
  if (!in) throw InputError(fmt::format("cannot read timeline file '{}'", file.string()));
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded()) throw InputError(fmt::format("timeline file '{}' is not valid JSON", file.string()));
  if (field(j, "points").is_array()) return j;
  if (field(j, "timeline").is_object()) return j["timeline"];
  throw InputError(fmt::format("timeline file '{}' has no \"points\"", file.string()));
}

// The category order of the paper's Figure 1: what lives longest at the bottom.
std::vector<std::string> timeline_categories(const json& points) {
  std::set<std::string> seen;
  for (const auto& p : points)
    for (const auto& [k, v] : field(p, "by_category").items()) seen.insert(k);
  std::vector<std::string> out;
  for (const auto& c : memory_categories())
    if (seen.count(c)) out.push_back(c);
  for (const auto& c : seen)
    if (!contains(out, c)) out.push_back(c);
  return out;
}

int64_t point_live(const json& p) {
  if (auto live = integer(p, "live")) return *live;
  int64_t sum = 0;
  for (const auto& [k, v] : field(p, "by_category").items())
    if (v.is_number()) sum += v.get<int64_t>();
  return sum;
}

size_t peak_point(const json& points) {
  size_t at = 0;
  for (size_t i = 0; i < points.size(); ++i)
    if (point_live(points[i]) > point_live(points[at])) at = i;
  return at;
}

std::string innermost_phase(const json& phases, double t) {
  std::string name;
  int64_t depth = -1;
  for (const auto& ph : phases) {
    const double b = number(ph, "begin_ms").value_or(0.0), e = number(ph, "end_ms").value_or(-1.0);
    const int64_t d = integer(ph, "depth").value_or(0);
    if (b <= t && (e < 0 || t <= e) && d > depth) name = text(ph, "name"), depth = d;
  }
  return name;
}

TimelineChoice choose_timeline(const Analysis& a, std::optional<size_t> index) {
  TimelineChoice t;
  if (index) {
    if (*index >= a.cells.size())
      input_error(fmt::format("report: --timeline-cell {} is out of range", *index),
                  fmt::format("0 to {}", a.cells.size() == 0 ? 0 : a.cells.size() - 1));
    const CellView& c = a.cells[*index];
    if (!c.has_timeline()) {
      std::vector<std::string> with;
      for (const auto& x : a.cells)
        if (x.has_timeline()) with.push_back(std::to_string(x.index));
      input_error(fmt::format("report: cell {} has no memory timeline", *index),
                  with.empty() ? std::string("no cell has one (measure.timeline)")
                               : fmt::format("{}", fmt::join(with, ", ")));
    }
    t.cell = &c;
    t.timeline = read_timeline(c, a.results_dir);  // an explicit choice that cannot be read is an error
    return t;
  }
  for (const auto& c : a.cells) {
    if (!c.has_timeline()) continue;
    t.cell = &c;
    try {
      t.timeline = read_timeline(c, a.results_dir);
    } catch (const std::exception& e) {
      t.problem = e.what();
    }
    return t;
  }
  return t;
}

json timeline_plot_data(const Analysis& a, const TimelineChoice& t) {
  const json& points = field(t.timeline, "points");
  json d;
  d["title"] = fmt::format("Memory timeline of cell #{}: {}", t.cell->index,
                           axes_label(t.cell->axes, a.heading_keys({}, {"impl", "seq_len"})));
  const auto cats = timeline_categories(points);
  d["categories"] = cats;
  json t_ms = json::array(), live = json::array(), by = json::object();
  for (const auto& c : cats) by[c] = json::array();
  for (size_t i : thin_points(points)) {
    const json& p = points[i];
    t_ms.push_back(number(p, "t_ms").value_or(0.0));
    live.push_back(point_live(p));
    for (const auto& c : cats) by[c].push_back(integer(field(p, "by_category"), c.c_str()).value_or(0));
  }
  d["t_ms"] = t_ms;
  d["live"] = live;
  d["by_category"] = by;
  const double end = t_ms.empty() ? 0.0 : t_ms.back().get<double>();
  json phases = json::array();
  for (const auto& ph : field(t.timeline, "phases")) {
    const int64_t depth = integer(ph, "depth").value_or(0);
    if (depth > 1 || phases.size() >= kMaxPhases) continue;
    const double b = number(ph, "begin_ms").value_or(0.0);
    double e = number(ph, "end_ms").value_or(-1.0);
    if (e < 0) e = std::max(end, b);
    phases.push_back({{"name", text(ph, "name")}, {"begin_ms", b}, {"end_ms", e}, {"depth", depth}});
  }
  d["phases"] = phases;
  d["budget_bytes"] = a.budget ? json(*a.budget) : json(nullptr);
  return d;
}

namespace {
// Every cell's memory snapshot (memory.snapshot_file: profiles/memory_viz.h, or the CUDA allocator's own of
// an OOM), linked, and how to open it in PyTorch's viewer.
std::string section_snapshots(const Analysis& a) {
  std::vector<std::string> links;
  for (const auto& c : a.cells) {
    const std::string file = text(c.memory, "snapshot_file");
    if (!file.empty()) links.push_back(fmt::format("[#{}](../{})", c.index, file));
  }
  if (links.empty()) return "";
  return fmt::format(
      "\nMemory snapshots, one a cell, in PyTorch's memory viewer format: {}. Drop one on "
      "https://pytorch.org/memory_viz (\"Active Memory Timeline\"; each allocation's stack is the phases "
      "it was made in), or render it offline: `python -m torch.cuda._memory_viz trace_plot FILE -o "
      "FILE.html`; `python scripts/memory_viz_check.py RESULTS_DIR --html` renders them all beside "
      "results.json and checks each trace's peak against the cell's.\n",
      fmt::join(links, ", "));
}
}  // namespace

std::string section_timeline(const Analysis& a, const TimelineChoice& t, bool plot_drawn) {
  std::string s = "\n## Memory timeline (Figures 1 and 8)\n\n";
  if (!t.cell)
    return s + "No cell recorded a memory timeline (scenario \"measure\": {\"timeline\": true}).\n";
  const std::string label = axes_label(t.cell->axes, a.heading_keys({}, {"impl", "seq_len"}));
  if (!t.problem.empty())
    return s + fmt::format("Cell #{} ({}) has a timeline, but {}.\n", t.cell->index, label, t.problem);
  const json& points = field(t.timeline, "points");
  if (!points.is_array() || points.empty())
    return s + fmt::format("Cell #{} ({}): the timeline is empty.\n", t.cell->index, label);
  const size_t at = peak_point(points);
  const double t_peak = number(points[at], "t_ms").value_or(0.0);
  const double t_end = number(points.back(), "t_ms").value_or(0.0);
  const std::string phase = innermost_phase(field(t.timeline, "phases"), t_peak);
  s += fmt::format("Cell #{}: {}. {} points over {:.1f} ms; peak {} at t = {:.1f} ms{}.\n\n", t.cell->index,
                   label, points.size(), t_end, format_bytes(point_live(points[at])), t_peak,
                   phase.empty() ? std::string() : fmt::format(" (in \"{}\")", phase));
  if (plot_drawn) s += "![memory timeline by category](timeline.png)\n\n";
  // Top-level phases with the highest live bytes inside each.
  std::vector<std::vector<std::string>> rows;
  for (const auto& ph : field(t.timeline, "phases")) {
    if (integer(ph, "depth").value_or(0) != 0) continue;
    const double b = number(ph, "begin_ms").value_or(0.0);
    double e = number(ph, "end_ms").value_or(-1.0);
    if (e < 0) e = t_end;
    int64_t high = 0;
    for (const auto& p : points) {
      const double tp = number(p, "t_ms").value_or(0.0);
      if (tp >= b && tp <= e) high = std::max(high, point_live(p));
    }
    rows.push_back(
        {text(ph, "name"), fmt::format("{:.1f}", b), fmt::format("{:.1f}", e), format_bytes(high)});
  }
  if (!rows.empty()) {
    const size_t shown = std::min<size_t>(rows.size(), 40);
    std::vector<std::vector<std::string>> head(rows.begin(), rows.begin() + shown);
    s += md_table({"phase", "begin (ms)", "end (ms)", "highest live"}, head);
    if (shown < rows.size())
      s += fmt::format("\n({} more top-level phases not listed)\n", rows.size() - shown);
  }
  return s + section_snapshots(a);
}

}  // namespace bpbench::report_detail
