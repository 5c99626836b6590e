// table_partition.cpp: Figure 5, BP time, peak memory and FLOPs vs partition size, for every partition sweep:
// its tables and its curves, both read from the same sweeps.
#include <fmt/format.h>

#include <map>
#include <set>

#include "reports/sections.h"

namespace bpbench::report_detail {

namespace {

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

}  // namespace

std::string section_partition(const Analysis& a, bool plot_drawn) {
  std::string s = "\n## BP time, peak memory and FLOPs vs partition size (Figure 5)\n\n";
  const auto sweeps = find_sweeps(a);
  if (sweeps.empty())
    return s + "No partition sweep in these results (a grid with several \"partition\" values).\n";
  if (plot_drawn) s += "![BP time and peak vs partition size](partition_sweep.png)\n\n";
  s += "Each entry: median BP time, peak memory, hardware FLOPs and (in brackets) the attention's FLOPs as a "
       "dense-mask kernel would run it, the paper's accounting (\"FLOPs per step\" says what each counts).\n";
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
        row.push_back(fmt::format("{} s, {}, {} ({})", c.time_median ? format_time(*c.time_median) : kDash,
                                  c.peak ? format_bytes(*c.peak) : kDash,
                                  c.hardware_flops ? format_flops(*c.hardware_flops) : kDash,
                                  c.dense_attention_flops ? format_flops(*c.dense_attention_flops) : kDash));
      }
      rows.push_back(row);
    }
    s += md_table(header, rows);
  }
  return s;
}

json partition_plot_data(const Analysis& a) {
  json panels = json::array();
  for (const auto& sw : find_sweeps(a)) {
    json series = json::array();
    for (const auto& [len, m] : sw.by_len) {
      json s = {{"label", fmt::format("T={}", len)}, {"partition", json::array()},
                {"time_s", json::array()},           {"peak_bytes", json::array()},
                {"hardware_flops", json::array()},   {"dense_attention_flops", json::array()}};
      for (const auto& [p, c] : m) {
        if (!c->ok()) continue;
        s["partition"].push_back(p);
        s["time_s"].push_back(c->time_median ? json(*c->time_median) : json(nullptr));
        s["peak_bytes"].push_back(c->peak ? json(*c->peak) : json(nullptr));
        s["hardware_flops"].push_back(c->hardware_flops ? json(*c->hardware_flops) : json(nullptr));
        s["dense_attention_flops"].push_back(c->dense_attention_flops ? json(*c->dense_attention_flops)
                                                                      : json(nullptr));
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

}  // namespace bpbench::report_detail
