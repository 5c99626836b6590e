// test_report_html.cpp: report.html without a browser (tests/reports/browser_check.py opens it in one): the
// markdown it converts, the timeline's thinning to pixel columns with the peak kept exactly, and the page
// that `bpbench report` writes: self-contained, its data parseable, a row and a timeline per cell.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>

#include "reports/html/markdown_html.h"
#include "reports/html/report_html.h"
#include "reports/report.h"
#include "tests/support/test_support.h"

namespace bpbench::test_report_html {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using report_detail::markdown_to_html;

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

// The JSON a page carries for report.js.
json page_data(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"bp-data\">";
  const auto b = html.find(open);
  if (b == std::string::npos) return nullptr;
  const auto e = html.find("</script>", b);
  return json::parse(html.substr(b + open.size(), e - b - open.size()), nullptr, false);
}

TEST(MarkdownHtml, TablesKeepTheirAlignmentAndEscapeTheirCells) {
  const std::string html = markdown_to_html(
      "## Peak memory\n\n| impl | T=256 |\n|---|--:|\n| plain \\| ckpt | <b>1</b> & 2 |\n| `a<b` | **oom** "
      "|\n");
  EXPECT_NE(html.find("<h2 id=\"peak-memory\">Peak memory</h2>"), std::string::npos) << html;
  EXPECT_NE(html.find("<table class=\"bp-table\">"), std::string::npos) << html;
  EXPECT_NE(html.find("<th>impl</th><th class=\"num\">T=256</th>"), std::string::npos) << html;
  EXPECT_NE(html.find("<td>plain | ckpt</td><td class=\"num\">&lt;b&gt;1&lt;/b&gt; &amp; 2</td>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<td><code>a&lt;b</code></td><td class=\"num\"><strong>oom</strong></td>"),
            std::string::npos)
      << html;
  EXPECT_EQ(count(html, "<tr>"), 3u) << html;
}

TEST(MarkdownHtml, FiguresLinksListsAndHeadingIds) {
  const std::string html = markdown_to_html(
      "# t\n\n- results: `x.json`\n  - nested\n- snapshots: [#3](../timelines/c.pickle), "
      "[bad](javascript:alert(1))\n\n![peak memory vs sequence length](peak_vs_seq_len.png)\n\n"
      "See https://pytorch.org/memory_viz.  \nNext line.\n\n## A b\n\n## A b\n");
  EXPECT_NE(
      html.find("<figure class=\"bp-figure\" data-figure=\"peak_vs_seq_len\"><figcaption>peak memory vs "
                "sequence length</figcaption></figure>"),
      std::string::npos)
      << html;
  EXPECT_NE(html.find("<a href=\"../timelines/c.pickle\">#3</a>"), std::string::npos) << html;
  EXPECT_NE(html.find("<a href=\"#\">bad</a>"), std::string::npos) << html;  // no script through a link
  EXPECT_EQ(html.find("javascript"), std::string::npos) << html;
  EXPECT_NE(html.find("<a href=\"https://pytorch.org/memory_viz\">https://pytorch.org/memory_viz</a>."),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<br>\nNext line."), std::string::npos) << html;
  EXPECT_EQ(count(html, "<ul>"), 2u) << html;
  EXPECT_NE(html.find("<li>nested</li>"), std::string::npos) << html;
  EXPECT_NE(html.find("id=\"a-b\""), std::string::npos) << html;
  EXPECT_NE(html.find("id=\"a-b-2\""), std::string::npos) << html;
}

// A long timeline (a random walk) thinned to pixel columns: at most two points a column and the two ends,
// in time order, each column's lowest and highest kept, and the peak kept exactly, the first of equals.
TEST(ThinToColumns, KeepsEachColumnsExtremesAndThePeak) {
  std::mt19937 rng(7);
  json points = json::array();
  int64_t live = 1 << 20;
  const size_t n = 100000, columns = 200;
  for (size_t i = 0; i < n; ++i) {
    live += static_cast<int64_t>(rng() % 2001) - 1000;
    points.push_back({{"t_ms", 0.01 * static_cast<double>(i)}, {"live", live}});
  }
  // Two equal highest points: the first is the peak.
  points[31337]["live"] = int64_t{1} << 40;
  points[77777]["live"] = int64_t{1} << 40;
  const auto keep = report_detail::thin_to_columns(points, columns);
  ASSERT_LE(keep.size(), 2 * columns + 2);
  EXPECT_TRUE(std::is_sorted(keep.begin(), keep.end()));
  EXPECT_EQ(std::adjacent_find(keep.begin(), keep.end()), keep.end());
  EXPECT_EQ(keep.front(), 0u);
  EXPECT_EQ(keep.back(), n - 1);
  EXPECT_TRUE(std::binary_search(keep.begin(), keep.end(), size_t{31337}));
  // Column c holds the points whose time falls in its 1/columns of the span.
  const double span = points.back()["t_ms"].get<double>();
  for (size_t c = 0; c < columns; ++c) {
    int64_t lo = INT64_MAX, hi = INT64_MIN, kept_lo = INT64_MAX, kept_hi = INT64_MIN;
    for (size_t i = 0; i < n; ++i) {
      const auto col = std::min(columns - 1, static_cast<size_t>(points[i]["t_ms"].get<double>() / span *
                                                                 static_cast<double>(columns)));
      if (col != c) continue;
      const int64_t v = points[i]["live"].get<int64_t>();
      lo = std::min(lo, v), hi = std::max(hi, v);
      if (std::binary_search(keep.begin(), keep.end(), i))
        kept_lo = std::min(kept_lo, v), kept_hi = std::max(kept_hi, v);
    }
    EXPECT_EQ(kept_lo, lo) << "column " << c;
    EXPECT_EQ(kept_hi, hi) << "column " << c;
  }
  // Fewer points than columns: every point stays.
  json few =
      json::array({{{"t_ms", 0.0}, {"live", 5}}, {{"t_ms", 1.0}, {"live", 7}}, {{"t_ms", 2.0}, {"live", 6}}});
  EXPECT_EQ(report_detail::thin_to_columns(few, columns), (std::vector<size_t>{0, 1, 2}));
}

// The committed fixture's page: nothing it could fetch, every cell a row, every timeline with its peak equal
// to the highest live bytes of its points, and a cell's reason that holds "</script>" unable to end the data.
TEST(ReportHtml, OnePageWithItsDataACellRowAndATimelinePerCell) {
  testing::TempDir tmp;
  const fs::path& dir = tmp.dir();
  json doc = load_results(testing::results_fixture());
  ASSERT_FALSE(doc["cells"].empty());
  doc["cells"][0]["reason"] = "</script><script>alert(1)</script>";
  doc["cells"][0]["status"] = "error";
  std::ofstream(dir / "results.json") << doc.dump();
  std::ostringstream out, err;
  ASSERT_EQ(report_main({(dir / "results.json").string(), "--out", (dir / "report").string(), "--python",
                         "/nonexistent"},
                        out, err),
            0)
      << err.str();
  EXPECT_NE(out.str().find("report.html"), std::string::npos) << out.str();
  const std::string html = testing::file_text(dir / "report" / "report.html");
  ASSERT_FALSE(html.empty());

  // Self-contained: a policy that allows nothing from elsewhere, and no element that would load a file.
  EXPECT_NE(html.find("Content-Security-Policy\" content=\"default-src 'none'"), std::string::npos);
  for (const char* loads : {"<link", " src=", "@import", "url(http", "url(//"})
    EXPECT_EQ(html.find(loads), std::string::npos) << loads;
  EXPECT_EQ(count(html, "<script"), 2u);  // the data and report.js: the reason above opened none
  EXPECT_EQ(count(html, "</script>"), 2u);

  const json data = page_data(html);
  ASSERT_TRUE(data.is_object()) << "the page's data does not parse";
  EXPECT_EQ(data["figures"]["peak_vs_seq_len"],
            json::parse(testing::file_text(dir / "report" / "plot_data.json"))["peak_vs_seq_len"]);
  size_t with_timeline = 0;
  for (const auto& c : doc["cells"])
    with_timeline += c["memory"].is_object() && c["memory"].contains("timeline") ? 1 : 0;
  ASSERT_GT(with_timeline, 0u);
  ASSERT_EQ(data["timelines"].size(), with_timeline);
  for (const auto& tl : data["timelines"]) {
    const json& points = doc["cells"][tl["cell"].get<size_t>()]["memory"]["timeline"]["points"];
    int64_t highest = 0;
    for (const auto& p : points) highest = std::max(highest, p["live"].get<int64_t>());
    EXPECT_EQ(tl["peak"]["bytes"].get<int64_t>(), highest);
    EXPECT_EQ(tl["live"][tl["peak"]["index"].get<size_t>()].get<int64_t>(), highest);
    EXPECT_EQ(tl["points_total"].get<size_t>(), points.size());
    EXPECT_LE(tl["t_ms"].size(), 2 * report_detail::kTimelineColumns + 2);
    for (const auto& cat : tl["categories"])
      EXPECT_EQ(tl["by_category"][cat.get<std::string>()].size(), tl["t_ms"].size());
  }
  // One row per cell in the cell index, and the sections of report.md after it.
  const auto cells_at = html.find("<h2 id=\"cells\">");
  ASSERT_NE(cells_at, std::string::npos);
  const std::string index = html.substr(cells_at, html.find("</table>", cells_at) - cells_at);
  EXPECT_EQ(count(index, "<tr>"), doc["cells"].size() + 1);  // the heading's row too
  EXPECT_NE(html.find("<h2 id=\"bp-time-table-1\">"), std::string::npos);
  EXPECT_NE(html.find("data-figure=\"timeline\""), std::string::npos);
}

}  // namespace
}  // namespace bpbench::test_report_html
