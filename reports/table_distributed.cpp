// table_distributed.cpp: the cells run on several ranks, per rank: status, peak, FLOPs, BP time and
// collectives.
#include <fmt/format.h>

#include "reports/sections.h"

namespace bpbench::report_detail {

// What a distributed cell records per rank: peak and BP time, and each collective's calls and logical bytes.
std::string section_distributed(const Analysis& a) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : a.cells) {
    if (!c.ranks.is_array()) continue;
    // Each rank's counted FLOPs against the ranks' mean: how evenly the strategy spreads the work.
    double flops_sum = 0;
    int64_t counted = 0;
    for (const auto& r : c.ranks)
      if (const auto f = integer(r, "hardware_flops")) {
        flops_sum += static_cast<double>(*f);
        ++counted;
      }
    const double flops_mean = counted ? flops_sum / static_cast<double>(counted) : 0.0;
    for (const auto& r : c.ranks) {
      const auto flops = integer(r, "hardware_flops");
      const json& comm = field(r, "comm");
      auto collective = [&](const char* kind) {
        const json& k = field(comm, kind);
        const int64_t calls = integer(k, "calls").value_or(0);
        return calls ? fmt::format("{} / {}", calls, format_bytes(integer(k, "bytes").value_or(0)))
                     : std::string(kDash);
      };
      // Seconds inside the step's collectives (comm.h: Gloo host wall time, NCCL device time), barriers
      // (the runner's, between steps) left out: beside the BP time, what the step spent communicating.
      double comm_s = 0;
      bool any = false;
      if (comm.is_object())
        for (const auto& [kind, k] : comm.items())
          if (kind != "barrier")
            if (const auto sec = number(k, "seconds")) {
              comm_s += *sec;
              any = true;
            }
      const auto peak = integer(r, "peak_bytes");
      const auto t = number(r, "time_median_s");
      rows.push_back(
          {fmt::format("#{} {}{} T={}", c.index, text(c.axes, "impl"), mesh_tag(c),
                       integer(c.axes, "seq_len").value_or(0)),
           std::to_string(integer(r, "rank").value_or(0)), text(r, "status"),
           peak ? format_bytes(*peak) : std::string(kDash),
           flops && flops_mean > 0 ? fmt::format("{:.3g} ({:+.1f}%)", static_cast<double>(*flops),
                                                 100.0 * (static_cast<double>(*flops) / flops_mean - 1.0))
                                   : std::string(kDash),
           t ? format_time(*t) : std::string(kDash), any ? format_time(comm_s) : std::string(kDash),
           collective("reduce_scatter"), collective("all_gather"), collective("all_reduce"),
           collective("all_to_all"), collective("send_recv")});
    }
  }
  if (rows.empty()) return "";
  return "\n## Distributed cells, per rank\n\nPeak live bytes of each rank, the hardware FLOPs its step "
         "counted (and how far from the ranks' mean: the balance of the work), its BP time, the seconds of "
         "it spent in collectives (Gloo: host wall time; NCCL: device time) and its collectives in the "
         "measured step (calls / logical bytes). ZeRO-2 reduce-scatters each layer once, plus the head and "
         "the embedding; sequence parallelism (ulysses, streambp-ulysses) exchanges rows and heads by "
         "all-to-all, six per layer; the ring passes K/V to its neighbour by send_recv, 4P - 3 per layer "
         "(ring) or P - 1 + Hkv (3P - 2) (streambp-ring, its ring a K/V head at a time); on the 2-D mesh "
         "(U=N: Ulysses over N ranks inside rings of R = P / N) both, 4R - 3 send_recvs and six all-to-alls "
         "per layer.\n\n" +
         md_table({"cell", "rank", "status", "peak", "hardware FLOPs", "BP time (s)", "comm (s)",
                   "reduce_scatter", "all_gather", "all_reduce", "all_to_all", "send_recv"},
                  rows, 3);
}

}  // namespace bpbench::report_detail
