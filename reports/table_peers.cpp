// table_peers.cpp: bpbench's streambp beside each peer (impls/peers/) of a merged report, as ratios: the
// question a user asks of a side-by-side run ("how much less memory, how much more time than what I run
// today?"), answered per length from the same files the tables above read.
#include <fmt/format.h>

#include <map>

#include "impls/interface/strategy.h"
#include "reports/sections.h"

namespace bpbench::report_detail {

std::string section_peers(const Analysis& a) {
  // The cells that can be set side by side: same model, dtype, objective, batch and length.
  auto twin_key = [](const CellView& c) {
    return fmt::format("{}|{}|{}|{}|{}", c.axis("model"), c.axis("dtype"), c.axis("objective"),
                       c.axis("batch"), c.axis("seq_len"));
  };
  std::map<std::string, const CellView*> streambp;  // the first streambp cell of each key, without offload
  bool any_peer = false;
  for (const CellView& c : a.cells) {
    if (!c.seq_len || c.max_length) continue;
    const std::string impl = c.axis("impl");
    if (impl == peer_comparison_strategy_name() && !is_offloaded(c)) streambp.emplace(twin_key(c), &c);
    any_peer = any_peer || is_peer(impl);
  }
  if (streambp.empty() || !any_peer) return "";
  std::vector<std::vector<std::string>> rows;
  for (const CellView& p : a.cells) {
    if (!p.seq_len || !is_peer(p.axis("impl"))) continue;
    const auto it = streambp.find(twin_key(p));
    if (it == streambp.end()) continue;
    const CellView& s = *it->second;
    auto ratio = [](std::optional<double> mine, std::optional<double> theirs) -> std::string {
      if (!mine || !theirs || *theirs <= 0) return kDash;
      return fmt::format("{:.2f}", *mine / *theirs);
    };
    auto as_double = [](std::optional<int64_t> v) {
      return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
    };
    const bool both = s.ok() && p.ok();
    rows.push_back({p.axis("impl"), p.axis("model"), p.axis("dtype"), std::to_string(*p.seq_len),
                    // A cell that did not run: its status here, its reason in "Cells that did not run".
                    p.ok() ? (p.peak ? format_bytes(*p.peak) : kDash) : p.status,
                    s.ok() ? (s.peak ? format_bytes(*s.peak) : kDash) : s.status,
                    both ? ratio(as_double(s.peak), as_double(p.peak)) : kDash,
                    both ? ratio(as_double(s.above_base), as_double(p.above_base)) : kDash,
                    p.ok() && p.time_median ? format_time(*p.time_median) : kDash,
                    s.ok() && s.time_median ? format_time(*s.time_median) : kDash,
                    both ? ratio(s.time_median, p.time_median) : kDash});
  }
  if (rows.empty()) return "";
  std::string md = "\n## bpbench streambp beside the peers\n\n";
  md +=
      "Ratios of bpbench's streambp to each peer at the same model, dtype and length (below 1: streambp "
      "takes less). \"above base\" leaves out the parameters and gradients both hold. Times are medians of "
      "runs made one after the other on one machine (the time table above flags a wide spread); a peer that "
      "could not "
      "run here shows its status.\n\n";
  md += md_table({"peer", "model", "dtype", "T", "peer peak", "streambp peak", "peak ratio",
                  "above-base ratio", "peer time (s)", "streambp time (s)", "time ratio"},
                 rows, 3);
  return md;
}

}  // namespace bpbench::report_detail
