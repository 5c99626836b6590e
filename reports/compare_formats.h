// compare_formats.h: a comparison (compare.h) in the formats CI systems read, for `bpbench compare`'s
// --junit, --markdown, --benchmark-json and --html (docs/compare.md has a workflow that uses them all).
//
//   JUnit XML     one <testsuite> per metric ("status", "peak_bytes", "max_seq_len", "time") and in it one
//                 <testcase> per cell that has the metric; a regression is a <failure> whose message holds
//                 both numbers and the tolerance; a time the U test cannot judge is <skipped>. Jenkins,
//                 GitLab and the GitHub test-report actions show it as test results.
//   markdown      a heading with the verdict, BASE and NEW, the table and the summary line of the text
//   output:
//                 a pull request's comment, or GitHub's $GITHUB_STEP_SUMMARY.
//   benchmark     github-action-benchmark's customSmallerIsBetter: [{"name", "unit", "value", "extra"}],
//   NEW's
//                 values: per cell its peak ("bytes") and, where timed, its median BP time ("s"). A
//                 max-length search's max_seq_len is larger-is-better and is left out.
//   HTML          the markdown as one self-contained page (html_page.h): the table sortable, regressions red.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "reports/compare.h"

namespace bpbench {

struct CompareSources {
  std::string base, now;  // the two files as given on the command line
};

std::string compare_junit(const CompareReport& report, const CompareSources& files);
std::string compare_markdown(const CompareReport& report, const CompareSources& files);
nlohmann::json compare_benchmark_json(const CompareReport& report);
std::string compare_html(const CompareReport& report, const CompareSources& files);

}  // namespace bpbench
