// table_max_length.cpp: Table 3, the longest sequence each strategy fit in the memory budget, per model.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>

#include "reports/sections.h"

namespace bpbench::report_detail {

namespace {

// Tokens as the paper's Table 3 writes them, in thousands ("20.5k"); below 1000 the exact count.
std::string thousands(int64_t tokens) {
  if (tokens < 1000) return std::to_string(tokens);
  return fmt::format("{:.1f}k", static_cast<double>(tokens) / 1000.0);
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

}  // namespace

std::string section_max_length(const Analysis& a) {
  std::string s = "\n## Maximum sequence length (Table 3)\n\n";
  const std::vector<std::string> exclude = {"impl",    "seq_len",        "partition", "logits_partition",
                                            "offload", "ulysses_degree", "sharding"};
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
    bool any_estimate = false;
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
          if (c->ok() && c->estimate_max_seq_len) {
            v += fmt::format(" (est. {})", thousands(*c->estimate_max_seq_len));
            any_estimate = true;
          }
          break;
        }
        row.push_back(v);
      }
      rows.push_back(row);
    }
    s += "The longest sequence (thousands of tokens) whose BP fit in the memory budget";
    s += a.budget ? fmt::format(" ({})", format_bytes(*a.budget)) : std::string();
    s += ". \"≥\": the search stopped at its upper limit; \"oom\": not even the shortest probe fit.";
    if (any_estimate)
      s += " \"est.\": the analytic estimate's answer for the same budget and granularity (`bpbench estimate "
           "--budget`), where the search started.";
    s += "\n\n" + md_table(header, rows, row_keys.size()) + "\n";
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
          "- {}: max {}{}; {}\n", heading(*c, a.heading_keys({"seq_len"}, {"impl"}, &search)),
          c->max_seq_len ? std::to_string(*c->max_seq_len) : outcome_text(*c),
          c->estimate_max_seq_len ? fmt::format(" (estimate {})", *c->estimate_max_seq_len) : std::string(),
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

}  // namespace bpbench::report_detail
