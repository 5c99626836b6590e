// table_flops.cpp: FLOPs per step and strategy: the model's own work, what the strategy ran, the overhead of
// its recomputation, and the attention as a dense-mask kernel would run it (the paper's accounting).
#include <fmt/format.h>

#include "reports/sections.h"

namespace bpbench::report_detail {

std::string section_flops(const Analysis& a) {
  std::string s = "\n## FLOPs per step\n\n";
  const Cells cells =
      a.select([](const CellView& c) { return is_grid_cell(c) && c.model_flops.has_value(); });
  if (cells.empty()) return s + "No cell counted its FLOPs (results written before bpbench counted them).\n";
  s += "Counted while the step ran, from the shapes of the model's matmuls and attention calls "
       "(docs/estimate.md, \"FLOPs\"). Model: the network's own forward + backward, the same for every "
       "strategy. Hardware: what the strategy ran, recomputation (a no-grad forward, an extra LM-head pass) "
       "and "
       "the fused attention kernels' rescoring in their backward included; overhead = hardware / model - 1. "
       "Dense attention: the attention calls as a kernel that computes every score of its key range under a "
       "mask would run them, the paper's accounting, in which StreamBP saves about half.\n";
  const auto keys = a.heading_keys(
      {"impl", "seq_len", "partition", "logits_partition", "offload", "ulysses_degree", "sharding"}, {},
      &cells);
  for (const auto& [id, group] :
       group_by(cells, [&](const CellView& c) { return axes_label(c.axes, keys); })) {
    s += fmt::format("\n### FLOPs: {}\n\n", heading(*group.front(), keys));
    const ImplLabeler labeler(group, [](const CellView& c) { return c.axis("seq_len"); });
    std::vector<std::vector<std::string>> rows;
    for (const CellView* c : group) {
      const int64_t model = *c->model_flops, hardware = c->hardware_flops.value_or(model);
      rows.push_back(
          {labeler.label(*c), c->axis("seq_len"), format_flops(model), format_flops(hardware),
           model > 0 ? fmt::format("{:+.1f}%",
                                   100.0 * static_cast<double>(hardware - model) / static_cast<double>(model))
                     : kDash,
           c->dense_attention_flops ? format_flops(*c->dense_attention_flops) : kDash,
           c->ok() ? (rate_text(*c).empty() ? std::string(kDash) : rate_text(*c)) : outcome_text(*c)});
    }
    s += md_table({"impl", "T", "model", "hardware", "overhead", "dense attention", "rate"}, rows);
  }
  return s;
}

}  // namespace bpbench::report_detail
