// compare_formats.cpp: a comparison as JUnit XML, markdown, github-action-benchmark JSON and HTML
// (compare_formats.h).
#include "reports/compare_formats.h"

#include <fmt/format.h>

#include <vector>

#include "reports/html/html_page.h"
#include "reports/html/markdown_html.h"
#include "reports/results_file.h"

namespace bpbench {

namespace {

// Text for XML 1.0: the control characters it cannot hold dropped (a reason may carry any), then escaped as
// for HTML, whose five entities XML reads too.
std::string xml_text(const std::string& s) {
  std::string kept;
  for (char ch : s)
    if (static_cast<unsigned char>(ch) >= 0x20 || ch == '\t' || ch == '\n' || ch == '\r') kept += ch;
  return report_detail::html_escape(kept);
}

std::string bytes_and_exact(int64_t b) {
  return fmt::format("{} ({} B)", format_bytes(b), b);
}

// One testcase: passed, failed (message and the numbers), or skipped (why).
struct TestCase {
  std::string name, failure, skipped, detail;
};

struct Suite {
  std::string metric;
  std::vector<TestCase> cases;
  size_t failures() const {
    size_t n = 0;
    for (const auto& c : cases) n += c.failure.empty() ? 0 : 1;
    return n;
  }
  size_t skipped() const {  // a failed case is counted as failed, not skipped
    size_t n = 0;
    for (const auto& c : cases) n += !c.skipped.empty() && c.failure.empty() ? 1 : 0;
    return n;
  }
};

TestCase status_case(const CompareRow& r) {
  TestCase t{r.label, "", "", ""};
  t.detail = fmt::format("status: BASE {}, NEW {}", r.base_status.empty() ? "absent" : r.base_status,
                         r.new_status.empty() ? "absent" : r.new_status);
  if (r.status_regression) t.failure = r.status_note;
  return t;
}

TestCase peak_case(const CompareRow& r, const CompareOptions& opt) {
  TestCase t{r.label, "", "", ""};
  if (!r.new_peak) {
    t.failure = fmt::format("peak no longer measured: BASE {} B, NEW none (tolerance {}%)", *r.base_peak,
                            opt.mem_tol_pct);
    return t;
  }
  t.detail =
      fmt::format("peak: BASE {}, NEW {}, change {}, tolerance +{}%", bytes_and_exact(*r.base_peak),
                  bytes_and_exact(*r.new_peak), delta_text(*r.base_peak, *r.new_peak), opt.mem_tol_pct);
  if (r.memory == "worse") t.failure = t.detail;
  return t;
}

TestCase max_len_case(const CompareRow& r, const CompareOptions& opt) {
  TestCase t{r.label, "", "", ""};
  t.detail =
      fmt::format("max_seq_len: BASE {}, NEW {}, tolerance -{}%", *r.base_max_len,
                  r.new_max_len ? std::to_string(*r.new_max_len) : std::string("none"), opt.mem_tol_pct);
  if (r.memory == "worse") t.failure = t.detail;
  return t;
}

TestCase time_case(const CompareRow& r, const CompareOptions& opt) {
  TestCase t{r.label, "", "", ""};
  const std::string tolerance =
      fmt::format("tolerance: U test p < {} and a median change over {}%{}", opt.time_alpha, opt.time_tol_pct,
                  opt.gate_time ? "" : ", not gated");
  t.detail = fmt::format("time: BASE {} s ({} runs), NEW {} s ({} runs); {}{}; {}", format_time(*r.base_time),
                         r.base_runs, format_time(*r.new_time), r.new_runs, r.time,
                         r.time_note.empty() ? "" : ": " + r.time_note, tolerance);
  if (r.time.rfind("n/a", 0) == 0) t.skipped = fmt::format("{}: too few runs for the U test", r.time);
  if (r.time_regression) t.failure = t.detail;
  return t;
}

std::vector<Suite> suites_of(const CompareReport& report) {
  Suite status{"status", {}}, peak{"peak_bytes", {}}, max_len{"max_seq_len", {}}, time{"time", {}};
  for (const auto& r : report.rows) {
    status.cases.push_back(status_case(r));
    const bool both_ok = r.base_status == "ok" && r.new_status == "ok";
    if (both_ok && r.base_peak && !r.base_max_len) peak.cases.push_back(peak_case(r, report.options));
    if (both_ok && r.base_max_len) max_len.cases.push_back(max_len_case(r, report.options));
    if (both_ok && r.base_time && r.new_time) time.cases.push_back(time_case(r, report.options));
  }
  std::vector<Suite> out;
  for (auto* s : {&status, &peak, &max_len, &time})
    if (!s->cases.empty()) out.push_back(std::move(*s));
  return out;
}

// GitHub's markdown: the verdict first, so that a summary or a comment reads at a glance.
std::string verdict_heading(const CompareReport& report) {
  if (report.regressions == 0) return "no regression";
  return fmt::format("{} regression{}", report.regressions, report.regressions == 1 ? "" : "s");
}

}  // namespace

std::string compare_junit(const CompareReport& report, const CompareSources& files) {
  const auto suites = suites_of(report);
  size_t tests = 0, failures = 0, skipped = 0;
  for (const auto& s : suites) {
    tests += s.cases.size();
    failures += s.failures();
    skipped += s.skipped();
  }
  std::string x = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<testsuites name=\"bpbench compare\" tests=\"{}\" failures=\"{}\" skipped=\"{}\">\n",
      tests, failures, skipped);
  for (const auto& s : suites) {
    x += fmt::format(
        "  <testsuite name=\"bpbench.compare.{0}\" tests=\"{1}\" failures=\"{2}\" skipped=\"{3}\">\n"
        "    <properties><property name=\"base\" value=\"{4}\"/><property name=\"new\" "
        "value=\"{5}\"/></properties>\n",
        s.metric, s.cases.size(), s.failures(), s.skipped(), xml_text(files.base), xml_text(files.now));
    for (const auto& c : s.cases) {
      x += fmt::format("    <testcase classname=\"bpbench.compare.{}\" name=\"{}\"", s.metric,
                       xml_text(c.name));
      if (!c.failure.empty()) {
        x += fmt::format(
            ">\n      <failure type=\"regression\" message=\"{}\">{}</failure>\n    </testcase>\n",
            xml_text(c.failure), xml_text(c.detail.empty() ? c.failure : c.detail));
      } else if (!c.skipped.empty()) {
        x += fmt::format(">\n      <skipped message=\"{}\"/>\n    </testcase>\n", xml_text(c.skipped));
      } else if (!c.detail.empty()) {
        x += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n", xml_text(c.detail));
      } else {
        x += "/>\n";
      }
    }
    x += "  </testsuite>\n";
  }
  return x + "</testsuites>\n";
}

std::string compare_markdown(const CompareReport& report, const CompareSources& files) {
  return fmt::format("## bpbench compare: {}\n\nBASE: `{}`  \nNEW: `{}`\n\n{}", verdict_heading(report),
                     files.base, files.now, report.markdown());
}

nlohmann::json compare_benchmark_json(const CompareReport& report) {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& r : report.rows) {
    if (r.new_status != "ok") continue;
    if (r.new_peak && !r.new_max_len)
      entries.push_back({{"name", r.label + " · peak memory"},
                         {"unit", "bytes"},
                         {"value", *r.new_peak},
                         {"extra", format_bytes(*r.new_peak)}});
    if (r.new_time)
      entries.push_back({{"name", r.label + " · BP time"},
                         {"unit", "s"},
                         {"value", *r.new_time},
                         {"extra", fmt::format("median of {} runs", r.new_runs)}});
  }
  return entries;
}

std::string compare_html(const CompareReport& report, const CompareSources& files) {
  report_detail::HtmlPage page;
  page.title = "bpbench compare: " + verdict_heading(report);
  page.body_html = report_detail::markdown_to_html("#" + compare_markdown(report, files).substr(2));
  return report_detail::html_document(page);
}

}  // namespace bpbench
