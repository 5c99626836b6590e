// table_memory.cpp: peak BP memory per strategy and sequence length, and Figure 3's curves of the same cells.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <set>

#include "reports/sections.h"

namespace bpbench::report_detail {

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
  bool any_offload = false;
  for (const CellView* c : grid) any_offload = any_offload || is_offloaded(*c);
  s += any_estimate ? "; \"est.\" is the strategy's own estimate of the peak.\n" : ".\n";
  if (any_offload)
    s += "\"+offload\" rows kept their layer checkpoints in host memory: their peak is the device's, and "
         "\"host\" "
         "is what the checkpoints took in host memory.\n";
  const auto keys = a.heading_keys(
      {"impl", "seq_len", "partition", "logits_partition", "offload", "ulysses_degree", "sharding"}, {},
      &grid);
  for (const auto& [id, cells] :
       group_by(grid, [&](const CellView& c) { return axes_label(c.axes, keys); })) {
    s += fmt::format("\n### Peak memory: {}\n\n", heading(*cells.front(), keys));
    s += impl_by_seq_len_table(a, cells, [](const CellView& c) -> std::string {
      if (!c.ok()) return outcome_text(c);
      if (!c.peak) return kDash;
      std::string v = format_bytes(*c.peak);
      if (c.above_base) v += fmt::format(" (+{})", format_bytes(*c.above_base));
      if (c.estimate) v += fmt::format(", est. {}", format_bytes(*c.estimate));
      if (const auto host = integer(c.memory, "host_peak_bytes"))
        v += fmt::format("; host {}", format_bytes(*host));
      return v;
    });
  }

  // Where the bytes are at the peak.
  std::vector<std::string> categories = memory_categories();
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

// Figure 3: one curve per strategy and panel. Where a strategy was also run at several partition sizes (a
// sweep, which is Figure 5's subject), the curve follows the (partition, logits partition) pair measured most
// often and says which. Max-length probes draw the curve of a strategy that the grid did not measure. Where
// the cells carry the estimate (memory.estimate_bytes), it is drawn beside the measured curve, dotted.
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
      std::map<int64_t, int64_t> peaks, estimates;
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
          if (c->estimate && c->seq_len) estimates.emplace(*c->seq_len, *c->estimate);
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
      // The strategy's own estimate at the same lengths (`bpbench estimate`'s curve), drawn beside them.
      s["estimate_seq_len"] = json::array();
      s["estimate_bytes"] = json::array();
      for (const auto& [len, bytes] : estimates)
        s["estimate_seq_len"].push_back(len), s["estimate_bytes"].push_back(bytes);
      if (!peaks.empty() || !ooms.empty()) series.push_back(s);
    }
    if (!series.empty()) panels.push_back({{"title", heading(*cells.front(), keys)}, {"series", series}});
  }
  return {{"budget_bytes", a.budget ? json(*a.budget) : json(nullptr)}, {"panels", panels}};
}

}  // namespace bpbench::report_detail
