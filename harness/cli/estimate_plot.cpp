// estimate_plot.cpp: draw_estimate_plot (estimate_output.h): the estimate's peak against T, drawn by
// reports/plot.py (its "estimate_vs_seq_len" section) as the report draws a run's measured peaks.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include "harness/cli/estimate_output.h"
#include "reports/figures.h"
#include "reports/report.h"

namespace bpbench {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Lengths from the shortest asked (or one granularity) to a quarter past the longest answer (or the longest
// asked), 48 of them evenly apart on the log axis, and every length asked or found.
std::vector<int64_t> plotted_lengths(const EstimateRequest& r, const EstimateAnswers& a) {
  std::set<int64_t> lengths(r.seq_lens.begin(), r.seq_lens.end());
  for (const auto& l : a.longest)
    if (l.longest.seq_len > 0) lengths.insert(l.longest.seq_len);
  const int64_t lo = std::min(lengths.empty() ? r.granularity : *lengths.begin(), r.granularity);
  int64_t hi = lengths.empty() ? 4 * lo : *lengths.rbegin();
  if (!a.longest.empty()) hi = std::min(r.upper, hi + hi / 4);
  hi = std::max(hi, 2 * lo);
  constexpr int kSteps = 48;
  for (int i = 0; i <= kSteps; ++i)
    lengths.insert(
        static_cast<int64_t>(std::llround(lo * std::pow(static_cast<double>(hi) / lo, double(i) / kSteps))));
  return {lengths.begin(), lengths.end()};
}

}  // namespace

void draw_estimate_plot(const EstimateRequest& r, const EstimateAnswers& a) {
  const fs::path file = r.plot_file;
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw std::runtime_error(
        fmt::format("estimate: --plot {}: no directory '{}' to write it in", r.plot_file, dir.string()));
  const std::vector<int64_t> lengths = plotted_lengths(r, a);
  json series = json::array();
  for (const auto& impl : r.impls) {
    json s = {{"label", impl},
              {"seq_len", json::array()},
              {"peak_bytes", json::array()},
              {"longest", json::array()}};
    for (int64_t T : lengths) {
      s["seq_len"].push_back(T);
      s["peak_bytes"].push_back(estimate_peak(input_at(r, impl, T)).peak_bytes);
    }
    for (const auto& l : a.longest)
      if (l.impl == impl && l.longest.seq_len > 0)
        s["longest"].push_back({{"seq_len", l.longest.seq_len},
                                {"peak_bytes", l.longest.at.peak_bytes},
                                {"budget", r.budgets[l.budget].label}});
    series.push_back(s);
  }
  json budgets = json::array();
  for (const auto& b : r.budgets)
    budgets.push_back({{"label", b.key == "budget" ? "budget" : b.label}, {"bytes", b.bytes()}});
  const std::string title =
      fmt::format("{}, {}, {}, N={}, partition {}/{}, {}{}", r.in.config.name, dtype_flag_name(r.in.dtype),
                  r.in.objective, r.in.sequences, r.in.partition, r.in.logits_partition, r.in.device,
                  r.in.offload ? ", checkpoints offloaded" : "");
  const json data = {
      {"estimate_vs_seq_len",
       {{"file", file.filename().string()}, {"title", title}, {"budgets", budgets}, {"series", series}}}};
  const fs::path data_path =
      fs::temp_directory_path() / fmt::format("bpbench-estimate-plot-{}.json", getpid());
  {
    std::ofstream out(data_path);
    out << data.dump();
    if (!out)
      throw std::runtime_error(fmt::format("estimate: --plot: cannot write '{}'", data_path.string()));
  }
  fs::remove(file, ec);  // a stale figure must not pass for this one
  const std::string problem =
      report_detail::run_plot_script("/usr/bin/python3", find_plot_script(), data_path, dir);
  fs::remove(data_path, ec);
  if (!problem.empty() || !report_detail::nonempty_file(file))
    throw std::runtime_error(fmt::format("estimate: --plot {}: not drawn ({})", r.plot_file,
                                         problem.empty() ? "plot.py wrote nothing" : problem));
}

}  // namespace bpbench
