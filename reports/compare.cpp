// compare.cpp: matches the cells of two results files by axes and judges every change (see compare.h).
#include "reports/compare.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "harness/run/scenario.h"
#include "reports/compare_formats.h"
#include "reports/mann_whitney.h"
#include "reports/option_reader.h"
#include "reports/results_file.h"
#include "reports/results_json.h"

namespace bpbench {

using nlohmann::json;

namespace {

const char* kCompareHelp =
    R"HELP(usage: bpbench compare BASE.json NEW.json [--mem-tol PCT] [--time-tol PCT] [--time-alpha P]
                                               [--gate-time] [--junit FILE] [--markdown FILE]
                                               [--benchmark-json FILE] [--html FILE]

Matches the cells of two results files by their axes and prints a markdown table: per cell the status, the
peak memory of both sides and its change, the median BP time of both and a verdict (better / same / worse /
missing / new). Exits with the number of regressions, so CI can gate on it.

Regressions:
  - a cell measured in BASE that is now oom or error (or skipped): "became oom"
  - memory.peak_bytes above BASE * (1 + PCT/100) (--mem-tol, default 0: CPU peaks are deterministic), or a
    peak that is no longer measured; for max-length searches, a max_seq_len below BASE * (1 - PCT/100)
  - a cell that is only in BASE ("missing": a measurement vanished); cells only in NEW are "new", not
    regressions
  - with --gate-time only: a slower BP time
Time is decided on the measured runs of both sides (time.runs_s) by a two-sided Mann-Whitney U test, as
Google Benchmark's compare.py does: "slower" (or "faster") where p < --time-alpha (default 0.05) and the
median moved by more than --time-tol percent (default 10), else "same (noise)". Runs too few for the test to
reach p < alpha (3 against 3 can give no p below 0.1; 4 against 4: 0.029) are "n/a". Without --gate-time
time is reported, never gated, and does not change the verdict.

Axis keys that only one file has are ignored when matching (a newer bpbench may add grid keys); cells with
the same axes match in order.

options:
  --mem-tol PCT          allowed peak-memory increase in percent (default 0)
  --time-tol PCT         the smallest change of the median time that counts, in percent (default 10)
  --time-alpha P         the U test's significance level (default 0.05)
  --gate-time            count "slower" as a regression
  --junit FILE           also write JUnit XML: a testsuite per metric (status, peak_bytes, max_seq_len,
                         time), a testcase per cell; a regression is a failure with both numbers and the
                         tolerance
  --markdown FILE        also write the table under a heading with the verdict, for a pull request's
                         comment or GitHub's $GITHUB_STEP_SUMMARY
  --benchmark-json FILE  also write github-action-benchmark's customSmallerIsBetter entries of NEW: per cell
                         its peak (bytes) and, where timed, its median BP time (s)
  --html FILE            also write the table as one self-contained HTML page
  -h, --help             this text
The files are written whatever the verdict, and replace what was there.

Exit status: 0 no regression; 1..125 the number of regressions (capped at 125); 126 bad input: a missing
or malformed file, a file that is not a bpbench results.json, or a bad option (one line
`bpbench: error: ...` on stderr).
)HELP";

using namespace results_json;  // field, number, integer, text, flag

// One side's view of a cell: only what the comparison reads.
struct Side {
  std::string status, reason;
  std::optional<int64_t> peak, max_len;
  std::optional<double> median;
  std::vector<double> runs;  // time.runs_s: what the U test compares
};

// What the table shows of one side of a row (CompareRow's base_* or new_* fields).
void show_side(const Side& s, std::string& status, std::optional<int64_t>& peak,
               std::optional<int64_t>& max_len, std::optional<double>& time, size_t& runs) {
  status = s.status;
  peak = s.peak;
  max_len = s.max_len;
  time = s.median;
  runs = s.runs.size();
}

Side read_side(const json& c) {
  Side s;
  s.status = text(c, "status");
  s.reason = text(c, "reason");
  s.peak = integer(field(c, "memory"), "peak_bytes");
  s.max_len = integer(c, "max_seq_len");
  const json& t = field(c, "time");
  s.median = number(t, "median_s");
  if (field(t, "runs_s").is_array())
    for (const auto& run : field(t, "runs_s"))
      if (run.is_number()) s.runs.push_back(run.get<double>());
  return s;
}

std::set<std::string> key_union(const json& cells) {
  std::set<std::string> keys;
  for (const auto& c : cells)
    for (const auto& [k, v] : field(c, "axes").items()) keys.insert(k);
  return keys;
}

}  // namespace

std::string delta_text(int64_t base, int64_t now) {
  const int64_t d = now - base;
  if (d == 0) return "0";
  const std::string amount = std::llabs(d) < (1 << 20) ? fmt::format("{:+d} B", d)
                                                       : (d > 0 ? "+" : "-") + format_bytes(std::llabs(d));
  if (base == 0) return amount;
  return fmt::format("{} ({:+.2f}%)", amount, 100.0 * static_cast<double>(d) / static_cast<double>(base));
}

namespace {

std::string status_text(const CompareRow& r) {
  const std::string b = r.base_status.empty() ? "–" : r.base_status;
  const std::string n = r.new_status.empty() ? "–" : r.new_status;
  return b == n ? b : b + " → " + n;
}

std::string opt_bytes(const std::optional<int64_t>& b) {
  return b ? format_bytes(*b) : "";
}
std::string opt_time(const std::optional<double>& t) {
  return t ? format_time(*t) : "";
}

std::string short_reason(const std::string& r) {
  std::string s = r.size() > 80 ? r.substr(0, 77) + "..." : r;
  for (char& ch : s)
    if (ch == '\n' || ch == '\r' || ch == '|') ch = ' ';
  return s;
}

// Time: a U test on the runs, and a change of the median of at least time_tol_pct. `better` and `regress` are
// the caller's (judge's): a gated "slower" is a regression, a gated "faster" an improvement.
template <class Regress>
void judge_time(CompareRow& row, const Side& b, const Side& n, const CompareOptions& opt, bool& better,
                const Regress& regress) {
  const auto n1 = static_cast<int64_t>(b.runs.size()), n2 = static_cast<int64_t>(n.runs.size());
  if (n1 == 0 || n2 == 0 || smallest_two_sided_p(n1, n2) >= opt.time_alpha) {
    row.time = fmt::format("n/a ({} and {} runs)", n1, n2);
    return;
  }
  const UTestResult test = mann_whitney_u(b.runs, n.runs);
  const double change = *n.median / *b.median - 1, tol = opt.time_tol_pct / 100.0;
  const std::string what = fmt::format("time {:+.1f}% (median {} s → {} s, U test p = {:.2g})", 100 * change,
                                       format_time(*b.median), format_time(*n.median), test.p);
  if (test.p >= opt.time_alpha || std::abs(change) <= tol) {
    row.time = "same (noise)";
    row.time_note = what;
    return;
  }
  row.time = change > 0 ? "slower" : "faster";
  row.time_note = what;
  if (change > 0 && opt.gate_time) {
    row.time_regression = true;
    regress(what);
    return;
  }
  if (change < 0 && opt.gate_time) better = true;
  row.notes.push_back(change > 0 ? what + ", not gated" : what);
}

// Judges one matched pair; fills the row's memory/time/verdict/notes.
void judge(CompareRow& row, const Side& b, const Side& n, const CompareOptions& opt) {
  bool better = false;
  auto regress = [&](const std::string& note) {
    row.regression = true;
    row.notes.push_back(note);
  };
  if (b.status != n.status) {
    const std::string reason = n.reason.empty() ? "" : ": " + short_reason(n.reason);
    if (n.status == "oom" || n.status == "error") {
      row.status_note = "became " + n.status + reason;
      row.status_regression = true;
      regress(row.status_note);
    } else if (b.status == "ok") {
      row.status_note = "no longer measured: " + n.status + reason;
      row.status_regression = true;
      regress(row.status_note);
    } else if (n.status == "ok") {
      better = true;
      row.status_note = "now ok (was " + b.status + ")";
      row.notes.push_back(row.status_note);
    } else {
      row.status_note = fmt::format("{} → {}", b.status, n.status);
      row.notes.push_back(row.status_note);
    }
  }
  if (b.status == "ok" && n.status == "ok") {
    const double mem_tol = opt.mem_tol_pct / 100.0;
    // A max-length search's peak is that of its longest fitting probe: it grows with the maximum, so only the
    // maximum is judged there.
    if (b.peak && !b.max_len) {
      if (!n.peak) {
        row.memory = "worse";
        regress("peak no longer measured");
      } else {
        const double base = static_cast<double>(*b.peak), now = static_cast<double>(*n.peak);
        if (now > base * (1 + mem_tol)) {
          row.memory = "worse";
          regress("peak " + delta_text(*b.peak, *n.peak));
        } else if (now < base * (1 - mem_tol)) {
          row.memory = "better";
          better = true;
          row.notes.push_back("peak " + delta_text(*b.peak, *n.peak));
        } else {
          row.memory = "same";
        }
      }
    }
    if (b.max_len) {
      std::string verdict = "same";
      if (!n.max_len) {
        verdict = "worse";
        regress("max_seq_len no longer measured");
      } else if (static_cast<double>(*n.max_len) < static_cast<double>(*b.max_len) * (1 - mem_tol)) {
        verdict = "worse";
        regress(fmt::format("max_seq_len {} → {}", *b.max_len, *n.max_len));
      } else if (static_cast<double>(*n.max_len) > static_cast<double>(*b.max_len) * (1 + mem_tol)) {
        verdict = "better";
        better = true;
        row.notes.push_back(fmt::format("max_seq_len {} → {}", *b.max_len, *n.max_len));
      }
      // The memory column shows the worse of the peak and the max-length verdicts.
      if (row.memory.empty() || verdict == "worse" || (verdict == "better" && row.memory == "same"))
        row.memory = verdict;
    }
    if (b.median && n.median) judge_time(row, b, n, opt, better, regress);
  }
  row.verdict = row.regression ? Verdict::worse : better ? Verdict::better : Verdict::same;
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::better:
      return "better";
    case Verdict::same:
      return "same";
    case Verdict::worse:
      return "worse";
    case Verdict::missing:
      return "missing";
    case Verdict::added:
      return "new";
  }
  return "?";
}

int CompareReport::count(Verdict v) const {
  return static_cast<int>(
      std::count_if(rows.begin(), rows.end(), [&](const CompareRow& r) { return r.verdict == v; }));
}

int CompareReport::exit_code() const {
  return std::min(regressions, kCompareMaxRegressions);
}

std::string CompareReport::markdown() const {
  bool any_max_len = false;
  for (const auto& r : rows) any_max_len = any_max_len || r.base_max_len || r.new_max_len;
  std::vector<std::string> header = {"cell", "status", "peak base", "peak new", "Δ peak"};
  if (any_max_len) header.insert(header.end(), {"max len base", "max len new"});
  header.insert(header.end(), {"time base (s)", "time new (s)", "time", "verdict", "notes"});
  std::string s = "|";
  for (const auto& h : header) s += " " + h + " |";
  s += "\n|";
  // Numbers right-aligned, words left-aligned: the first two and the last three columns are words.
  for (size_t i = 0; i < header.size(); ++i) s += i < 2 || i + 3 >= header.size() ? "---|" : "--:|";
  s += "\n";
  for (const auto& r : rows) {
    std::vector<std::string> v = {r.label, status_text(r), opt_bytes(r.base_peak), opt_bytes(r.new_peak),
                                  r.base_peak && r.new_peak ? delta_text(*r.base_peak, *r.new_peak) : ""};
    if (any_max_len) {
      v.push_back(r.base_max_len ? std::to_string(*r.base_max_len) : "");
      v.push_back(r.new_max_len ? std::to_string(*r.new_max_len) : "");
    }
    v.push_back(opt_time(r.base_time));
    v.push_back(opt_time(r.new_time));
    v.push_back(r.time);
    v.push_back(r.regression ? fmt::format("**{}**", verdict_name(r.verdict)) : verdict_name(r.verdict));
    v.push_back(fmt::format("{}", fmt::join(r.notes, "; ")));
    s += "|";
    for (auto& cell : v) {
      for (char& ch : cell)
        if (ch == '|' || ch == '\n') ch = ' ';
      s += " " + cell + " |";
    }
    s += "\n";
  }
  s += fmt::format(
      "\n{} cells: {} better, {} same, {} worse, {} missing, {} new. {} regression{} (memory tolerance {}%; "
      "time: U test at p < {} and a median change over {}%, {}).\n",
      rows.size(), count(Verdict::better), count(Verdict::same), count(Verdict::worse),
      count(Verdict::missing), count(Verdict::added), regressions, regressions == 1 ? "" : "s",
      options.mem_tol_pct, options.time_alpha, options.time_tol_pct,
      options.gate_time ? "gated" : "reported, not gated");
  return s;
}

CompareReport compare_results(const json& base, const json& now, const CompareOptions& options) {
  check_results(base, "BASE");
  check_results(now, "NEW");
  CompareReport report;
  report.options = options;
  const json& base_cells = base.at("cells");
  const json& new_cells = now.at("cells");

  // Match on the keys both files know.
  const auto kb = key_union(base_cells), kn = key_union(new_cells);
  std::vector<json> all_axes;
  for (const auto& c : base_cells) all_axes.push_back(c.at("axes"));
  for (const auto& c : new_cells) all_axes.push_back(c.at("axes"));
  std::vector<std::string> match_keys, label_keys;
  for (const auto& k : ordered_axis_keys(all_axes))
    if (kb.count(k) && kn.count(k)) match_keys.push_back(k);
  for (const auto& k : varying_axis_keys(all_axes))
    if (std::find(match_keys.begin(), match_keys.end(), k) != match_keys.end()) label_keys.push_back(k);
  if (label_keys.empty())
    for (const char* k : {"model", "impl", "seq_len"})
      if (kb.count(k) && kn.count(k)) label_keys.push_back(k);

  // Keys: the matched axes, plus "#n" for the n-th repeat of the same axes within a file.
  auto keyed = [&](const json& cells) {
    std::vector<std::string> keys;
    std::map<std::string, int> seen;
    for (const auto& c : cells) {
      const std::string k = axes_label(c.at("axes"), match_keys);
      const int n = ++seen[k];
      keys.push_back(n == 1 ? k : fmt::format("{} #{}", k, n));
    }
    return keys;
  };
  const auto base_keys = keyed(base_cells), new_keys = keyed(new_cells);
  std::map<std::string, size_t> new_index;
  for (size_t i = 0; i < new_keys.size(); ++i) new_index.emplace(new_keys[i], i);
  auto label_of = [&](const json& cell, const std::string& key) {
    std::string l = axes_label(cell.at("axes"), label_keys);
    const auto hash = key.rfind(" #");
    if (hash != std::string::npos && key.find('=', hash) == std::string::npos) l += key.substr(hash);
    return l.empty() ? std::string("(cell)") : l;
  };

  std::set<size_t> matched;
  for (size_t i = 0; i < base_cells.size(); ++i) {
    CompareRow row;
    row.label = label_of(base_cells[i], base_keys[i]);
    const Side b = read_side(base_cells[i]);
    show_side(b, row.base_status, row.base_peak, row.base_max_len, row.base_time, row.base_runs);
    auto it = new_index.find(base_keys[i]);
    if (it == new_index.end()) {
      row.verdict = Verdict::missing;
      row.regression = row.status_regression = true;
      row.status_note = "only in BASE: the measurement vanished";
      row.notes.push_back(row.status_note);
    } else {
      matched.insert(it->second);
      const Side n = read_side(new_cells[it->second]);
      show_side(n, row.new_status, row.new_peak, row.new_max_len, row.new_time, row.new_runs);
      judge(row, b, n, options);
    }
    report.regressions += row.regression ? 1 : 0;
    report.rows.push_back(std::move(row));
  }
  for (size_t i = 0; i < new_cells.size(); ++i) {
    if (matched.count(i)) continue;
    CompareRow row;
    row.label = label_of(new_cells[i], new_keys[i]);
    const Side n = read_side(new_cells[i]);
    show_side(n, row.new_status, row.new_peak, row.new_max_len, row.new_time, row.new_runs);
    row.verdict = Verdict::added;
    row.status_note = "only in NEW";
    row.notes.push_back(row.status_note);
    report.rows.push_back(std::move(row));
  }
  return report;
}

namespace {
// One of compare's output files; a file that cannot be written is bad input (exit 126), named.
void write_output(const std::string& path, const std::string& option, const std::string& content) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << content;
  f.close();
  if (!f)
    input_error(fmt::format("compare: {} '{}' cannot be written", option, path),
                "a path in an existing, writable directory");
}
}  // namespace

int compare_main(const std::vector<std::string>& args) {
  return compare_main(args, std::cout, std::cerr);
}

int compare_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string options =
      "--mem-tol PCT, --time-tol PCT, --time-alpha P, --gate-time, --junit FILE, --markdown FILE, "
      "--benchmark-json FILE, --html FILE, --help";
  try {
    CompareOptions opt;
    std::vector<std::string> files;
    std::string junit, markdown, benchmark_json, html;  // the files to write besides the text on stdout
    // A number the whole of `text` spells, or NaN.
    auto number_in = [](const std::string& text) {
      size_t used = 0;
      double d = std::nan("");
      try {
        d = std::stod(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      return text.empty() || used != text.size() ? std::nan("") : d;
    };
    auto percent = [&](const std::string& name, const std::string& v) {
      std::string s = v;
      if (!s.empty() && s.back() == '%') s.pop_back();
      const double d = number_in(s);
      if (!std::isfinite(d) || d < 0)
        input_error(fmt::format("compare: {} '{}' is not a percentage", name, v),
                    "numbers >= 0, e.g. 5 or 0.5");
      return d;
    };
    OptionReader opts(args, "compare", options);
    while (opts.next()) {
      const std::string& a = opts.arg();
      if (opts.is_help()) {
        out << kCompareHelp;
        return 0;
      } else if (opts.is("--mem-tol")) {
        opt.mem_tol_pct = percent("--mem-tol", opts.value("--mem-tol"));
      } else if (opts.is("--time-tol")) {
        opt.time_tol_pct = percent("--time-tol", opts.value("--time-tol"));
      } else if (opts.is("--time-alpha")) {
        const std::string v = opts.value("--time-alpha");
        const double p = number_in(v);
        if (!(p > 0 && p < 1))  // NaN fails too
          input_error(fmt::format("compare: --time-alpha '{}' is not a significance level", v),
                      "a number between 0 and 1, e.g. 0.05");
        opt.time_alpha = p;
      } else if (a == "--gate-time") {
        opt.gate_time = true;
      } else if (opts.is("--junit")) {
        junit = opts.value("--junit");
      } else if (opts.is("--markdown")) {
        markdown = opts.value("--markdown");
      } else if (opts.is("--benchmark-json")) {
        benchmark_json = opts.value("--benchmark-json");
      } else if (opts.is("--html")) {
        html = opts.value("--html");
      } else if (opts.is_option()) {
        input_error(fmt::format("compare: unknown option '{}'", a), options);
      } else {
        files.push_back(a);
      }
    }
    if (files.size() != 2)
      input_error(fmt::format("compare: expected BASE.json and NEW.json, got {} file{}", files.size(),
                              files.size() == 1 ? "" : "s"),
                  "bpbench compare BASE.json NEW.json [options]");
    const json base = load_results(files[0]);
    const json now = load_results(files[1]);
    const CompareReport report = compare_results(base, now, opt);
    out << fmt::format("# bpbench compare\n\nBASE: `{}`  \nNEW: `{}`\n\n", files[0], files[1]);
    out << report.markdown();
    // Written whatever the verdict: a gate that fails is when CI needs them most.
    const CompareSources sources{files[0], files[1]};
    if (!junit.empty()) write_output(junit, "--junit", compare_junit(report, sources));
    if (!markdown.empty()) write_output(markdown, "--markdown", compare_markdown(report, sources));
    if (!benchmark_json.empty())
      write_output(benchmark_json, "--benchmark-json", compare_benchmark_json(report).dump(2) + "\n");
    if (!html.empty()) write_output(html, "--html", compare_html(report, sources));
    return report.exit_code();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& ch : msg)
      if (ch == '\n' || ch == '\r') ch = ' ';
    err << "bpbench: error: " << msg << "\n";
    return kCompareInputError;
  }
}

}  // namespace bpbench
