// report.cpp: results.json -> report.md (the paper's tables) + plot_data.json -> reports/plot.py -> PNGs.
//
// Reading is tolerant: results.json is read as JSON, not through CellResult::from_json, so that cells from
// newer issues (max-length searches without a seq_len axis, timelines, estimates) and older files with fields
// missing still render. Every value that is absent renders as "–".
#include "reports/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "harness/model/rope_config.h"
#include "harness/run/results.h"
#include "harness/run/scenario.h"
#include "reports/results_json.h"

namespace bpbench {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr int kExitOk = 0, kExitFailure = 1, kExitInput = 2;
constexpr size_t kMaxTimelinePoints = 6000;  // plotted points; the PNG is ~1600 px wide
constexpr size_t kMaxPhases = 3000;
constexpr const char* kDash = "–";

const char* kReportHelp =
    R"HELP(usage: bpbench report RESULTS.json [--out DIR] [--timeline-cell INDEX] [--python PATH]

Turns a results.json into DIR/report.md with the StreamBP paper's tables and DIR/*.png with its figures:
  Table 3   maximum sequence length per model x strategy (from max-length cells; else the longest length
            that ran in the grid, marked as a lower bound)
  peak      peak BP memory per strategy x sequence length (peak and above-base), breakdown by category
  Table 1   BP time (median seconds) per strategy x sequence length
  Figure 3  peak_vs_seq_len.png: peak memory vs sequence length, one line per strategy
  Figure 5  partition_sweep.png: BP time and peak vs partition size (twin axes), where a grid sweeps it
  Table 7   gradient error Er_abs / Er_rel per parameter group against the float64 reference
  Fig. 1/8  timeline.png: the memory timeline of one cell, stacked by category, with phase marks
Cells that did not run read "oom", "skipped: reason" or "error: reason".

RESULTS may also be the directory that holds results.json. Figures are drawn by reports/plot.py with
matplotlib; without python or matplotlib the markdown is still written and one warning line is printed.

options:
  --out DIR             output directory (default: DIR_OF_RESULTS/report)
  --timeline-cell INDEX the cell (0-based index into "cells") whose timeline to plot (default: the first cell
                        that has one)
  --python PATH         the python with matplotlib (default: /usr/bin/python3)
  -h, --help            this text

Exit status: 0 report written (with or without figures); 2 bad arguments or unreadable results (one line
`bpbench: error: ...` on stderr); 1 anything else.
)HELP";

using namespace results_json;  // field, number, integer, text, flag

// ---- markdown ---------------------------------------------------------------------------------------------

std::string md_escape(std::string s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|')
      out += "\\|";
    else if (ch == '\n' || ch == '\r')
      out += ' ';
    else
      out += ch;
  }
  return out;
}

std::string shorten(const std::string& s, size_t max_chars = 60) {
  if (s.size() <= max_chars) return s;
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
  return s.substr(0, cut) + "…";
}

std::string md_table(const std::vector<std::string>& header,
                     const std::vector<std::vector<std::string>>& rows, size_t left_columns = 1) {
  std::string out = "|";
  for (const auto& h : header) out += " " + md_escape(h) + " |";
  out += "\n|";
  for (size_t i = 0; i < header.size(); ++i) out += i < left_columns ? "---|" : "--:|";
  out += "\n";
  for (const auto& row : rows) {
    out += "|";
    for (size_t i = 0; i < header.size(); ++i) out += " " + md_escape(i < row.size() ? row[i] : "") + " |";
    out += "\n";
  }
  return out;
}

// Tokens as the paper's Table 3 writes them, in thousands ("20.5k"); below 1000 the exact count.
std::string thousands(int64_t tokens) {
  if (tokens < 1000) return std::to_string(tokens);
  return fmt::format("{:.1f}k", static_cast<double>(tokens) / 1000.0);
}

std::string dtype_short(const std::string& dtype) {
  if (dtype == "float32") return "fp32";
  if (dtype == "bfloat16") return "bf16";
  if (dtype == "float64") return "fp64";
  if (dtype == "float16") return "fp16";
  return dtype;
}

// ---- one cell, normalised ---------------------------------------------------------------------------------

struct CellView {
  size_t index = 0;
  json axes = json::object();
  std::string status, reason;
  std::optional<int64_t> seq_len, partition, logits_partition;
  bool uses_partition = false, uses_logits_partition = false;
  json memory;  // the raw "memory" object or null
  std::optional<int64_t> peak, base, above_base, estimate;
  std::optional<double> time_median;
  int64_t time_count = 0;
  std::optional<int64_t> max_seq_len;
  json probes;              // array or null
  json grad_error;          // object or null
  json ranks;               // a distributed cell: one record per rank (peak, time, comm), else null
  bool max_length = false;  // a max-length search: "max_seq_len"/"probes", or no seq_len axis
  bool hit_upper = false;   // the search stopped at its upper limit: the maximum is at least max_seq_len

  bool ok() const { return status == "ok"; }
  std::string axis(const std::string& key) const {
    auto it = axes.find(key);
    return it == axes.end() ? std::string() : axis_value_text(*it);
  }
  bool has_timeline() const {
    return field(memory, "timeline").is_object() || field(memory, "timeline_file").is_string();
  }
};

CellView view_cell(const json& c, size_t index) {
  CellView v;
  v.index = index;
  v.axes = field(c, "axes").is_object() ? field(c, "axes") : json::object();
  v.status = text(c, "status");
  v.reason = text(c, "reason");
  v.seq_len = integer(v.axes, "seq_len");
  v.partition = integer(v.axes, "partition");
  v.logits_partition = integer(v.axes, "logits_partition");
  v.uses_partition = flag(c, "uses_partition");
  v.uses_logits_partition = flag(c, "uses_logits_partition");
  v.memory = field(c, "memory");
  v.peak = integer(v.memory, "peak_bytes");
  v.base = integer(v.memory, "base_bytes");
  v.above_base = integer(v.memory, "peak_above_base_bytes");
  if (!v.above_base && v.peak && v.base) v.above_base = *v.peak - *v.base;
  v.estimate = integer(v.memory, "estimate_bytes");
  const json& t = field(c, "time");
  v.time_median = number(t, "median_s");
  v.time_count = integer(t, "count").value_or(field(t, "runs_s").is_array() ? field(t, "runs_s").size() : 0);
  v.max_seq_len = integer(c, "max_seq_len");
  v.hit_upper = flag(c, "hit_upper");
  v.probes = field(c, "probes").is_array() ? field(c, "probes") : json();
  v.grad_error = field(c, "grad_error").is_object() ? field(c, "grad_error") : json();
  v.ranks = field(c, "ranks").is_array() ? field(c, "ranks") : json();
  v.max_length = v.max_seq_len.has_value() || v.probes.is_array() || !v.seq_len.has_value();
  return v;
}

// What a cell that did not run shows instead of a value.
std::string outcome_text(const CellView& c) {
  if (c.status == "oom") return "oom";
  if (c.status == "skipped") return "skipped: " + shorten(c.reason);
  if (c.status == "error") return "error: " + shorten(c.reason);
  return c.status.empty() ? std::string(kDash) : c.status;
}

// ---- grouping ---------------------------------------------------------------------------------------------

using Cells = std::vector<const CellView*>;

// Groups in first-appearance order.
template <class KeyFn>
std::vector<std::pair<std::string, Cells>> group_by(const Cells& cells, KeyFn key) {
  std::vector<std::pair<std::string, Cells>> groups;
  std::map<std::string, size_t> where;
  for (const CellView* c : cells) {
    const std::string k = key(*c);
    auto it = where.find(k);
    if (it == where.end()) {
      where[k] = groups.size();
      groups.push_back({k, {c}});
    } else {
      groups[it->second].second.push_back(c);
    }
  }
  return groups;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// A strategy label: the impl, plus "ps=N" / "lps=N" where the same impl appears with several partition sizes
// in the same slot (e.g. the same seq_len column) of one table, so that a partition sweep gets one row per
// size.
class ImplLabeler {
 public:
  template <class SlotFn>
  ImplLabeler(const Cells& cells, SlotFn slot) {
    std::map<std::string, std::set<int64_t>> ps, lps;
    for (const CellView* c : cells) {
      const std::string k = c->axis("impl") + "\x1f" + slot(*c);
      if (c->uses_partition && c->partition) ps[k].insert(*c->partition);
      if (c->uses_logits_partition && c->logits_partition) lps[k].insert(*c->logits_partition);
    }
    for (const auto& [k, s] : ps)
      if (s.size() > 1) split_ps_.insert(k.substr(0, k.find('\x1f')));
    for (const auto& [k, s] : lps)
      if (s.size() > 1) split_lps_.insert(k.substr(0, k.find('\x1f')));
  }
  std::string label(const CellView& c) const {
    std::string s = c.axis("impl");
    if (split_ps_.count(c.axis("impl")) && c.uses_partition && c.partition)
      s += fmt::format(" ps={}", *c.partition);
    if (split_lps_.count(c.axis("impl")) && c.uses_logits_partition && c.logits_partition)
      s += fmt::format(" lps={}", *c.logits_partition);
    return s;
  }

 private:
  std::set<std::string> split_ps_, split_lps_;
};

// ---- the whole results file, analysed ---------------------------------------------------------------------

struct Analysis {
  json doc;
  fs::path results_dir;
  std::vector<CellView> cells;
  std::vector<std::string> keys;     // every axis key, display order
  std::vector<std::string> varying;  // keys whose values differ between cells
  std::map<std::string, size_t> impl_rank;
  std::optional<int64_t> budget;

  Cells select(bool (*pred)(const CellView&)) const {
    Cells out;
    for (const auto& c : cells)
      if (pred(c)) out.push_back(&c);
    return out;
  }
  // Axis keys whose values differ between the given cells.
  static std::vector<std::string> varying_in(const Cells& subset) {
    std::vector<json> axes;
    for (const CellView* c : subset) axes.push_back(c->axes);
    return varying_axis_keys(axes);
  }
  // Keys that name a table: always model/objective/dtype (and the `extra` ones), plus whatever else varies
  // (among `subset` when given, else among all cells), minus the keys the table spreads over its rows and
  // columns.
  std::vector<std::string> heading_keys(const std::vector<std::string>& exclude,
                                        const std::vector<std::string>& extra = {},
                                        const Cells* subset = nullptr) const {
    const std::vector<std::string> vary = subset ? varying_in(*subset) : varying;
    std::vector<std::string> out;
    for (const auto& k : keys) {
      const bool wanted =
          k == "model" || k == "objective" || k == "dtype" || contains(extra, k) || contains(vary, k);
      if (wanted && !contains(exclude, k)) out.push_back(k);
    }
    return out;
  }
  size_t rank(const std::string& impl) const {
    auto it = impl_rank.find(impl);
    return it == impl_rank.end() ? impl_rank.size() : it->second;
  }
  // Sorts row labels "impl[ ps=N][ lps=N]" by the impl's first appearance, then by the partition numbers.
  void sort_labels(std::vector<std::string>& labels) const {
    auto key = [&](const std::string& l) {
      const std::string impl = l.substr(0, l.find(' '));
      auto num_after = [&](const std::string& tag) -> int64_t {
        auto p = l.find(tag);
        return p == std::string::npos ? -1 : std::atoll(l.c_str() + p + tag.size());
      };
      return std::make_tuple(rank(impl), impl, num_after(" ps="), num_after(" lps="));
    };
    std::stable_sort(labels.begin(), labels.end(),
                     [&](const auto& a, const auto& b) { return key(a) < key(b); });
  }
};

Analysis analyse(const json& doc, const fs::path& results_dir) {
  Analysis a;
  a.doc = doc;
  a.results_dir = results_dir;
  const json& cells = field(doc, "cells");
  std::vector<json> axes_list;
  for (size_t i = 0; i < cells.size(); ++i) {
    a.cells.push_back(view_cell(cells[i], i));
    axes_list.push_back(a.cells.back().axes);
  }
  a.keys = ordered_axis_keys(axes_list);
  a.varying = varying_axis_keys(axes_list);
  for (const auto& c : a.cells)
    if (!a.impl_rank.count(c.axis("impl"))) a.impl_rank[c.axis("impl")] = a.impl_rank.size();
  const json& measure = field(field(field(doc, "meta"), "scenario"), "measure");
  a.budget = integer(measure, "budget_bytes");
  return a;
}

bool is_grid_cell(const CellView& c) {
  return !c.max_length;
}
bool is_max_length_cell(const CellView& c) {
  return c.max_length;
}

std::vector<int64_t> sorted_seq_lens(const Cells& cells) {
  std::set<int64_t> s;
  for (const CellView* c : cells)
    if (c->seq_len) s.insert(*c->seq_len);
  return {s.begin(), s.end()};
}

// A table: rows = strategy labels, columns = sequence lengths, one string per cell from `value`.
template <class ValueFn>
std::string impl_by_seq_len_table(const Analysis& a, const Cells& cells, ValueFn value) {
  const ImplLabeler labeler(cells, [](const CellView& c) { return c.axis("seq_len"); });
  std::vector<std::string> labels;
  std::map<std::pair<std::string, int64_t>, const CellView*> at;
  for (const CellView* c : cells) {
    const std::string l = labeler.label(*c);
    if (!contains(labels, l)) labels.push_back(l);
    at.emplace(std::make_pair(l, c->seq_len.value_or(0)), c);  // the first of duplicates wins
  }
  a.sort_labels(labels);
  const auto lens = sorted_seq_lens(cells);
  std::vector<std::string> header = {"impl"};
  for (int64_t t : lens) header.push_back(fmt::format("T={}", t));
  std::vector<std::vector<std::string>> rows;
  for (const auto& l : labels) {
    std::vector<std::string> row = {l};
    for (int64_t t : lens) {
      auto it = at.find({l, t});
      row.push_back(it == at.end() ? "" : value(*it->second));
    }
    rows.push_back(row);
  }
  return md_table(header, rows);
}

std::string heading(const CellView& c, const std::vector<std::string>& keys) {
  const std::string l = axes_label(c.axes, keys);
  return l.empty() ? "all cells" : l;
}

// ---- sections ---------------------------------------------------------------------------------------------

std::string section_summary(const Analysis& a, const std::string& source) {
  const json& meta = field(a.doc, "meta");
  const json& versions = field(meta, "versions");
  std::string s =
      fmt::format("# bpbench report: {}\n\n",
                  text(meta, "scenario_name").empty() ? std::string("results") : text(meta, "scenario_name"));
  const std::string description = text(field(meta, "scenario"), "description");
  if (!description.empty()) s += description + "\n\n";
  std::map<std::string, size_t> by_status;
  for (const auto& c : a.cells) ++by_status[c.status];
  const auto total = integer(a.doc, "cells_total");
  const bool complete = flag(a.doc, "complete");
  s += fmt::format("- results: `{}` ({})\n", source,
                   complete ? "complete"
                            : fmt::format("incomplete: {} of {} cells", a.cells.size(),
                                          total ? std::to_string(*total) : std::string("?")));
  std::vector<std::string> counts;
  for (const char* st : {"ok", "oom", "skipped", "error"})
    counts.push_back(fmt::format("{} {}", by_status[st], st));
  for (const auto& [st, n] : by_status)
    if (st != "ok" && st != "oom" && st != "skipped" && st != "error")
      counts.push_back(fmt::format("{} {}", n, st));
  s += fmt::format("- cells: {}\n", fmt::join(counts, ", "));
  std::vector<std::string> run;
  if (!text(meta, "bpbench_version").empty()) run.push_back("bpbench " + text(meta, "bpbench_version"));
  if (!text(versions, "torch").empty()) run.push_back("torch " + text(versions, "torch"));
  if (!text(meta, "git_commit").empty()) run.push_back("commit " + text(meta, "git_commit").substr(0, 12));
  if (!run.empty()) s += fmt::format("- build: {}\n", fmt::join(run, ", "));
  const std::string device = text(field(meta, "device"), "description");
  if (!device.empty() || integer(meta, "threads"))
    s += fmt::format("- device: {}{}\n", device.empty() ? std::string("?") : device,
                     integer(meta, "threads") ? fmt::format(", {} threads", *integer(meta, "threads")) : "");
  if (!text(meta, "start_time").empty())
    s += fmt::format("- run: {} to {}\n", text(meta, "start_time"),
                     text(meta, "end_time").empty() ? std::string("(not finished)") : text(meta, "end_time"));
  if (a.budget) s += fmt::format("- memory budget: {} (measure.budget_bytes)\n", format_bytes(*a.budget));
  // The RoPE each model ran with (a scenario's override included): losses and gradients belong to it.
  std::vector<std::string> ropes;
  const json& cells = field(a.doc, "cells");
  for (const auto& c : cells.is_array() ? cells : json::array()) {
    if (!field(c, "rope").is_object()) continue;
    const std::string line = fmt::format("{} {}", axis_value_text(field(field(c, "axes"), "model")),
                                         rope_summary(field(c, "rope")));
    if (!contains(ropes, line)) ropes.push_back(line);
  }
  if (!ropes.empty()) s += fmt::format("- RoPE: {}\n", fmt::join(ropes, "; "));
  if (!text(meta, "memory_note").empty()) s += fmt::format("- memory: {}\n", text(meta, "memory_note"));
  s += "\nBytes are shown with GiB = 2^30 and MiB = 2^20 bytes; \"k\" tokens = 1000 tokens.\n";
  return s;
}

// Table 3's layout: a row per value of the axes that tell groups of cells apart (dtype only where it varies),
// a column per strategy label (split by partition where one strategy ran with several), in the analysis's
// order. `slot(row_keys, cell)` names what, besides the strategy, a cell's partition is compared within.
struct StrategyTable {
  std::vector<std::string> row_keys;
  ImplLabeler labeler;
  std::vector<std::string> columns, header;

  template <class SlotFn>
  StrategyTable(const Analysis& a, const Cells& cells, const std::vector<std::string>& exclude, SlotFn slot)
      : row_keys(keys_of(a, cells, exclude)),
        labeler(cells, [&](const CellView& c) { return slot(row_keys, c); }) {
    for (const CellView* c : cells)
      if (!contains(columns, labeler.label(*c))) columns.push_back(labeler.label(*c));
    a.sort_labels(columns);
    header = row_keys;
    header.insert(header.end(), columns.begin(), columns.end());
  }
  std::vector<std::pair<std::string, Cells>> rows(const Cells& cells) const {
    return group_by(cells, [&](const CellView& c) { return axes_label(c.axes, row_keys); });
  }
  std::vector<std::string> row_start(const Cells& row_cells) const {  // the row's key values
    std::vector<std::string> row;
    for (const auto& k : row_keys) row.push_back(row_cells.front()->axis(k));
    return row;
  }

 private:
  static std::vector<std::string> keys_of(const Analysis& a, const Cells& cells,
                                          const std::vector<std::string>& exclude) {
    std::vector<std::string> keys;
    for (const auto& k : a.heading_keys(exclude, {}, &cells))
      if (k != "dtype" || contains(Analysis::varying_in(cells), k)) keys.push_back(k);
    return keys;
  }
};

std::string section_max_length(const Analysis& a) {
  std::string s = "\n## Maximum sequence length (Table 3)\n\n";
  const std::vector<std::string> exclude = {"impl", "seq_len", "partition", "logits_partition"};
  const Cells search = a.select(is_max_length_cell);
  if (!search.empty()) {
    // Rows: model, objective (+ whatever else varies); columns: strategies; value: the longest length that
    // fit.
    const StrategyTable t(a, search, exclude,
                          [](const std::vector<std::string>& row_keys, const CellView& c) {
                            return axes_label(c.axes, row_keys);
                          });
    const auto &row_keys = t.row_keys, &columns = t.columns, &header = t.header;
    const ImplLabeler& labeler = t.labeler;
    std::vector<std::vector<std::string>> rows;
    for (const auto& [row_id, cells] : t.rows(search)) {
      std::vector<std::string> row = t.row_start(cells);
      for (const auto& col : columns) {
        std::string v;
        for (const CellView* c : cells) {
          if (labeler.label(*c) != col) continue;
          if (!c->ok())
            v = outcome_text(*c);
          else if (!c->max_seq_len)
            v = kDash;
          else if (*c->max_seq_len <= 0)
            v = "oom";  // not even the smallest probe fit
          else
            v = (c->hit_upper ? "≥ " : "") + thousands(*c->max_seq_len);
          break;
        }
        row.push_back(v);
      }
      rows.push_back(row);
    }
    s += "The longest sequence (thousands of tokens) whose BP fit in the memory budget";
    s += a.budget ? fmt::format(" ({})", format_bytes(*a.budget)) : std::string();
    s += ". \"≥\": the search stopped at its upper limit; \"oom\": not even the shortest probe fit.\n\n" +
         md_table(header, rows, row_keys.size()) + "\n";
    s += "Probes of each search (sequence length: outcome, peak):\n\n";
    for (const CellView* c : search) {
      std::vector<std::string> probes;
      if (c->probes.is_array()) {
        for (const auto& p : c->probes) {
          const auto len = integer(p, "seq_len");
          const auto peak = integer(p, "peak_bytes");
          probes.push_back(fmt::format("{}: {}{}", len ? std::to_string(*len) : "?", text(p, "status"),
                                       peak ? " " + format_bytes(*peak) : std::string()));
        }
      }
      s += fmt::format(
          "- {}: max {}; {}\n", heading(*c, a.heading_keys({"seq_len"}, {"impl"}, &search)),
          c->max_seq_len ? std::to_string(*c->max_seq_len) : outcome_text(*c),
          probes.empty() ? std::string("no probes recorded") : fmt::format("{}", fmt::join(probes, ", ")));
    }
    return s;
  }

  // No search in these results: the longest grid length that ran is a lower bound of the maximum.
  const Cells grid = a.select(is_grid_cell);
  if (grid.empty()) return s + "No cells.\n";
  const StrategyTable t(a, grid, exclude,
                        [](const std::vector<std::string>&, const CellView& c) { return c.axis("seq_len"); });
  const auto &row_keys = t.row_keys, &columns = t.columns, &header = t.header;
  const ImplLabeler& labeler = t.labeler;
  std::vector<std::vector<std::string>> rows;
  for (const auto& [row_id, cells] : t.rows(grid)) {
    std::vector<std::string> row = t.row_start(cells);
    for (const auto& col : columns) {
      std::optional<int64_t> longest_ok, first_oom;
      const CellView* other = nullptr;
      for (const CellView* c : cells) {
        if (labeler.label(*c) != col || !c->seq_len) continue;
        if (c->ok())
          longest_ok = std::max(longest_ok.value_or(0), *c->seq_len);
        else if (c->status == "oom")
          first_oom = std::min(first_oom.value_or(INT64_MAX), *c->seq_len);
        else if (!other)
          other = c;
      }
      std::string v;
      if (longest_ok) {
        std::optional<int64_t> oom_above;
        for (const CellView* c : cells)
          if (labeler.label(*c) == col && c->status == "oom" && c->seq_len && *c->seq_len > *longest_ok)
            oom_above = std::min(oom_above.value_or(INT64_MAX), *c->seq_len);
        v = oom_above ? fmt::format("{} (oom at {})", thousands(*longest_ok), thousands(*oom_above))
                      : "≥ " + thousands(*longest_ok);
      } else if (first_oom) {
        v = "oom at " + thousands(*first_oom);
      } else if (other) {
        v = outcome_text(*other);
      }
      row.push_back(v);
    }
    rows.push_back(row);
  }
  s += "No max-length search in these results (cells with \"max_seq_len\"); instead, the longest grid length "
       "that "
       "ran, a lower bound of the maximum, and the shortest that ran out of memory. \"≥\": nothing longer "
       "was tried.\n\n";
  return s + md_table(header, rows, row_keys.size());
}

std::string section_peak(const Analysis& a, bool plot_drawn) {
  std::string s = "\n## Peak BP memory vs sequence length (Figure 3)\n\n";
  const Cells grid = a.select(is_grid_cell);
  if (grid.empty()) return s + "No grid cells.\n";
  if (plot_drawn) s += "![peak memory vs sequence length](peak_vs_seq_len.png)\n\n";
  s += "Peak live bytes during one forward + backward, and in parentheses the part above the base "
       "(parameters, "
       "gradients and batch live when the step starts)";
  bool any_estimate = false;
  for (const CellView* c : grid) any_estimate = any_estimate || c->estimate.has_value();
  s += any_estimate ? "; \"est.\" is the strategy's own estimate of the peak.\n" : ".\n";
  const auto keys = a.heading_keys({"impl", "seq_len", "partition", "logits_partition"}, {}, &grid);
  for (const auto& [id, cells] :
       group_by(grid, [&](const CellView& c) { return axes_label(c.axes, keys); })) {
    s += fmt::format("\n### Peak memory: {}\n\n", heading(*cells.front(), keys));
    s += impl_by_seq_len_table(a, cells, [](const CellView& c) -> std::string {
      if (!c.ok()) return outcome_text(c);
      if (!c.peak) return kDash;
      std::string v = format_bytes(*c.peak);
      if (c.above_base) v += fmt::format(" (+{})", format_bytes(*c.above_base));
      if (c.estimate) v += fmt::format(", est. {}", format_bytes(*c.estimate));
      return v;
    });
  }

  // Where the bytes are at the peak.
  std::vector<std::string> categories;
  for (const char* k : {"params", "grads", "checkpoints", "kv", "activations", "logits", "comm", "other"})
    categories.push_back(k);
  std::vector<std::vector<std::string>> rows;
  for (const CellView* c : grid) {
    const json& by = field(c->memory, "peak_by_category");
    if (!c->ok() || !by.is_object()) continue;
    for (const auto& [k, v] : by.items())
      if (!contains(categories, k)) categories.push_back(k);
  }
  std::vector<std::string> used;
  for (const auto& k : categories) {
    bool nonzero = false;
    for (const CellView* c : grid)
      if (c->ok() && integer(field(c->memory, "peak_by_category"), k.c_str()).value_or(0) != 0)
        nonzero = true;
    if (nonzero) used.push_back(k);
  }
  if (used.empty()) return s;
  std::vector<std::string> row_keys;
  const auto grid_varying = Analysis::varying_in(grid);
  for (const auto& k : grid_varying)
    if (k != "partition" && k != "logits_partition") row_keys.push_back(k);
  if (!contains(row_keys, "impl")) row_keys.insert(row_keys.begin(), "impl");
  for (const CellView* c : grid) {
    const json& by = field(c->memory, "peak_by_category");
    if (!c->ok() || !by.is_object()) continue;
    std::string label = axes_label(c->axes, row_keys);
    if (c->uses_partition && contains(grid_varying, "partition") && c->partition)
      label += fmt::format(" ps={}", *c->partition);
    std::vector<std::string> row = {fmt::format("#{} {}", c->index, label)};
    for (const auto& k : used) {
      const auto b = integer(by, k.c_str());
      row.push_back(!b ? "" : *b == 0 ? "0" : format_bytes(*b));
    }
    rows.push_back(row);
  }
  std::vector<std::string> header = {"cell"};
  header.insert(header.end(), used.begin(), used.end());
  s += "\n### Peak memory by category, at the moment of the peak\n\n" + md_table(header, rows);
  return s;
}

std::string section_time(const Analysis& a) {
  std::string s = "\n## BP time (Table 1)\n\n";
  const Cells grid = a.select(is_grid_cell);
  int64_t lo = INT64_MAX, hi = 0;
  for (const CellView* c : grid)
    if (c->time_median) lo = std::min(lo, c->time_count), hi = std::max(hi, c->time_count);
  if (hi == 0) return s + "No timed cells.\n";
  s += fmt::format("Median seconds of one forward + backward over {} measured runs (after warm-up).\n",
                   lo == hi ? std::to_string(lo) : fmt::format("{} to {}", lo, hi));
  const auto keys = a.heading_keys({"impl", "seq_len", "partition", "logits_partition"}, {}, &grid);
  for (const auto& [id, cells] :
       group_by(grid, [&](const CellView& c) { return axes_label(c.axes, keys); })) {
    s += fmt::format("\n### BP time (s): {}\n\n", heading(*cells.front(), keys));
    s += impl_by_seq_len_table(a, cells, [](const CellView& c) -> std::string {
      if (!c.ok()) return outcome_text(c);
      return c.time_median ? format_time(*c.time_median) : kDash;
    });
  }
  return s;
}

// Partition sweeps: cells equal in everything but `axis`, at least two values of it, among strategies that
// use it.
struct Sweep {
  std::string axis;   // partition | logits_partition
  std::string panel;  // the label of everything but axis and seq_len
  const CellView* first = nullptr;
  std::map<int64_t, std::map<int64_t, const CellView*>> by_len;  // seq_len -> partition -> cell
};

std::vector<Sweep> find_sweeps(const Analysis& a) {
  std::vector<Sweep> sweeps;
  for (const std::string axis : {"partition", "logits_partition"}) {
    const bool logits = axis == "logits_partition";
    Cells used;
    for (const auto& c : a.cells)
      if (is_grid_cell(c) &&
          (logits ? c.uses_logits_partition && c.logits_partition : c.uses_partition && c.partition))
        used.push_back(&c);
    std::vector<std::string> series_keys, panel_keys;
    for (const auto& k : a.keys)
      if (k != axis) series_keys.push_back(k);
    for (const auto& k : series_keys)
      if (k != "seq_len") panel_keys.push_back(k);
    std::map<std::string, size_t> panel_index;
    for (const auto& [id, cells] :
         group_by(used, [&](const CellView& c) { return axes_label(c.axes, series_keys); })) {
      std::set<int64_t> values;
      for (const CellView* c : cells) values.insert(logits ? *c->logits_partition : *c->partition);
      if (values.size() < 2) continue;
      const std::string panel = axes_label(cells.front()->axes, panel_keys);
      if (!panel_index.count(panel)) {
        panel_index[panel] = sweeps.size();
        Sweep sw;
        sw.axis = axis;
        sw.panel = panel;
        sw.first = cells.front();
        sweeps.push_back(sw);
      }
      Sweep& sw = sweeps[panel_index[panel]];
      for (const CellView* c : cells)
        sw.by_len[c->seq_len.value_or(0)].emplace(logits ? *c->logits_partition : *c->partition, c);
    }
  }
  return sweeps;
}

std::string sweep_title(const Analysis& a, const Sweep& sw) {
  const auto keys = a.heading_keys({"seq_len", "partition", "logits_partition"}, {"impl"});
  return fmt::format("{} sweep: {}", sw.axis == "partition" ? "partition" : "logits partition",
                     axes_label(sw.first->axes, keys));
}

std::string section_partition(const Analysis& a, bool plot_drawn) {
  std::string s = "\n## BP time and peak memory vs partition size (Figure 5)\n\n";
  const auto sweeps = find_sweeps(a);
  if (sweeps.empty())
    return s + "No partition sweep in these results (a grid with several \"partition\" values).\n";
  if (plot_drawn) s += "![BP time and peak vs partition size](partition_sweep.png)\n\n";
  s += "Each entry: median BP time, peak memory.\n";
  for (const auto& sw : sweeps) {
    s += fmt::format("\n### {}\n\n", sweep_title(a, sw));
    std::set<int64_t> parts;
    for (const auto& [len, m] : sw.by_len)
      for (const auto& [p, c] : m) parts.insert(p);
    std::vector<std::string> header = {sw.axis == "partition" ? "partition" : "logits partition"};
    for (const auto& [len, m] : sw.by_len) header.push_back(fmt::format("T={}", len));
    std::vector<std::vector<std::string>> rows;
    for (int64_t p : parts) {
      std::vector<std::string> row = {std::to_string(p)};
      for (const auto& [len, m] : sw.by_len) {
        auto it = m.find(p);
        if (it == m.end()) {
          row.push_back("");
          continue;
        }
        const CellView& c = *it->second;
        if (!c.ok()) {
          row.push_back(outcome_text(c));
          continue;
        }
        row.push_back(fmt::format("{} s, {}", c.time_median ? format_time(*c.time_median) : kDash,
                                  c.peak ? format_bytes(*c.peak) : kDash));
      }
      rows.push_back(row);
    }
    s += md_table(header, rows);
  }
  return s;
}

std::string section_grad_error(const Analysis& a) {
  std::string s = "\n## Gradient error (Table 7)\n\n";
  Cells with;
  for (const auto& c : a.cells)
    if (c.grad_error.is_object()) with.push_back(&c);
  if (with.empty()) return s + "No gradient errors in these results (measure.grad_error).\n";
  std::string reference;
  for (const CellView* c : with)
    if (reference.empty()) reference = text(c->grad_error, "reference");
  s += fmt::format(
      "Against plain BP in {} on the same weights and batch, per parameter group: Er_abs = mean |g_ref - g|, "
      "Er_rel = mean |g_ref - g| / |g_ref + 1e-10|. Row \"loss\": |loss - loss_ref| and its ratio to "
      "|loss_ref|.\n",
      reference.empty() ? "float64" : reference);
  const auto keys = a.heading_keys({"impl", "dtype", "partition", "logits_partition"}, {"seq_len"}, &with);
  std::vector<std::string> notes;
  for (const auto& [id, cells] :
       group_by(with, [&](const CellView& c) { return axes_label(c.axes, keys); })) {
    const ImplLabeler labeler(cells, [](const CellView&) { return std::string(); });
    std::vector<std::string> order = {"embed", "attention", "mlp", "norms", "lm_head", "lora"};
    for (const CellView* c : cells)
      for (const auto& [g, v] : field(c->grad_error, "groups").items())
        if (!contains(order, g) && g != "all") order.push_back(g);
    order.push_back("all");
    std::vector<std::string> groups;
    for (const auto& g : order)
      for (const CellView* c : cells)
        if (field(field(c->grad_error, "groups"), g.c_str()).is_object() && !contains(groups, g))
          groups.push_back(g);
    groups.push_back("loss");
    std::vector<std::string> header = {"group"};
    std::vector<const CellView*> columns;
    for (const CellView* c : cells) {
      columns.push_back(c);
      const std::string l = fmt::format("{} {}", labeler.label(*c), dtype_short(c->axis("dtype")));
      header.push_back(l + " Er_abs");
      header.push_back(l + " Er_rel");
      if (!text(c->grad_error, "error").empty())
        notes.push_back(fmt::format("{}: no reference: {}", axes_label(c->axes, a.heading_keys({})),
                                    text(c->grad_error, "error")));
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& g : groups) {
      std::vector<std::string> row = {g};
      for (const CellView* c : columns) {
        if (!text(c->grad_error, "error").empty()) {
          row.push_back("n/a");
          row.push_back("n/a");
          continue;
        }
        std::optional<double> abs, rel;
        if (g == "loss") {
          abs = number(c->grad_error, "loss_abs_error");
          const auto ref = number(c->grad_error, "reference_loss");
          if (abs && ref && *ref != 0) rel = *abs / std::fabs(*ref);
        } else {
          const json& st = field(field(c->grad_error, "groups"), g.c_str());
          abs = number(st, "er_abs");
          rel = number(st, "er_rel");
        }
        row.push_back(abs ? fmt::format("{:.2e}", *abs) : "");
        row.push_back(rel ? fmt::format("{:.2e}", *rel) : "");
      }
      rows.push_back(row);
    }
    s += fmt::format("\n### Gradient error: {}\n\n", heading(*cells.front(), keys));
    s += md_table(header, rows);
  }
  if (!notes.empty()) {
    s += "\n";
    for (const auto& n : notes) s += "- " + n + "\n";
  }
  return s;
}

// ---- timeline ---------------------------------------------------------------------------------------------

struct TimelineChoice {
  const CellView* cell = nullptr;
  json timeline;        // {"points": [...], "phases": [...]}
  std::string problem;  // why the chosen cell's timeline could not be read
};

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

// The category order of the paper's Figure 1: what lives longest at the bottom.
std::vector<std::string> timeline_categories(const json& points) {
  std::vector<std::string> cats = {"params",      "grads",  "checkpoints", "kv",
                                   "activations", "logits", "comm",        "other"};
  std::set<std::string> seen;
  for (const auto& p : points)
    for (const auto& [k, v] : field(p, "by_category").items()) seen.insert(k);
  std::vector<std::string> out;
  for (const auto& c : cats)
    if (seen.count(c)) out.push_back(c);
  for (const auto& c : seen)
    if (!contains(out, c)) out.push_back(c);
  return out;
}

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

int64_t point_live(const json& p) {
  if (auto live = integer(p, "live")) return *live;
  int64_t sum = 0;
  for (const auto& [k, v] : field(p, "by_category").items())
    if (v.is_number()) sum += v.get<int64_t>();
  return sum;
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
  size_t at = 0;
  for (size_t i = 0; i < points.size(); ++i)
    if (point_live(points[i]) > point_live(points[at])) at = i;
  const double t_peak = number(points[at], "t_ms").value_or(0.0);
  const double t_end = number(points.back(), "t_ms").value_or(0.0);
  // The innermost phase open at the peak.
  std::string phase;
  int64_t depth = -1;
  for (const auto& ph : field(t.timeline, "phases")) {
    const double b = number(ph, "begin_ms").value_or(0.0), e = number(ph, "end_ms").value_or(-1.0);
    const int64_t d = integer(ph, "depth").value_or(0);
    if (b <= t_peak && (e < 0 || t_peak <= e) && d > depth) phase = text(ph, "name"), depth = d;
  }
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
  return s;
}

// Issue 7's results: per rank, peak and BP time, and each collective's calls and logical bytes.
std::string section_distributed(const Analysis& a) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : a.cells) {
    if (!c.ranks.is_array()) continue;
    for (const auto& r : c.ranks) {
      const json& comm = field(r, "comm");
      auto collective = [&](const char* kind) {
        const json& k = field(comm, kind);
        const int64_t calls = integer(k, "calls").value_or(0);
        return calls ? fmt::format("{} / {}", calls, format_bytes(integer(k, "bytes").value_or(0)))
                     : std::string(kDash);
      };
      const auto peak = integer(r, "peak_bytes");
      const auto t = number(r, "time_median_s");
      rows.push_back(
          {fmt::format("#{} {} T={}", c.index, text(c.axes, "impl"), integer(c.axes, "seq_len").value_or(0)),
           std::to_string(integer(r, "rank").value_or(0)), text(r, "status"),
           peak ? format_bytes(*peak) : std::string(kDash), t ? format_time(*t) : std::string(kDash),
           collective("reduce_scatter"), collective("all_gather"), collective("all_reduce")});
    }
  }
  if (rows.empty()) return "";
  return "\n## Distributed cells, per rank\n\nPeak live bytes of each rank, its BP time, and its collectives "
         "in the "
         "measured step (calls / logical bytes). ZeRO-2 reduce-scatters each layer once, plus the head and "
         "the "
         "embedding.\n\n" +
         md_table(
             {"cell", "rank", "status", "peak", "BP time (s)", "reduce_scatter", "all_gather", "all_reduce"},
             rows, 3);
}

std::string section_not_run(const Analysis& a) {
  std::vector<std::string> lines;
  const auto keys = a.heading_keys({}, {"impl", "seq_len"});
  for (const auto& c : a.cells) {
    if (c.ok()) continue;
    std::string reason = c.reason.empty() ? "" : ": " + c.reason;
    for (char& ch : reason)
      if (ch == '\n' || ch == '\r') ch = ' ';
    lines.push_back(fmt::format("- #{} {}: {}{}", c.index, axes_label(c.axes, keys), c.status, reason));
  }
  if (lines.empty()) return "";
  return "\n## Cells that did not run\n\n" + fmt::format("{}", fmt::join(lines, "\n")) + "\n";
}

struct PlotsDrawn {
  bool peak = false, partition = false, timeline = false;
};

std::string render(const Analysis& a, const TimelineChoice& t, const PlotsDrawn& drawn,
                   const std::string& source) {
  return section_summary(a, source) + section_max_length(a) + section_peak(a, drawn.peak) + section_time(a) +
         section_partition(a, drawn.partition) + section_grad_error(a) +
         section_timeline(a, t, drawn.timeline) + section_distributed(a) + section_not_run(a);
}

// ---- plot data --------------------------------------------------------------------------------------------

// Figure 3: one curve per strategy and panel. Where a strategy was also run at several partition sizes (a
// sweep, which is Figure 5's subject), the curve follows the (partition, logits partition) pair measured most
// often and says which. Max-length probes draw the curve of a strategy that the grid did not measure.
json peak_plot_data(const Analysis& a) {
  const auto keys = a.heading_keys({"impl", "seq_len", "partition", "logits_partition"});
  json panels = json::array();
  Cells all;
  for (const auto& c : a.cells) all.push_back(&c);
  for (const auto& [id, cells] : group_by(all, [&](const CellView& c) { return axes_label(c.axes, keys); })) {
    auto pair_of = [](const CellView& c) {
      return std::make_pair(c.uses_partition ? c.partition.value_or(-1) : int64_t{-1},
                            c.uses_logits_partition ? c.logits_partition.value_or(-1) : int64_t{-1});
    };
    std::vector<std::string> impls;
    std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> pairs;  // impl -> pairs, first seen first
    std::map<std::string, std::map<std::pair<int64_t, int64_t>, int>> counts;
    for (const CellView* c : cells) {
      if (!is_grid_cell(*c)) continue;
      const std::string impl = c->axis("impl");
      if (!contains(impls, impl)) impls.push_back(impl);
      if (!counts[impl].count(pair_of(*c))) pairs[impl].push_back(pair_of(*c));
      ++counts[impl][pair_of(*c)];
    }
    for (const CellView* c : cells)
      if (is_max_length_cell(*c) && c->probes.is_array() && !contains(impls, c->axis("impl")))
        impls.push_back(c->axis("impl"));
    a.sort_labels(impls);
    json series = json::array();
    for (const auto& impl : impls) {
      json s = {{"label", impl},
                {"seq_len", json::array()},
                {"peak_bytes", json::array()},
                {"oom_seq_len", json::array()}};
      std::map<int64_t, int64_t> peaks;
      std::set<int64_t> ooms;
      if (pairs.count(impl)) {
        std::pair<int64_t, int64_t> main = pairs[impl].front();
        for (const auto& p : pairs[impl])
          if (counts[impl][p] > counts[impl][main]) main = p;
        if (pairs[impl].size() > 1) {
          std::vector<std::string> which;
          if (main.first >= 0) which.push_back(fmt::format("ps={}", main.first));
          if (main.second >= 0) which.push_back(fmt::format("lps={}", main.second));
          if (!which.empty()) s["label"] = fmt::format("{} ({})", impl, fmt::join(which, " "));
        }
        for (const CellView* c : cells) {
          if (!is_grid_cell(*c) || c->axis("impl") != impl || pair_of(*c) != main) continue;
          if (c->ok() && c->peak)
            peaks.emplace(*c->seq_len, *c->peak);
          else if (c->status == "oom")
            ooms.insert(*c->seq_len);
        }
      } else {
        s["label"] = impl + " (max-length probes)";
        for (const CellView* c : cells) {
          if (!is_max_length_cell(*c) || c->axis("impl") != impl || !c->probes.is_array()) continue;
          for (const auto& p : c->probes) {
            const auto len = integer(p, "seq_len");
            const auto peak = integer(p, "peak_bytes");
            if (len && text(p, "status") == "ok" && peak)
              peaks.emplace(*len, *peak);
            else if (len && text(p, "status") == "oom")
              ooms.insert(*len);
          }
        }
      }
      for (const auto& [len, peak] : peaks) s["seq_len"].push_back(len), s["peak_bytes"].push_back(peak);
      for (int64_t len : ooms) s["oom_seq_len"].push_back(len);
      if (!peaks.empty() || !ooms.empty()) series.push_back(s);
    }
    if (!series.empty()) panels.push_back({{"title", heading(*cells.front(), keys)}, {"series", series}});
  }
  return {{"budget_bytes", a.budget ? json(*a.budget) : json(nullptr)}, {"panels", panels}};
}

json partition_plot_data(const Analysis& a) {
  json panels = json::array();
  for (const auto& sw : find_sweeps(a)) {
    json series = json::array();
    for (const auto& [len, m] : sw.by_len) {
      json s = {{"label", fmt::format("T={}", len)},
                {"partition", json::array()},
                {"time_s", json::array()},
                {"peak_bytes", json::array()}};
      for (const auto& [p, c] : m) {
        if (!c->ok()) continue;
        s["partition"].push_back(p);
        s["time_s"].push_back(c->time_median ? json(*c->time_median) : json(nullptr));
        s["peak_bytes"].push_back(c->peak ? json(*c->peak) : json(nullptr));
      }
      if (!s["partition"].empty()) series.push_back(s);
    }
    if (!series.empty())
      panels.push_back(
          {{"title", sweep_title(a, sw)},
           {"xlabel", sw.axis == "partition" ? "partition size (tokens)" : "logits partition size (tokens)"},
           {"series", series}});
  }
  return {{"panels", panels}};
}

// ---- running plot.py --------------------------------------------------------------------------------------

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// Runs `python script args...`; returns "" on success, else a one-line reason.
std::string run_plot_script(const std::string& python, const std::string& script, const fs::path& data,
                            const fs::path& out_dir) {
  if (script.empty()) return "reports/plot.py not found";
  if (python.find('/') != std::string::npos && access(python.c_str(), X_OK) != 0)
    return fmt::format("cannot run '{}'", python);
  const std::string cmd = fmt::format("{} {} {} {} 2>&1", shell_quote(python), shell_quote(script),
                                      shell_quote(data.string()), shell_quote(out_dir.string()));
  std::fflush(nullptr);
  FILE* p = popen(cmd.c_str(), "r");  // popen execs a shell: no fork-without-exec of a LibTorch process
  if (!p) return "cannot start python";
  std::string output;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) output.append(buf, n);
  const int status = pclose(p);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc == 0) return "";
  if (rc == 127) return fmt::format("'{}' not found", python);
  // The last non-empty line says why (plot.py prints one line; a traceback ends with the exception).
  std::istringstream lines(output);
  std::string last;
  for (std::string line; std::getline(lines, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last.empty() ? fmt::format("plot.py exited with status {}", rc) : last;
}

bool nonempty_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && fs::file_size(p, ec) > 0;
}

fs::path results_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? path / "results.json" : path;
}

std::string single_line(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}

}  // namespace

// ---- shared helpers ---------------------------------------------------------------------------------------

void check_results(const json& doc, const std::string& origin) {
  if (!doc.is_object())
    input_error(fmt::format("'{}' is not a bpbench results file (not a JSON object)", origin),
                "a results.json written by bpbench run");
  const json& schema = field(doc, "schema");
  if (!schema.is_string())
    input_error(fmt::format("'{}' is not a bpbench results file (no \"schema\")", origin),
                "a results.json written by bpbench run");
  if (schema.get<std::string>() != kResultsSchema)
    input_error(fmt::format("'{}' has schema '{}', which this bpbench cannot read", origin,
                            schema.get<std::string>()),
                kResultsSchema);
  const json& cells = field(doc, "cells");
  if (!cells.is_array())
    input_error(fmt::format("'{}': \"cells\" is not a list", origin),
                "a results.json written by bpbench run");
  for (size_t i = 0; i < cells.size(); ++i) {
    if (!field(cells[i], "axes").is_object() || !field(cells[i], "status").is_string())
      input_error(fmt::format("'{}': cells[{}] lacks an \"axes\" object or a \"status\" string", origin, i),
                  "a results.json written by bpbench run");
  }
}

json load_results(const fs::path& path) {
  const fs::path file = results_file(path);
  std::error_code ec;
  if (!fs::exists(file, ec))
    input_error(fmt::format("results file '{}' does not exist", file.string()), "a results.json");
  std::ifstream in(file, std::ios::binary);
  if (!in || fs::is_directory(file, ec))
    input_error(fmt::format("cannot read results file '{}'", file.string()), "a readable results.json");
  std::stringstream buf;
  buf << in.rdbuf();
  json doc;
  try {
    doc = json::parse(buf.str());
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    const auto colon = what.find(": ");  // drop nlohmann's "[json.exception.parse_error.101] " prefix
    input_error(fmt::format("'{}' is not valid JSON: {}", file.string(),
                            colon == std::string::npos ? what : what.substr(colon + 2)),
                "a results.json written by bpbench run");
  }
  check_results(doc, file.string());
  return doc;
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes), gib = 1024.0 * 1024 * 1024, mib = 1024.0 * 1024;
  if (std::fabs(b) >= gib) return fmt::format("{:.2f} GiB", b / gib);
  if (std::fabs(b) >= 100 * mib) return fmt::format("{:.1f} MiB", b / mib);
  if (std::fabs(b) >= mib) return fmt::format("{:.2f} MiB", b / mib);
  if (b != 0 && std::fabs(b) < 0.0005 * mib) return b > 0 ? "<0.001 MiB" : "-<0.001 MiB";
  return fmt::format("{:.3f} MiB", b / mib);
}

std::string format_time(double s) {
  const double a = std::fabs(s);
  if (a >= 100) return fmt::format("{:.0f}", s);
  if (a >= 10) return fmt::format("{:.1f}", s);
  if (a >= 1) return fmt::format("{:.2f}", s);
  return fmt::format("{:.3g}", s);
}

std::string axis_value_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15)
      return std::to_string(static_cast<int64_t>(d));
    return fmt::format("{:g}", d);
  }
  if (v.is_null()) return "null";
  return v.dump();
}

std::vector<std::string> ordered_axis_keys(const std::vector<json>& axes_list) {
  std::set<std::string> all;
  for (const auto& axes : axes_list)
    if (axes.is_object())
      for (const auto& [k, v] : axes.items()) all.insert(k);
  std::vector<std::string> out;
  for (const auto& k : grid_keys())
    if (all.count(k)) out.push_back(k);
  for (const auto& k : all)
    if (!contains(out, k)) out.push_back(k);
  return out;
}

std::vector<std::string> varying_axis_keys(const std::vector<json>& axes_list) {
  std::vector<std::string> out;
  for (const auto& k : ordered_axis_keys(axes_list)) {
    std::set<std::string> values;  // a cell without the key (a max-length search has no seq_len) adds none
    for (const auto& axes : axes_list) {
      if (!axes.is_object()) continue;
      auto it = axes.find(k);
      if (it != axes.end()) values.insert(axis_value_text(*it));
    }
    if (values.size() > 1) out.push_back(k);
  }
  return out;
}

std::string axes_label(const json& axes, const std::vector<std::string>& keys) {
  std::vector<std::string> parts;
  for (const auto& k : keys) {
    if (!axes.is_object()) break;
    auto it = axes.find(k);
    if (it != axes.end()) parts.push_back(k + "=" + axis_value_text(*it));
  }
  return fmt::format("{}", fmt::join(parts, " "));
}

// ---- report -----------------------------------------------------------------------------------------------

std::string render_report_markdown(const json& results, const fs::path& results_dir,
                                   std::optional<size_t> timeline_cell) {
  check_results(results, "results");
  const Analysis a = analyse(results, results_dir);
  const TimelineChoice t = choose_timeline(a, timeline_cell);
  return render(a, t, PlotsDrawn{}, (results_dir / "results.json").string());
}

ReportOutput write_report(const json& results, const fs::path& results_dir, const ReportOptions& options) {
  check_results(results, options.results.string());
  const Analysis a = analyse(results, results_dir);
  const TimelineChoice t = choose_timeline(a, options.timeline_cell);
  ReportOutput out;
  if (!t.problem.empty()) out.warnings.push_back(fmt::format("no timeline plot: {}", t.problem));

  const fs::path dir = options.out_dir.empty() ? results_dir / "report" : options.out_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    input_error(fmt::format("report: cannot create output directory '{}': {}", dir.string(),
                            ec ? ec.message() : "a file is in the way"),
                "a writable directory path");

  // Plots: the data first (so it can be re-plotted by hand), then plot.py; stale PNGs are removed first so
  // that report.md never links a figure from an earlier run.
  const char* names[] = {"peak_vs_seq_len.png", "partition_sweep.png", "timeline.png"};
  for (const char* n : names) fs::remove(dir / n, ec);
  json data = {{"title", text(field(a.doc, "meta"), "scenario_name")},
               {"peak_vs_seq_len", peak_plot_data(a)},
               {"partition_sweep", partition_plot_data(a)},
               {"timeline", t.cell && t.problem.empty() && field(t.timeline, "points").is_array() &&
                                    !field(t.timeline, "points").empty()
                                ? timeline_plot_data(a, t)
                                : json(nullptr)}};
  const fs::path data_path = dir / "plot_data.json";
  write_json_atomically(data_path, data);
  const std::string script = options.plot_script.empty() ? find_plot_script() : options.plot_script;
  const std::string problem = run_plot_script(options.python, script, data_path, dir);
  if (!problem.empty())
    out.warnings.push_back(
        fmt::format("plots not drawn ({}); report.md has the tables only", single_line(problem)));
  PlotsDrawn drawn;
  drawn.peak = nonempty_file(dir / names[0]);
  drawn.partition = nonempty_file(dir / names[1]);
  drawn.timeline = nonempty_file(dir / names[2]);
  for (const char* n : names)
    if (nonempty_file(dir / n)) out.plots.push_back(dir / n);

  out.markdown = dir / "report.md";
  const fs::path source =
      options.results.empty() ? results_dir / "results.json" : results_file(options.results);
  std::ofstream md(out.markdown, std::ios::binary | std::ios::trunc);
  md << render(a, t, drawn, source.string());
  md.close();
  if (!md) throw std::runtime_error(fmt::format("cannot write '{}'", out.markdown.string()));
  return out;
}

std::string find_plot_script() {
  std::error_code ec;
  const fs::path source = fs::path(BPBENCH_SOURCE_DIR) / "reports" / "plot.py";
  if (fs::is_regular_file(source, ec)) return source.string();
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path dir = exe.parent_path();
  for (const fs::path& p : {dir / ".." / "reports" / "plot.py", dir / "reports" / "plot.py",
                            dir / ".." / "share" / "bpbench" / "plot.py"})
    if (fs::is_regular_file(p, ec)) return fs::weakly_canonical(p, ec).string();
  return "";
}

int report_main(const std::vector<std::string>& args) {
  return report_main(args, std::cout, std::cerr);
}

int report_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string options = "--out DIR, --timeline-cell INDEX, --python PATH, --help";
  try {
    ReportOptions opt;
    std::optional<std::string> results;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&](const std::string& name) -> std::string {
        if (a.size() > name.size() && a.compare(0, name.size() + 1, name + "=") == 0)
          return a.substr(name.size() + 1);
        if (i + 1 >= args.size()) input_error(fmt::format("report: {} needs a value", name), options);
        return args[++i];
      };
      auto is = [&](const std::string& name) { return a == name || a.rfind(name + "=", 0) == 0; };
      if (a == "-h" || a == "--help") {
        out << kReportHelp;
        return kExitOk;
      } else if (is("--out")) {
        opt.out_dir = value("--out");
      } else if (is("--python")) {
        opt.python = value("--python");
      } else if (is("--timeline-cell")) {
        const std::string v = value("--timeline-cell");
        size_t used = 0;
        long long n = -1;
        try {
          n = std::stoll(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != v.size() || n < 0)
          input_error(fmt::format("report: --timeline-cell '{}' is not a cell index", v), "integers >= 0");
        opt.timeline_cell = static_cast<size_t>(n);
      } else if (a.size() > 1 && a[0] == '-') {
        input_error(fmt::format("report: unknown option '{}'", a), options);
      } else if (results) {
        input_error(fmt::format("report: unexpected argument '{}' (one results file)", a), options);
      } else {
        results = a;
      }
    }
    if (!results) input_error("report: missing RESULTS.json", "a results.json written by bpbench run");
    opt.results = *results;
    const json doc = load_results(opt.results);
    const fs::path results_dir = results_file(opt.results).parent_path();
    const ReportOutput r = write_report(doc, results_dir.empty() ? fs::path(".") : results_dir, opt);
    for (const auto& w : r.warnings) err << "bpbench: warning: " << single_line(w) << "\n";
    out << fmt::format("wrote {} ({} plot{})\n", r.markdown.string(), r.plots.size(),
                       r.plots.size() == 1 ? "" : "s");
    return kExitOk;
  } catch (const InputError& e) {
    err << "bpbench: error: " << single_line(e.what()) << "\n";
    return kExitInput;
  } catch (const std::exception& e) {
    err << "bpbench: error: " << single_line(e.what()) << "\n";
    return kExitFailure;
  }
}

}  // namespace bpbench
