// test_compare_formats.cpp: compare's CI formats on the cases the Python reader (compare_formats_check.py,
// ctest "compare_formats") does not make: a gated slowdown, a time too thin to judge, a shorter max-length,
// and an output file that cannot be written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "reports/compare.h"
#include "reports/compare_formats.h"
#include "reports/report.h"
#include "tests/support/test_support.h"

namespace bpbench::test_compare_formats {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const CompareSources kFiles{"base.json", "new.json"};

// The <testcase> element of this suite and cell, up to its closing tag.
std::string testcase(const std::string& junit, const std::string& suite, const std::string& cell) {
  const std::string open = "<testcase classname=\"bpbench.compare." + suite + "\" name=\"" + cell + "\"";
  const auto b = junit.find(open);
  if (b == std::string::npos) return "";
  // Its end: "/>" where it holds nothing, else its closing tag.
  const auto head_end = junit.find(">", b);
  if (junit.compare(head_end - 1, 2, "/>") == 0) return junit.substr(b, head_end + 1 - b);
  const auto closed = junit.find("</testcase>", b);
  return junit.substr(b, closed + 11 - b);
}

// The fixture's two timed files (tests/fixtures/compare_time_*.json): c's streambp is 22% slower, p ~ 1e-5.
json timed(const char* which) {
  return load_results(fs::path(BPBENCH_SOURCE_DIR) / "tests" / "fixtures" / which);
}

TEST(CompareFormats, AGatedSlowdownFailsItsTimeTestcaseWithBothMediansAndTheTolerance) {
  CompareOptions gated;
  gated.gate_time = true;
  const CompareReport r = compare_results(timed("compare_time_a.json"), timed("compare_time_c.json"), gated);
  ASSERT_EQ(r.regressions, 1);
  const std::string junit = compare_junit(r, kFiles);
  const std::string slow = testcase(junit, "time", "impl=streambp");
  EXPECT_NE(slow.find("<failure type=\"regression\""), std::string::npos) << junit;
  for (const char* needed : {"BASE 0.508 s (10 runs)", "NEW 0.62 s (10 runs)", "p = 1.1e-05",
                             "tolerance: U test p &lt; 0.05 and a median change over 10%"})
    EXPECT_NE(slow.find(needed), std::string::npos) << needed << "\n" << slow;
  EXPECT_EQ(testcase(junit, "time", "impl=checkpoint").find("<failure"), std::string::npos);
  EXPECT_NE(junit.find("<testsuites name=\"bpbench compare\" tests=\"6\" failures=\"1\""), std::string::npos);
  // Not gated: reported in the testcase's output, not failed.
  const std::string reported =
      compare_junit(compare_results(timed("compare_time_a.json"), timed("compare_time_c.json"), {}), kFiles);
  EXPECT_EQ(reported.find("<failure"), std::string::npos) << reported;
  EXPECT_NE(testcase(reported, "time", "impl=streambp").find("slower"), std::string::npos) << reported;
  EXPECT_EQ(compare_markdown(r, kFiles).rfind("## bpbench compare: 1 regression\n", 0), 0u);
}

TEST(CompareFormats, TimesTooThinToJudgeAreSkippedAndMaxLengthsStayOutOfTheBenchmark) {
  const json base = load_results(testing::results_fixture());
  json now = base;
  size_t search = now["cells"].size();
  for (size_t i = 0; i < now["cells"].size(); ++i)
    if (now["cells"][i].contains("max_seq_len") && now["cells"][i]["status"] == "ok") search = i;
  ASSERT_LT(search, now["cells"].size());
  now["cells"][search]["max_seq_len"] = now["cells"][search]["max_seq_len"].get<int64_t>() - 128;
  const CompareReport r = compare_results(base, now, {});
  ASSERT_EQ(r.regressions, 1) << r.markdown();
  const std::string junit = compare_junit(r, kFiles);
  const std::string label = r.rows.at(search).label;
  EXPECT_NE(testcase(junit, "max_seq_len", label).find("<failure"), std::string::npos) << junit;
  EXPECT_EQ(testcase(junit, "peak_bytes", label), "");  // a search is judged on its maximum only
  // The fixture's cells ran 3 times: no U test can reach p < 0.05, so their time testcases are skipped.
  EXPECT_NE(junit.find("<skipped message=\"n/a (3 and 3 runs): too few runs for the U test\"/>"),
            std::string::npos);
  const json bench = compare_benchmark_json(r);
  for (const auto& e : bench)
    EXPECT_EQ(e["name"].get<std::string>().find(label + " · peak"), std::string::npos);
}

TEST(CompareFormats, AFileThatCannotBeWrittenIsBadInputNamed) {
  std::ostringstream out, err;
  const std::string fixture = testing::results_fixture().string();
  EXPECT_EQ(compare_main({fixture, fixture, "--junit", "/nonexistent-dir/compare.xml"}, out, err),
            kCompareInputError);
  EXPECT_NE(err.str().find("--junit '/nonexistent-dir/compare.xml' cannot be written"), std::string::npos)
      << err.str();
  EXPECT_EQ(testing::newlines(err.str()), 1);
  err.str("");
  EXPECT_EQ(compare_main({fixture, fixture, "--markdown"}, out, err), kCompareInputError);
  EXPECT_NE(err.str().find("--markdown"), std::string::npos) << err.str();
}

}  // namespace
}  // namespace bpbench::test_compare_formats
