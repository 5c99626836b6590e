// history.cpp: `bpbench history append` and `bpbench history report` (history.h).
#include "reports/history.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "harness/run/out_dir.h"
#include "harness/run/results.h"
#include "harness/run/run_detail.h"
#include "harness/run/scenario.h"
#include "reports/figures.h"
#include "reports/html/html_page.h"
#include "reports/html/markdown_html.h"
#include "reports/option_reader.h"
#include "reports/report.h"
#include "reports/results_file.h"
#include "reports/results_json.h"

namespace bpbench {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace results_json;  // field, number, integer, text

namespace history_detail {

const char* kHistoryHelp = R"HELP(usage: bpbench history append RESULTS.json... --to HISTORY.jsonl
       bpbench history report HISTORY.jsonl --out DIR [--metric NAME]

append  adds each results file (bpbench's or a peer's) to HISTORY.jsonl as one JSON line: its key (machine,
        GPU or CPU, versions, git commit), scenario and start time, and per cell its axes, status, peak bytes,
        median time, spread (cv), tokens per second and max length. A run already there (same scenario, start
        time and machine) is refused; the file is created if missing.
report  writes DIR/history.md: per machine and device, the cells that appear in two runs or more, a column per
        run in the order appended, one table per metric; DIR/history_<metric>.png (reports/plot.py, where
        matplotlib is installed); and DIR/history.html: the same tables, sortable, and every trend drawn
        as inline SVG with values on hover, in one self-contained page.

options:
  --to FILE       (append) the history file
  --out DIR       (report) where history.md and history.html go
  --metric NAME   (report) only this metric: peak_bytes, median_s, tokens_per_s, cv, max_seq_len
  --python PATH   (report) the python that draws the plots (default /usr/bin/python3)
  -h, --help      this text

Exit status: 0 success; 2 bad input (one line `bpbench: error: ...` on stderr).
)HELP";

// What names the device a run measured on: the first GPU's name, a peer's GPU, or the CPU.
std::string device_name(const json& meta) {
  const json& d = field(meta, "device");
  const json& gpus = field(d, "gpus");
  if (gpus.is_array() && !gpus.empty()) return text(gpus[0], "name");
  if (text(d, "type") == "cuda" || text(d, "kind") == "cuda") return text(d, "name");
  const std::string cpu = text(d, "cpu").empty() ? text(d, "name") : text(d, "cpu");
  return "cpu: " + cpu;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

// One cell's identity within a history: its scenario and every axis (json objects keep keys sorted).
std::string cell_identity(const json& entry, const json& cell) {
  return text(entry, "scenario_name") + "\n" + field(cell, "axes").dump();
}

// The group a trend stays within: one machine and one device.
std::string series_of(const json& entry) {
  const json& key = field(entry, "key");
  return text(key, "machine") + " · " + text(key, "device");
}

std::string format_metric(const std::string& metric, const json& v) {
  if (!v.is_number()) return "–";
  if (metric == "peak_bytes") return format_bytes(v.get<int64_t>());
  if (metric == "median_s") return format_time(v.get<double>());
  if (metric == "tokens_per_s") return fmt::format("{:.0f}", v.get<double>());
  if (metric == "cv") return fmt::format("{:.1f}%", 100 * v.get<double>());
  return std::to_string(v.get<int64_t>());
}

const char* metric_title(const std::string& metric) {
  if (metric == "peak_bytes") return "peak memory";
  if (metric == "median_s") return "median step time (s)";
  if (metric == "tokens_per_s") return "tokens per second";
  if (metric == "cv") return "spread of the step times (cv)";
  return "longest sequence (tokens)";
}

std::vector<json> read_history(const fs::path& path) {
  std::ifstream in(path);
  if (!in)
    input_error(fmt::format("history: cannot read '{}'", path.string()),
                "a file `bpbench history append` wrote");
  std::vector<json> entries;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json e = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (e.is_discarded() || text(e, "schema") != kHistorySchema)
      input_error(fmt::format("history: '{}' line {} is not a {} line", path.string(), n, kHistorySchema),
                  "a file `bpbench history append` wrote");
    entries.push_back(std::move(e));
  }
  return entries;
}

// A trend: the cells of one machine and device that appear in 2+ runs, with the runs they appear in.
struct Trend {
  std::string series;
  std::vector<const json*> runs;                     // the series' entries, in the order appended
  std::vector<std::string> cells;                    // identities, first-seen order
  std::map<std::string, std::string> labels;         // identity -> the axes that tell the cells apart
  std::map<std::string, std::map<size_t, json>> at;  // identity -> run index -> the cell's record
};

std::vector<Trend> trends(const std::vector<json>& entries) {
  std::vector<Trend> out;
  std::map<std::string, size_t> index;
  for (const json& e : entries) {
    const std::string s = series_of(e);
    if (!index.count(s)) {
      index[s] = out.size();
      out.push_back(Trend{s, {}, {}, {}, {}});
    }
    Trend& t = out[index[s]];
    const size_t run = t.runs.size();
    t.runs.push_back(&e);
    for (const json& c : field(e, "cells")) {
      const std::string id = cell_identity(e, c);
      if (!t.at.count(id)) t.cells.push_back(id);
      t.at[id].emplace(run, c);  // a repeat of the same axes within one run: the first
    }
  }
  for (Trend& t : out) {
    std::vector<std::string> kept;
    std::vector<json> axes;
    for (const auto& id : t.cells)
      if (t.at[id].size() >= 2) {
        kept.push_back(id);
        axes.push_back(field(t.at[id].begin()->second, "axes"));
      }
    t.cells = kept;
    std::vector<std::string> keys = varying_axis_keys(axes);
    if (keys.empty()) keys = {"model", "impl", "seq_len"};
    for (size_t i = 0; i < kept.size(); ++i) {
      const std::string scenario = kept[i].substr(0, kept[i].find('\n'));
      t.labels[kept[i]] = scenario + ": " + axes_label(axes[i], keys);
    }
  }
  return out;
}

std::string run_header(const json& entry) {
  const std::string commit = text(field(entry, "key"), "commit");
  const std::string start = text(entry, "start_time");
  return fmt::format("{} {}", start.substr(0, std::min<size_t>(16, start.size())),
                     commit.empty() ? "(no commit)" : commit.substr(0, 7));
}

json plot_data(const std::vector<Trend>& ts, const std::vector<std::string>& metrics) {
  json panels = json::array();
  for (const Trend& t : ts) {
    if (t.cells.empty()) continue;
    for (const auto& m : metrics) {
      json series = json::array();
      for (const auto& id : t.cells) {
        json x = json::array(), y = json::array();
        for (const auto& [run, cell] : t.at.at(id))
          if (field(cell, m.c_str()).is_number()) {
            x.push_back(run + 1);
            y.push_back(field(cell, m.c_str()));
          }
        if (x.size() >= 2) series.push_back({{"label", t.labels.at(id)}, {"x", x}, {"y", y}});
      }
      if (!series.empty())
        panels.push_back({{"metric", m},
                          {"title", fmt::format("{} · {}", metric_title(m), t.series)},
                          {"runs", t.runs.size()},
                          {"series", series}});
    }
  }
  return {{"history", {{"panels", panels}}}};
}

// history.md's text for trends made of `runs` history lines.
std::string markdown_of(const std::vector<Trend>& ts, size_t runs, const std::vector<std::string>& metrics) {
  std::string md = fmt::format(
      "# bpbench history\n\n{} runs. A trend stays on one machine and device; a cell is "
      "shown where it ran in two runs or more.\n",
      runs);
  for (const Trend& t : ts) {
    md += fmt::format("\n## {}\n\n", t.series);
    md += "| run | started (UTC) | commit | scenario | versions |\n|--:|---|---|---|---|\n";
    for (size_t r = 0; r < t.runs.size(); ++r) {
      const json& e = *t.runs[r];
      const json& v = field(field(e, "key"), "versions");
      std::string versions;
      for (const char* k : {"bpbench", "torch", "transformers", "deepspeed"})
        if (field(v, k).is_string())
          versions += fmt::format("{}{} {}", versions.empty() ? "" : ", ", k, text(v, k));
      const std::string commit = text(field(e, "key"), "commit");
      md += fmt::format("| {} | {} | {} | {} | {} |\n", r + 1, text(e, "start_time"),
                        commit.empty() ? "–" : commit.substr(0, 12), text(e, "scenario_name"), versions);
    }
    if (t.cells.empty()) {
      md += "\nNo cell ran in two runs of this machine yet: nothing to trend.\n";
      continue;
    }
    for (const auto& m : metrics) {
      md += fmt::format("\n### {}\n\n| cell |", metric_title(m));
      for (size_t r = 0; r < t.runs.size(); ++r) md += fmt::format(" {} |", r + 1);
      md += "\n|---|";
      for (size_t r = 0; r < t.runs.size(); ++r) md += "--:|";
      md += "\n";
      for (const auto& id : t.cells) {
        md += "| " + t.labels.at(id) + " |";
        for (size_t r = 0; r < t.runs.size(); ++r) {
          const auto& cells = t.at.at(id);
          const auto it = cells.find(r);
          if (it == cells.end()) {
            md += " |";
          } else if (text(it->second, "status") != "ok") {
            md += " " + text(it->second, "status") + " |";
          } else {
            md += " " + format_metric(m, field(it->second, m.c_str())) + " |";
          }
        }
        md += "\n";
      }
    }
  }
  return md;
}

int append(const std::vector<std::string>& files, const std::string& to, std::ostream& out) {
  if (files.empty())
    input_error("history append: no RESULTS.json given", "bpbench history append RESULTS.json... --to FILE");
  if (to.empty())
    input_error("history append: --to HISTORY.jsonl is missing", "a JSON-lines file (created if missing)");
  std::set<std::string> present;  // runs already in the file
  auto run_id = [](const json& e) {
    return text(e, "scenario_name") + "|" + text(e, "start_time") + "|" + text(field(e, "key"), "machine");
  };
  if (fs::exists(to))
    for (const json& e : read_history(to)) present.insert(run_id(e));
  std::vector<json> lines;
  for (const auto& f : files) {
    json e = history_entry(load_results(f), fs::absolute(results_file(f)).string());
    if (!present.insert(run_id(e)).second)
      input_error(fmt::format("history append: '{}' is already in '{}' (scenario {}, started {})", f, to,
                              text(e, "scenario_name"), text(e, "start_time")),
                  "a run not yet appended");
    lines.push_back(std::move(e));
  }
  std::error_code ec;  // a history in a folder not made yet (out/history.jsonl): made, as --out folders are
  if (fs::path(to).has_parent_path()) fs::create_directories(fs::path(to).parent_path(), ec);
  std::ofstream file(to, std::ios::app | std::ios::binary);
  for (const json& e : lines) file << e.dump() << "\n";
  file.close();
  if (!file) input_error(fmt::format("history append: cannot write '{}'", to), "a writable file");
  for (const json& e : lines)
    out << fmt::format("{}: {} ({} cells, {}) appended\n", to, text(e, "scenario_name"),
                       field(e, "cells").size(), series_of(e));
  return 0;
}

int report(const std::string& file, const fs::path& dir, const std::vector<std::string>& metrics,
           const std::string& python, std::ostream& out, std::ostream& err) {
  const std::vector<json> entries = read_history(file);
  make_output_dir(dir, "history report: ");
  std::error_code ec;
  for (const auto& m : history_metrics()) fs::remove(dir / fmt::format("history_{}.png", m), ec);
  const fs::path data = dir / "plot_data.json";
  const std::vector<Trend> ts = trends(entries);
  const json plots = plot_data(ts, metrics);
  write_json_atomically(data, plots);
  const std::string problem = report_detail::run_plot_script(python, find_plot_script(), data, dir);
  if (!problem.empty()) err << fmt::format("bpbench: warning: plots not drawn ({})\n", problem);
  const std::string tables = markdown_of(ts, entries.size(), metrics);
  // history.md links the PNGs plot.py drew; history.html draws every metric that has a trend itself.
  std::string md = tables, page_md = tables;
  for (const auto& m : metrics) {
    const std::string png = fmt::format("history_{}.png", m);
    const std::string image = fmt::format("\n![{}]({})\n", metric_title(m), png);
    if (report_detail::nonempty_file(dir / png)) md += image;
    for (const auto& panel : plots["history"]["panels"])
      if (panel["metric"] == m) {
        page_md += image;
        break;
      }
  }
  std::ofstream(dir / "history.md", std::ios::binary | std::ios::trunc) << md;
  report_detail::HtmlPage page;
  page.title = "bpbench history";
  page.body_html = report_detail::markdown_to_html(page_md);
  page.data = {{"figures", plots}};
  report_detail::write_html(dir / "history.html", page);
  out << (dir / "history.md").string() << "\n" << (dir / "history.html").string() << "\n";
  return 0;
}

}  // namespace history_detail

using namespace history_detail;

const std::vector<std::string>& history_metrics() {
  static const std::vector<std::string> names = {"peak_bytes", "median_s", "tokens_per_s", "cv",
                                                 "max_seq_len"};
  return names;
}

json history_entry(const json& results, const std::string& source) {
  const json& meta = field(results, "meta");
  json key = {{"machine", text(meta, "hostname")},
              {"device", device_name(meta)},
              {"versions", field(meta, "versions")},
              {"commit", text(meta, "git_commit")}};
  json cells = json::array();
  for (const json& c : field(results, "cells")) {
    const json& memory = field(c, "memory");
    const json& time = field(c, "time");
    json cell = {{"axes", field(c, "axes")}, {"status", text(c, "status")}};
    for (const auto& [name, from] : {std::pair{"peak_bytes", &memory}, std::pair{"median_s", &time},
                                     std::pair{"tokens_per_s", &time}, std::pair{"cv", &time}})
      if (field(*from, name).is_number()) cell[name] = field(*from, name);
    if (field(c, "max_seq_len").is_number()) cell["max_seq_len"] = field(c, "max_seq_len");
    cells.push_back(std::move(cell));
  }
  return {{"schema", kHistorySchema},
          {"key", key},
          {"scenario_name", text(meta, "scenario_name")},
          {"start_time", text(meta, "start_time")},
          {"peer", text(meta, "peer")},
          {"source", source},
          {"appended_at", utc_now()},
          {"cells", cells}};
}

std::string history_markdown(const std::vector<json>& entries, const std::vector<std::string>& metrics) {
  return markdown_of(trends(entries), entries.size(), metrics);
}

int history_main(const std::vector<std::string>& args) {
  return history_main(args, std::cout, std::cerr);
}

int history_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string options = "append, report; --to FILE, --out DIR, --metric NAME, --python PATH, --help";
  try {
    if (args.empty()) input_error("history: missing a subcommand", "append, report");
    if (args[0] == "-h" || args[0] == "--help") {
      out << kHistoryHelp;
      return 0;
    }
    const std::string sub = args[0];
    if (sub != "append" && sub != "report")
      input_error(fmt::format("history: unknown subcommand '{}'", sub), "append, report");
    std::string to, out_dir, python = "/usr/bin/python3";
    std::vector<std::string> files, metrics;
    OptionReader opts(args, "history", options, /*first=*/1);
    while (opts.next()) {
      const std::string& a = opts.arg();
      if (opts.is_help()) {
        out << kHistoryHelp;
        return 0;
      } else if (opts.is("--to") && sub == "append") {
        to = opts.value("--to");
      } else if (opts.is("--out") && sub == "report") {
        out_dir = opts.value("--out");
      } else if (opts.is("--python") && sub == "report") {
        python = opts.value("--python");
      } else if (opts.is("--metric") && sub == "report") {
        const std::string m = opts.value("--metric");
        const auto& valid = history_metrics();
        if (std::find(valid.begin(), valid.end(), m) == valid.end())
          input_error(fmt::format("history report: unknown metric '{}'", m),
                      fmt::format("{}", fmt::join(valid, ", ")));
        metrics.push_back(m);
      } else if (opts.is_option()) {
        input_error(fmt::format("history {}: unknown option '{}'", sub, a), options);
      } else {
        files.push_back(a);
      }
    }
    if (sub == "append") return append(files, to, out);
    if (files.size() != 1)
      input_error(fmt::format("history report: expected one HISTORY.jsonl, got {}", files.size()),
                  "bpbench history report HISTORY.jsonl --out DIR");
    if (out_dir.empty()) input_error("history report: --out DIR is missing", "a directory for history.md");
    return report(files[0], out_dir, metrics.empty() ? history_metrics() : metrics, python, out, err);
  } catch (const std::exception& e) {
    err << "bpbench: error: " << run_detail::one_line(e.what()) << "\n";
    return 2;
  }
}

}  // namespace bpbench
