// table_offload.cpp: what offloading the layer checkpoints to host memory costs and saves, per offloaded cell
// beside the same cell without offload: device peak, host bytes, BP time, and the exposed copy time (the time
// with offload less the time without: the copies that compute did not hide).
#include <fmt/format.h>

#include <map>

#include "reports/sections.h"

namespace bpbench::report_detail {

std::string section_offload(const Analysis& a) {
  const Cells grid = a.select(is_grid_cell);
  Cells offloaded;
  for (const CellView* c : grid)
    if (is_offloaded(*c)) offloaded.push_back(c);
  if (offloaded.empty()) return "";

  // A cell's twin: every axis equal but offload "none" (results written before the axis: absent).
  auto twin_key = [](const CellView& c) {
    json axes = c.axes;
    axes.erase("offload");
    return axes.dump();
  };
  std::map<std::string, const CellView*> plain;
  for (const CellView* c : grid)
    if (!is_offloaded(*c)) plain.emplace(twin_key(*c), c);

  std::string s = "\n## Offloaded checkpoints: memory saved, time exposed\n\n";
  s += "Each cell with `offload: checkpoints` beside the same cell with its checkpoints on the device. "
       "Exposed "
       "copy time is the median BP time with offload less the one without: the copies compute did not "
       "hide.\n\n";
  const auto keys = a.heading_keys({"offload"}, {"impl", "seq_len"}, &offloaded);
  std::vector<std::vector<std::string>> rows;
  for (const CellView* c : offloaded) {
    auto it = plain.find(twin_key(*c));
    const CellView* without = it == plain.end() ? nullptr : it->second;
    auto peak = [](const CellView* v) {
      return !v         ? std::string("no twin")
             : !v->ok() ? outcome_text(*v)
             : v->peak  ? format_bytes(*v->peak)
                        : kDash;
    };
    auto time = [](const CellView* v) -> std::string {
      return v && v->ok() && v->time_median ? format_time(*v->time_median) : kDash;
    };
    const auto host = integer(c->memory, "host_peak_bytes");
    std::string exposed = kDash, ratio = kDash;
    if (without && without->ok() && c->ok() && c->time_median && without->time_median) {
      exposed = format_time(*c->time_median - *without->time_median);
      ratio = fmt::format("{:.2f}x", *c->time_median / *without->time_median);
    }
    rows.push_back({axes_label(c->axes, keys), peak(without), peak(c), host ? format_bytes(*host) : kDash,
                    time(without), time(c), exposed, ratio});
  }
  return s + md_table({"cell", "device peak", "device peak, offload", "host", "BP time", "BP time, offload",
                       "exposed copy time", "time ratio"},
                      rows);
}

}  // namespace bpbench::report_detail
