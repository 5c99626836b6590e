// table_time.cpp: Table 1, the median BP time per strategy and sequence length.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "reports/sections.h"

namespace bpbench::report_detail {

// A spread of the runs beyond which a cell's median is not a number to compare with another's: at 10% the
// medians of two runs of one build on a shared 2-core machine differed by as much (reports/compare.h).
constexpr double kWideSpread = 0.10;

std::string section_time(const Analysis& a) {
  std::string s = "\n## BP time (Table 1)\n\n";
  const Cells grid = a.select(is_grid_cell);
  int64_t lo = INT64_MAX, hi = 0;
  for (const CellView* c : grid)
    if (c->time_median) lo = std::min(lo, c->time_count), hi = std::max(hi, c->time_count);
  if (hi == 0) return s + "No timed cells.\n";
  s += fmt::format(
      "Median seconds of one forward + backward over {} measured runs (after warm-up), and in brackets the "
      "hardware FLOPs it ran per second (on a GPU with a known peak: MFU, model FLOPs over the peak, and "
      "HFU, hardware FLOPs over it; \"FLOPs per step\" below has the counts).\n",
      lo == hi ? std::to_string(lo) : fmt::format("{} to {}", lo, hi));
  bool any_wide = false;
  for (const CellView* c : grid) any_wide = any_wide || (c->time_cv && *c->time_cv > kWideSpread);
  if (any_wide)
    s += fmt::format(
        "\nA median marked \"spread cv N%\" comes from runs whose standard deviation is over {:.0f}% of "
        "their "
        "mean: "
        "too wide to compare with another cell or run (rerun it with more repeats, on a quieter machine).\n",
        100 * kWideSpread);
  const auto keys = a.heading_keys(
      {"impl", "seq_len", "partition", "logits_partition", "offload", "ulysses_degree", "sharding"}, {},
      &grid);
  for (const auto& [id, cells] :
       group_by(grid, [&](const CellView& c) { return axes_label(c.axes, keys); })) {
    s += fmt::format("\n### BP time (s): {}\n\n", heading(*cells.front(), keys));
    s += impl_by_seq_len_table(a, cells, [](const CellView& c) -> std::string {
      if (!c.ok()) return outcome_text(c);
      if (!c.time_median) return kDash;
      const std::string rate = rate_text(c);
      std::string text = rate.empty() ? format_time(*c.time_median)
                                      : fmt::format("{} ({})", format_time(*c.time_median), rate);
      if (c.time_cv && *c.time_cv > kWideSpread) text += fmt::format(" spread cv {:.0f}%", 100 * *c.time_cv);
      return text;
    });
    const bool any_rate = std::any_of(cells.begin(), cells.end(),
                                      [](const CellView* c) { return c->tokens_per_s.has_value(); });
    if (!any_rate) continue;
    s += fmt::format("\nTokens per second (every sequence of the step over its median time): {}\n\n",
                     heading(*cells.front(), keys));
    s += impl_by_seq_len_table(a, cells, [](const CellView& c) -> std::string {
      if (!c.ok()) return outcome_text(c);
      return c.tokens_per_s ? fmt::format("{:.0f}", *c.tokens_per_s) : kDash;
    });
  }
  return s;
}

}  // namespace bpbench::report_detail
