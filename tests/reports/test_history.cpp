// test_history.cpp: `bpbench history`: runs appended as JSON lines keyed by machine, device, versions and
// commit; a run appended twice refused; the trend of the cells that repeat, per machine and device; bad input
// as one line and exit 2. Also the time statistics every results file now carries (cv, tokens per second).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "harness/run/cell_steps.h"
#include "reports/history.h"
#include "reports/results_file.h"
#include "tests/support/test_support.h"

namespace bpbench::test_history {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fixture(const char* which) {
  return fs::path(BPBENCH_SOURCE_DIR) / "tests" / "fixtures" /
         ("compare_time_" + std::string(which) + ".json");
}

std::vector<json> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

TEST(History, AppendKeysEachRunAndRefusesOneTwice) {
  testing::TempDir tmp;
  const std::string file = tmp.file("h.jsonl");
  std::ostringstream out, err;
  ASSERT_EQ(history_main({"append", fixture("a").string(), fixture("b").string(), "--to", file}, out, err), 0)
      << err.str();
  const auto lines = lines_of(file);
  ASSERT_EQ(lines.size(), 2u);
  const json& key = lines[0]["key"];
  EXPECT_EQ(key["machine"], "vm");
  EXPECT_EQ(key["device"], "cpu: Intel(R) Xeon(R) Processor");
  EXPECT_EQ(key["commit"], "2cb73c00f93c224f8f1b4673f159207f4918b886");
  EXPECT_EQ(key["versions"]["torch"], "2.11.0");
  ASSERT_EQ(lines[0]["cells"].size(), 2u);
  const json& cell = lines[0]["cells"][1];
  const json source = load_results(fixture("a"));
  EXPECT_EQ(cell["axes"], source["cells"][1]["axes"]);
  EXPECT_EQ(cell["peak_bytes"], source["cells"][1]["memory"]["peak_bytes"]);
  EXPECT_EQ(cell["median_s"], source["cells"][1]["time"]["median_s"]);
  EXPECT_EQ(cell["tokens_per_s"], source["cells"][1]["time"]["tokens_per_s"]);

  // c is new, a is not: nothing of this call is appended, and the error names the run.
  std::ostringstream out2, err2;
  EXPECT_EQ(history_main({"append", fixture("c").string(), fixture("a").string(), "--to", file}, out2, err2),
            2);
  const std::string refused = err2.str();
  EXPECT_NE(refused.find("is already in"), std::string::npos) << refused;
  EXPECT_EQ(std::count(refused.begin(), refused.end(), '\n'), 1);
  EXPECT_EQ(lines_of(file).size(), 2u);
}

TEST(History, ReportTrendsTheCellsThatRepeatPerMachine) {
  std::vector<json> entries;
  for (const char* r : {"a", "b", "c"}) entries.push_back(history_entry(load_results(fixture(r)), r));
  // A run of another machine: its own section, never mixed into this machine's trend.
  json other = load_results(fixture("a"));
  other["meta"]["hostname"] = "gpu-box";
  entries.push_back(history_entry(other, "other"));
  const std::string md = history_markdown(entries, {"median_s", "peak_bytes"});
  EXPECT_NE(md.find("## vm · cpu: Intel(R) Xeon(R) Processor"), std::string::npos) << md;
  EXPECT_NE(md.find("| compare_time: impl=streambp | 0.508 | 0.548 | 0.62 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| compare_time: impl=streambp | 198.3 MiB | 198.3 MiB | 198.3 MiB |"), std::string::npos)
      << md;
  const auto other_section = md.find("## gpu-box");
  ASSERT_NE(other_section, std::string::npos) << md;
  EXPECT_NE(md.find("nothing to trend", other_section), std::string::npos) << md;
}

// history.html beside history.md: the same tables, a figure for every metric that has a trend, and the trends
// themselves in the page's data (report.js draws them; tests/reports/browser_check.sh opens one in chromium).
TEST(History, ReportWritesAPageWithEveryTrend) {
  testing::TempDir tmp;
  const std::string file = tmp.file("h.jsonl");
  std::ostringstream out, err;
  ASSERT_EQ(history_main(
                {"append", fixture("a").string(), fixture("b").string(), fixture("c").string(), "--to", file},
                out, err),
            0)
      << err.str();
  const fs::path dir = tmp.file("report");
  ASSERT_EQ(history_main({"report", file, "--out", dir.string(), "--python", "/nonexistent"}, out, err), 0)
      << err.str();
  const std::string html = testing::file_text(dir / "history.html");
  EXPECT_NE(html.find("<td>compare_time: impl=streambp</td><td class=\"num\">0.508</td>"), std::string::npos);
  for (const char* metric : {"peak_bytes", "median_s", "tokens_per_s", "cv"})
    EXPECT_NE(html.find(std::string("data-figure=\"history_") + metric + "\""), std::string::npos) << metric;
  EXPECT_EQ(html.find("data-figure=\"history_max_seq_len\""), std::string::npos);   // no cell searched
  EXPECT_EQ(testing::file_text(dir / "history.md").find("!["), std::string::npos);  // no PNG was drawn
  const auto open = html.find("id=\"bp-data\">");
  ASSERT_NE(open, std::string::npos);
  const json data = json::parse(html.substr(open + 13, html.find("</script>", open) - open - 13));
  EXPECT_EQ(data["figures"]["history"]["panels"].size(), 4u);
}

TEST(History, BadInputIsOneLineAndExitTwo) {
  testing::TempDir tmp;
  const std::string not_history = tmp.file("x.jsonl");
  std::ofstream(not_history) << "{\"a\": 1}\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "missing a subcommand (valid: append, report)"},
      {{"trim"}, "unknown subcommand 'trim'"},
      {{"append", fixture("a").string()}, "--to HISTORY.jsonl is missing"},
      {{"append", tmp.file("none.json"), "--to", tmp.file("h.jsonl")}, "none.json"},
      {{"report", not_history, "--out", tmp.sub("r")}, "line 1 is not a bpbench.history/1 line"},
      {{"report", not_history, "--out", tmp.sub("r"), "--metric", "speed"},
       "unknown metric 'speed' (valid: peak_bytes, median_s, tokens_per_s, cv, max_seq_len)"},
      {{"report", not_history}, "--out DIR is missing"},
  };
  for (const auto& [args, expected] : cases) {
    std::ostringstream out, err;
    EXPECT_EQ(history_main(args, out, err), 2) << expected;
    const std::string line = err.str();
    EXPECT_NE(line.find(expected), std::string::npos) << line;
    EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << line;
  }
}

TEST(TimeStats, SpreadAndTokensPerSecond) {
  const TimeResult t = time_stats({0.4, 0.6, 0.5}, 1, 1000);
  EXPECT_EQ(t.median_s, 0.5);
  EXPECT_NEAR(*t.stddev_s, 0.1, 1e-15);  // the sample standard deviation (n - 1)
  EXPECT_NEAR(*t.cv, 0.2, 1e-15);
  EXPECT_NEAR(*t.tokens_per_s, 2000, 1e-9);
  const TimeResult one = time_stats({0.5}, 0, 1000);
  EXPECT_FALSE(one.stddev_s.has_value());  // no spread from one run
  EXPECT_FALSE(one.cv.has_value());
  EXPECT_FALSE(time_stats({0.5}, 0, 0).tokens_per_s.has_value());
}

}  // namespace
}  // namespace bpbench::test_history
