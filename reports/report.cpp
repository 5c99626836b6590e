// report.cpp: the report as one document: results.json -> report.md (the paper's tables, in the paper's
// order) + plot_data.json -> reports/plot.py -> PNGs. Each table lives in its own file (sections.h); this one
// is the table of contents, the files written and the `bpbench report` command line.
#include "reports/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <iostream>
#include <map>

#include "harness/model/rope_config.h"
#include "harness/run/out_dir.h"
#include "harness/run/results.h"
#include "harness/run/scenario.h"
#include "reports/analysis.h"
#include "reports/figures.h"
#include "reports/html/html_page.h"
#include "reports/html/markdown_html.h"
#include "reports/html/report_html.h"
#include "reports/option_reader.h"
#include "reports/sections.h"

namespace bpbench {

using namespace report_detail;  // the model of the results, its sections and figures

namespace {

constexpr int kReportExitOk = 0, kReportExitFailure = 1, kReportExitInput = 2;

const char* kReportHelp =
    R"HELP(usage: bpbench report RESULTS.json [MORE.json ...] [--out DIR] [--timeline-cell INDEX] [--python PATH]

Turns a results.json into DIR/report.md with the StreamBP paper's tables, DIR/*.png with its figures, and
DIR/report.html: the same tables (sortable) and figures (inline SVG, values on hover) in one self-contained
page that fetches nothing, with a row per cell linking its files and every cell's memory timeline (hover for
the phase and the bytes by category; a click on a phase zooms to it). The sections:
  Table 3   maximum sequence length per model x strategy (from max-length cells; else the longest length
            that ran in the grid, marked as a lower bound)
  peak      peak BP memory per strategy x sequence length (peak and above-base), breakdown by category
  Table 1   BP time (median seconds) per strategy x sequence length
  offload   offloaded cells beside the same cell without offload: device peak, host bytes, exposed copy time
  Figure 3  peak_vs_seq_len.png: peak memory vs sequence length, one line per strategy
  Figure 5  partition_sweep.png: BP time and peak vs partition size (twin axes), where a grid sweeps it
  Table 7   gradient error Er_abs / Er_rel per parameter group against the float64 reference
  Fig. 1/8  timeline.png: the memory timeline of one cell, stacked by category, with phase marks
  training  each training run's loss per step beside plain BP's (the rebuttal's stability tables), and
            train_loss.png: every strategy's loss curve and its difference from plain BP's
Cells that did not run read "oom", "skipped: reason" or "error: reason".

RESULTS may also be the directory that holds results.json. Several results files are reported as one, their
cells side by side (e.g. a bpbench run and the Hugging Face peer of impls/peers/hf_checkpoint.py); the report
goes beside the first unless --out says otherwise. Figures are drawn by reports/plot.py with
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
  // Files reported together (load_merged_results): each one's origin, a peer named as its meta says.
  const json& merged = field(meta, "merged_from");
  for (size_t i = 1; merged.is_array() && i < merged.size(); ++i) {
    const json& m = field(merged[i], "meta");
    const std::string peer = text(m, "peer");
    const std::string device = text(field(m, "device"), "name");
    s += fmt::format("- with: `{}` ({}{})\n", text(merged[i], "file"),
                     peer.empty() ? "bpbench " + text(m, "scenario_name") : peer,
                     device.empty() ? std::string() : ", on " + device);
  }
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
  // Sliding-window attention (Gemma 3): which layers slide, over how many keys, with which RoPE.
  std::vector<std::string> windows;
  for (const auto& c : cells.is_array() ? cells : json::array()) {
    const json& w = field(c, "sliding_window");
    if (!w.is_object()) continue;
    const std::string line =
        fmt::format("{} slides over {} keys on {} of {} layers (RoPE {} there)",
                    axis_value_text(field(field(c, "axes"), "model")), w.value("window", int64_t{0}),
                    w.value("layers", int64_t{0}), w.value("of", int64_t{0}), rope_summary(field(w, "rope")));
    if (!contains(windows, line)) windows.push_back(line);
  }
  if (!windows.empty()) s += fmt::format("- sliding-window attention: {}\n", fmt::join(windows, "; "));
  if (!text(meta, "memory_note").empty()) s += fmt::format("- memory: {}\n", text(meta, "memory_note"));
  if (!text(meta, "heap").empty()) s += fmt::format("- heap: {}\n", text(meta, "heap"));
  s += "\nBytes are shown with GiB = 2^30 and MiB = 2^20 bytes; \"k\" tokens = 1000 tokens.\n";
  return s;
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

// The sections in the paper's order, so that report.md reads like the paper's evaluation.
std::string render(const Analysis& a, const TimelineChoice& t, const PlotsDrawn& drawn,
                   const std::string& source) {
  return section_summary(a, source) + section_max_length(a) + section_peak(a, drawn.peak) + section_time(a) +
         section_flops(a) + section_offload(a) + section_partition(a, drawn.partition) +
         section_grad_error(a) + section_peers(a) + section_train(a, drawn.train) +
         section_timeline(a, t, drawn.timeline) + section_distributed(a) + section_not_run(a);
}

// report.html: report.md's sections with every figure drawn by report.js (its data is in the page), a row per
// cell after the summary, and every cell's timeline where report.md shows the chosen one.
fs::path write_html_report(const Analysis& a, const TimelineChoice& t, const json& plot_data,
                           const fs::path& dir, const std::string& source,
                           std::vector<std::string>& warnings) {
  auto has_panels = [&](const char* name) {
    const json& panels = field(field(plot_data, name), "panels");
    return panels.is_array() && !panels.empty();
  };
  std::vector<std::string> problems;
  const json timelines =
      html_timelines(a, dir, t.cell ? std::optional<size_t>(t.cell->index) : std::nullopt, problems);
  for (const auto& p : problems) warnings.push_back("report.html: no timeline for " + p);
  PlotsDrawn figures;
  figures.peak = has_panels("peak_vs_seq_len");
  figures.partition = has_panels("partition_sweep");
  figures.train = has_panels("train_loss");
  figures.timeline = !timelines.empty();
  HtmlPage page;
  page.title = "bpbench report: " + text(field(a.doc, "meta"), "scenario_name");
  const std::string md = render(a, t, figures, source);
  // The cell index goes after the summary, the first "## " heading after the title.
  const auto first_section = md.find("\n## ");
  page.body_html = markdown_to_html(md.substr(0, first_section) + section_cells(a, dir) +
                                    (first_section == std::string::npos ? "" : md.substr(first_section)));
  json figure_data = plot_data;
  figure_data.erase("timeline");  // the page draws every cell's, from "timelines"
  page.data = {{"figures", figure_data}, {"timelines", timelines}};
  const fs::path path = dir / "report.html";
  write_html(path, page);
  return path;
}

std::string report_line(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}

}  // namespace

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
  make_output_dir(dir, "report: ");
  std::error_code ec;

  // Plots: the data first (so it can be re-plotted by hand), then plot.py; stale PNGs are removed first so
  // that report.md never links a figure from an earlier run.
  const char* names[] = {"peak_vs_seq_len.png", "partition_sweep.png", "timeline.png", "train_loss.png"};
  for (const char* n : names) fs::remove(dir / n, ec);
  json data = {{"title", text(field(a.doc, "meta"), "scenario_name")},
               {"peak_vs_seq_len", peak_plot_data(a)},
               {"partition_sweep", partition_plot_data(a)},
               {"timeline", t.cell && t.problem.empty() && field(t.timeline, "points").is_array() &&
                                    !field(t.timeline, "points").empty()
                                ? timeline_plot_data(a, t)
                                : json(nullptr)},
               {"train_loss", train_plot_data(a)}};
  const fs::path data_path = dir / "plot_data.json";
  write_json_atomically(data_path, data);
  const std::string script = options.plot_script.empty() ? find_plot_script() : options.plot_script;
  const std::string problem = run_plot_script(options.python, script, data_path, dir);
  if (!problem.empty())
    out.warnings.push_back(
        fmt::format("plots not drawn ({}); report.md has the tables only", report_line(problem)));
  PlotsDrawn drawn;
  drawn.peak = nonempty_file(dir / names[0]);
  drawn.partition = nonempty_file(dir / names[1]);
  drawn.timeline = nonempty_file(dir / names[2]);
  drawn.train = nonempty_file(dir / names[3]);
  for (const char* n : names)
    if (nonempty_file(dir / n)) out.plots.push_back(dir / n);

  out.markdown = dir / "report.md";
  const fs::path source =
      options.results.empty() ? results_dir / "results.json" : results_file(options.results);
  std::ofstream md(out.markdown, std::ios::binary | std::ios::trunc);
  md << render(a, t, drawn, source.string());
  md.close();
  if (!md) throw std::runtime_error(fmt::format("cannot write '{}'", out.markdown.string()));
  out.html = write_html_report(a, t, data, dir, source.string(), out.warnings);
  return out;
}

int report_main(const std::vector<std::string>& args) {
  return report_main(args, std::cout, std::cerr);
}

int report_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string options = "--out DIR, --timeline-cell INDEX, --python PATH, --help";
  try {
    ReportOptions opt;
    std::vector<std::filesystem::path> results;
    OptionReader opts(args, "report", options);
    while (opts.next()) {
      const std::string& a = opts.arg();
      if (opts.is_help()) {
        out << kReportHelp;
        return kReportExitOk;
      } else if (opts.is("--out")) {
        opt.out_dir = opts.value("--out");
      } else if (opts.is("--python")) {
        opt.python = opts.value("--python");
      } else if (opts.is("--timeline-cell")) {
        const std::string v = opts.value("--timeline-cell");
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
      } else if (opts.is_option()) {
        input_error(fmt::format("report: unknown option '{}'", a), options);
      } else {
        results.push_back(a);
      }
    }
    if (results.empty()) input_error("report: missing RESULTS.json", "a results.json written by bpbench run");
    opt.results = results.front();
    const json doc = load_merged_results(results);
    const fs::path results_dir = results_file(opt.results).parent_path();
    const ReportOutput r = write_report(doc, results_dir.empty() ? fs::path(".") : results_dir, opt);
    for (const auto& w : r.warnings) err << "bpbench: warning: " << report_line(w) << "\n";
    out << fmt::format("wrote {} ({} plot{}) and {}\n", r.markdown.string(), r.plots.size(),
                       r.plots.size() == 1 ? "" : "s", r.html.string());
    return kReportExitOk;
  } catch (const InputError& e) {
    err << "bpbench: error: " << report_line(e.what()) << "\n";
    return kReportExitInput;
  } catch (const std::exception& e) {
    err << "bpbench: error: " << report_line(e.what()) << "\n";
    return kReportExitFailure;
  }
}

}  // namespace bpbench
