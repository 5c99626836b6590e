// test_report.cpp: `bpbench report` on the committed fixture: the paper's tables in report.md (with oom and
// skipped cells shown as such), the three PNGs when matplotlib is there, and clean failures otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "reports/report.h"
#include "tests/support/test_support.h"

namespace bpbench::test_report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing::file_text;
using testing::newlines;
const fs::path& kFixture = testing::results_fixture();

bool have_matplotlib() {
  static const bool yes = std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0;
  return yes;
}

// The markdown between "## title" and the next "## " heading.
std::string section(const std::string& md, const std::string& title) {
  const auto b = md.find("## " + title);
  if (b == std::string::npos) return "";
  const auto e = md.find("\n## ", b + 3);
  return md.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

// The table line that starts with "| first |" in `text`.
std::string row(const std::string& text, const std::string& first) {
  const auto b = text.find("\n| " + first + " |");
  if (b == std::string::npos) return "";
  return text.substr(b + 1, text.find('\n', b + 1) - b - 1);
}

class Report : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bpbench-report-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  int run(const std::vector<std::string>& args) {
    out_.str("");
    err_.str("");
    return report_main(args, out_, err_);
  }
  fs::path dir_;
  std::ostringstream out_, err_;
};

TEST_F(Report, RendersThePaperTablesFromTheFixture) {
  const fs::path out = dir_ / "report";
  ASSERT_EQ(run({kFixture.string(), "--out", out.string()}), 0) << err_.str();
  const std::string md = file_text(out / "report.md");
  ASSERT_FALSE(md.empty());
  EXPECT_TRUE(fs::exists(out / "plot_data.json"));

  // Table 3: rows model/objective, columns strategies, thousands of tokens; from the max-length cells.
  const std::string t3 = section(md, "Maximum sequence length (Table 3)");
  EXPECT_NE(t3.find("| model | objective | plain | checkpoint | streambp |"), std::string::npos) << t3;
  EXPECT_EQ(row(t3, "small"), "| small | sft | 1.4k | 2.3k | 22.3k |") << t3;
  EXPECT_NE(t3.find("22272: ok"), std::string::npos) << t3;  // the probes of the search

  // Table 1: rows strategies, columns lengths, median seconds; plain ran out of memory at 2048.
  const std::string t1 = section(md, "BP time (Table 1)");
  EXPECT_NE(t1.find("| impl | T=512 | T=1024 | T=2048 |"), std::string::npos) << t1;
  EXPECT_EQ(row(t1, "plain"), "| plain | 6.10 | 12.8 | oom |") << t1;
  EXPECT_NE(t1.find("| mst | skipped: mst decomposes"), std::string::npos) << t1;  // DPO table
  EXPECT_NE(row(t1, "streambp ps=128").find("37.5"), std::string::npos) << t1;     // the partition sweep rows

  // Peak: "peak (+above base)" in GiB / MiB.
  const std::string peak = section(md, "Peak BP memory vs sequence length (Figure 3)");
  EXPECT_EQ(row(peak, "plain").rfind("| plain | 412.6 MiB (+263.6 MiB) | 710.2 MiB", 0), 0u) << peak;
  EXPECT_NE(row(peak, "plain").find("| oom |"), std::string::npos) << peak;
  EXPECT_NE(peak.find("est. "), std::string::npos) << peak;
  EXPECT_NE(peak.find("by category"), std::string::npos) << peak;

  // Figure 5 as a table, and Table 7 with Er_abs / Er_rel per group in scientific notation.
  const std::string sweep = section(md, "BP time, peak memory and FLOPs vs partition size (Figure 5)");
  EXPECT_NE(sweep.find("| partition | T=2048 |"), std::string::npos) << sweep;
  const std::string t7 = section(md, "Gradient error (Table 7)");
  EXPECT_NE(t7.find("| group | plain fp32 Er_abs | plain fp32 Er_rel |"), std::string::npos) << t7;
  EXPECT_NE(t7.find("plain bf16 Er_abs"), std::string::npos) << t7;
  for (const char* g : {"embed", "attention", "mlp", "norms", "lm_head", "all", "loss"})
    EXPECT_FALSE(row(t7, g).empty()) << g << "\n" << t7;
  EXPECT_NE(row(t7, "all").find("e-"), std::string::npos) << t7;

  // The timeline of the one cell that has it; the cells that did not run, with their reasons.
  const std::string tl = section(md, "Memory timeline (Figures 1 and 8)");
  EXPECT_NE(tl.find("impl=streambp"), std::string::npos) << tl;
  EXPECT_NE(tl.find("| layer 0 backward |"), std::string::npos) << tl;
  EXPECT_NE(section(md, "Cells that did not run").find("skipped: mst decomposes"), std::string::npos);

  if (!have_matplotlib()) GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib: PNGs not checked";
  EXPECT_EQ(err_.str(), "");
  for (const char* png : {"peak_vs_seq_len.png", "partition_sweep.png", "timeline.png"}) {
    EXPECT_TRUE(fs::is_regular_file(out / png)) << png;
    if (fs::is_regular_file(out / png)) {
      EXPECT_GT(fs::file_size(out / png), 10000u) << png;
    }
    EXPECT_NE(md.find(std::string("](") + png + ")"), std::string::npos) << png;
  }
  EXPECT_NE(out_.str().find("3 plots"), std::string::npos) << out_.str();
}

TEST_F(Report, WithoutPythonWritesTheMarkdownAndWarnsOnce) {
  const fs::path out = dir_ / "r";
  ASSERT_EQ(run({kFixture.string(), "--out", out.string(), "--python", "/nonexistent/python3"}), 0);
  const std::string md = file_text(out / "report.md");
  EXPECT_NE(md.find("## BP time (Table 1)"), std::string::npos);
  EXPECT_EQ(md.find(".png)"), std::string::npos) << "no figure may be linked when none was drawn";
  EXPECT_EQ(err_.str().rfind("bpbench: warning: ", 0), 0u) << err_.str();
  EXPECT_EQ(newlines(err_.str()), 1) << err_.str();

  // The same markdown without touching the disk.
  const std::string direct = render_report_markdown(load_results(kFixture), kFixture.parent_path());
  EXPECT_NE(direct.find("## Gradient error (Table 7)"), std::string::npos);
  EXPECT_EQ(direct.find(".png)"), std::string::npos);
}

TEST_F(Report, DistributedCellsGetAPerRankTable) {
  json results = load_results(kFixture);
  json cell = results["cells"][0];
  cell["axes"]["impl"] = "streambp-dist";
  cell["world_size"] = 2;
  cell["ranks"] = json::array();
  for (int r = 0; r < 2; ++r)
    cell["ranks"].push_back({{"rank", r},
                             {"status", "ok"},
                             {"peak_bytes", (100 + r) << 20},
                             {"hardware_flops", r == 0 ? 900 : 1100},
                             {"time_median_s", 1.5},
                             {"comm",
                              {{"reduce_scatter", {{"calls", 6}, {"bytes", 3 << 20}, {"seconds", 0.5}}},
                               {"all_to_all", {{"calls", 24}, {"bytes", 1 << 20}, {"seconds", 0.25}}},
                               {"barrier", {{"calls", 2}, {"bytes", 0}, {"seconds", 9.0}}}}}});
  results["cells"].push_back(cell);
  const std::string md = render_report_markdown(results, kFixture.parent_path());
  const size_t at = md.find("## Distributed cells, per rank");
  ASSERT_NE(at, std::string::npos);
  // The rank's FLOPs against the ranks' mean (1000), BP time, then the seconds in collectives without the
  // runner's barriers: 0.5 + 0.25.
  EXPECT_NE(md.find("| 1 | ok | 101.0 MiB | 1.1e+03 (+10.0%) | 1.50 | 0.75 |", at), std::string::npos)
      << md.substr(at);
  EXPECT_NE(md.find("| 0 | ok | 100.0 MiB | 900 (-10.0%) |", at), std::string::npos) << md.substr(at);
  EXPECT_NE(md.find("6 / 3.00 MiB", at), std::string::npos) << md.substr(at);
  EXPECT_NE(md.find("24 / 1.00 MiB", at), std::string::npos) << md.substr(at);
  // Without ranks, no such section.
  EXPECT_EQ(render_report_markdown(load_results(kFixture), kFixture.parent_path()).find("Distributed cells"),
            std::string::npos);
}

// An offloaded cell beside its twin (the fixture predates the offload axis: absent means "none"): its own
// "+offload" row in the memory table with the host bytes, and the offload section's saving and exposed time.
TEST_F(Report, OffloadedCellsSitBesideTheirTwins) {
  json results = load_results(kFixture);
  json twin;
  for (const json& c : results["cells"])
    if (c["axes"]["impl"] == "streambp" && c["status"] == "ok" && c["time"].is_object()) {
      twin = c;
      break;
    }
  ASSERT_TRUE(twin.is_object()) << "the fixture has no timed streambp cell";
  ASSERT_FALSE(twin["axes"].contains("offload"));
  json off = twin;
  off["axes"]["offload"] = "checkpoints";
  off["memory"]["peak_bytes"] = twin["memory"]["peak_bytes"].get<int64_t>() - (16 << 20);
  off["memory"]["peak_above_base_bytes"] =
      twin["memory"]["peak_above_base_bytes"].get<int64_t>() - (16 << 20);
  off["memory"]["host_peak_bytes"] = 16 << 20;
  off["time"]["median_s"] = twin["time"]["median_s"].get<double>() + 0.5;
  results["cells"].push_back(off);
  const std::string md = render_report_markdown(results, kFixture.parent_path());
  const std::string offload = section(md, "Offloaded checkpoints");
  ASSERT_FALSE(offload.empty()) << md;
  EXPECT_NE(offload.find("| 16.00 MiB | "), std::string::npos) << offload;
  EXPECT_NE(offload.find("| 0.5 |"), std::string::npos) << "exposed copy time\n" << offload;
  EXPECT_NE(md.find(" +offload | "), std::string::npos) << "a row label of its own\n" << md;
  EXPECT_NE(md.find("; host 16.00 MiB"), std::string::npos) << md;
  // Without offloaded cells, no such section.
  EXPECT_EQ(
      render_report_markdown(load_results(kFixture), kFixture.parent_path()).find("Offloaded checkpoints"),
      std::string::npos);
}

TEST_F(Report, BadInputReturns2WithOneLine) {
  std::ofstream(dir_ / "bad.json") << "{\"cells\": [";
  std::ofstream(dir_ / "other.json") << "{\"hello\": 1}";
  for (const auto& args : std::vector<std::vector<std::string>>{{(dir_ / "absent.json").string()},
                                                                {(dir_ / "bad.json").string()},
                                                                {(dir_ / "other.json").string()},
                                                                {},
                                                                {kFixture.string(), "--timeline-cell", "999"},
                                                                {kFixture.string(), "--timeline-cell", "0"},
                                                                {kFixture.string(), "--bogus"}}) {
    EXPECT_EQ(run(args), 2) << (args.empty() ? "(none)" : args.back());
    EXPECT_EQ(err_.str().rfind("bpbench: error: ", 0), 0u) << err_.str();
    EXPECT_EQ(newlines(err_.str()), 1) << err_.str();
  }
  EXPECT_EQ(run({"--help"}), 0);
  EXPECT_NE(out_.str().find("--timeline-cell"), std::string::npos);
}

// A search that recorded the estimate's answer shows it beside the measured length, in Table 3 and the
// probes list; one without it shows only what it measured.
TEST_F(Report, MaxLengthShowsTheEstimatesAnswerBesideTheMeasuredOne) {
  json doc = load_results(kFixture);
  auto search_cell = [](const std::string& impl, int64_t found, std::optional<int64_t> estimate) {
    json search = {{"budget_bytes", 335544320}, {"granularity", 128}, {"upper", 65536}, {"error", ""}};
    if (estimate) search["estimate_max_seq_len"] = *estimate;
    return json{{"axes", {{"model", "small"}, {"objective", "sft"}, {"impl", impl}}},
                {"status", "ok"},
                {"max_seq_len", found},
                {"hit_upper", false},
                {"search", search},
                {"probes", json::array({{{"seq_len", found}, {"status", "ok"}, {"peak_bytes", 335000000}}})}};
  };
  doc["cells"] = json::array({search_cell("streambp", 19456, 19456), search_cell("mst", 8320, std::nullopt)});
  doc.erase("meta");
  fs::create_directories(dir_ / "run");
  std::ofstream(dir_ / "run" / "results.json") << doc.dump();
  ASSERT_EQ(run({(dir_ / "run").string(), "--python", "/nonexistent"}), 0) << err_.str();
  const std::string t3 =
      section(file_text(dir_ / "run" / "report" / "report.md"), "Maximum sequence length (Table 3)");
  EXPECT_NE(row(t3, "small").find("19.5k (est. 19.5k)"), std::string::npos) << t3;
  EXPECT_NE(row(t3, "small").find("| 8.3k |"), std::string::npos) << t3;
  EXPECT_NE(t3.find("max 19456 (estimate 19456)"), std::string::npos) << t3;
  EXPECT_NE(t3.find("\"est.\": the analytic estimate's answer"), std::string::npos) << t3;
}

TEST_F(Report, TimelineFromASeparateFileAndAbsentFields) {
  // A minimal results file: one cell whose timeline lives in timelines/0.json, one with hardly any fields,
  // and a max-length cell whose smallest probe did not fit.
  json doc = load_results(kFixture);
  json tl_cell;
  for (const auto& c : doc["cells"])
    if (c["memory"].is_object() && c["memory"].contains("timeline")) tl_cell = c;
  ASSERT_TRUE(tl_cell.is_object());
  fs::create_directories(dir_ / "run" / "timelines");
  std::ofstream(dir_ / "run" / "timelines" / "0.json") << tl_cell["memory"]["timeline"].dump();
  tl_cell["memory"].erase("timeline");
  tl_cell["memory"]["timeline_file"] = "timelines/0.json";
  json bare = {{"axes", {{"model", "small"}, {"impl", "plain"}, {"seq_len", 64}}}, {"status", "ok"}};
  json search = {{"axes", {{"model", "small"}, {"objective", "sft"}, {"impl", "plain"}}},
                 {"status", "oom"},
                 {"reason", "even 512 is too long"},
                 {"probes", json::array({{{"seq_len", 512}, {"status", "oom"}, {"peak_bytes", nullptr}}})}};
  doc["cells"] = json::array({bare, tl_cell, search});
  doc.erase("meta");
  std::ofstream(dir_ / "run" / "results.json") << doc.dump();

  // The directory may stand for its results.json; --out defaults to DIR/report.
  ASSERT_EQ(run({(dir_ / "run").string(), "--timeline-cell", "1", "--python", "/nonexistent"}), 0)
      << err_.str();
  const std::string md = file_text(dir_ / "run" / "report" / "report.md");
  const std::string tl = section(md, "Memory timeline (Figures 1 and 8)");
  EXPECT_NE(tl.find("Cell #1"), std::string::npos) << tl;
  EXPECT_NE(tl.find("| head |"), std::string::npos) << tl;
  EXPECT_EQ(row(section(md, "Maximum sequence length (Table 3)"), "small"), "| small | sft | oom |") << md;
  EXPECT_NE(row(section(md, "BP time (Table 1)"), "plain").find("–"), std::string::npos) << md;

  // A timeline file that cannot be read: the default choice warns, an explicit one is an error.
  fs::remove(dir_ / "run" / "timelines" / "0.json");
  EXPECT_EQ(run({(dir_ / "run").string(), "--python", "/nonexistent"}), 0);
  EXPECT_NE(err_.str().find("timelines/0.json"), std::string::npos) << err_.str();
  EXPECT_EQ(run({(dir_ / "run").string(), "--timeline-cell", "1"}), 2);
}

// Cells with "compute" (the fixture predates it): TFLOP/s beside each time, MFU where the cell has one, the
// FLOPs table with the overhead, and FLOPs in the partition sweep.
TEST_F(Report, FlopsBesideTimesInTheirTableAndInThePartitionSweep) {
  json results = load_results(kFixture);
  int with_compute = 0;
  for (json& c : results["cells"]) {
    if (c["status"] != "ok" || !c["time"].is_object()) continue;
    const int64_t model = 3'000'000'000, hardware = c["axes"]["impl"] == "plain" ? model : 4'500'000'000;
    c["compute"] = {{"model_flops", model},
                    {"hardware_flops", hardware},
                    {"tflops_per_s", 2.5},
                    {"mfu", nullptr},
                    {"hfu", nullptr},
                    {"peak", nullptr},
                    {"counts", {{"attention_dense", 1'200'000'000}}}};
    if (c["axes"]["impl"] == "checkpoint") c["compute"]["mfu"] = 0.412, c["compute"]["hfu"] = 0.618;
    ++with_compute;
  }
  ASSERT_GT(with_compute, 0);
  const std::string md = render_report_markdown(results, kFixture.parent_path());
  const std::string t1 = section(md, "BP time (Table 1)");
  EXPECT_EQ(row(t1, "plain"), "| plain | 6.10 (2.5 TFLOP/s) | 12.8 (2.5 TFLOP/s) | oom |") << t1;
  EXPECT_NE(t1.find("2.5 TFLOP/s, MFU 41.2%, HFU 61.8%"), std::string::npos) << t1;
  const std::string flops = section(md, "FLOPs per step");
  EXPECT_NE(flops.find("| impl | T | model | hardware | overhead | dense attention | rate |"),
            std::string::npos)
      << flops;
  EXPECT_NE(flops.find("| plain | 512 | 3 GFLOP | 3 GFLOP | +0.0% | 1.2 GFLOP | 2.5 TFLOP/s |"),
            std::string::npos)
      << flops;
  EXPECT_NE(flops.find("| 3 GFLOP | 4.5 GFLOP | +50.0% |"), std::string::npos) << flops;
  const std::string sweep = section(md, "BP time, peak memory and FLOPs vs partition size (Figure 5)");
  EXPECT_NE(sweep.find(", 4.5 GFLOP (1.2 GFLOP) |"), std::string::npos) << sweep;
  // The fixture alone: the section says why it has no table.
  EXPECT_NE(section(render_report_markdown(load_results(kFixture), kFixture.parent_path()), "FLOPs per step")
                .find("No cell counted its FLOPs"),
            std::string::npos);
}

TEST(ReportFormat, BytesAndTimes) {
  EXPECT_EQ(format_bytes(int64_t{1} << 30), "1.00 GiB");
  EXPECT_EQ(format_bytes(int64_t{3} << 30), "3.00 GiB");
  EXPECT_EQ(format_bytes(int64_t{412} << 20), "412.0 MiB");
  EXPECT_EQ(format_bytes(int64_t{3} << 20), "3.00 MiB");
  EXPECT_EQ(format_bytes(int64_t{1} << 19), "0.500 MiB");
  EXPECT_EQ(format_bytes(100), "<0.001 MiB");
  EXPECT_EQ(format_bytes(0), "0.000 MiB");
  EXPECT_EQ(format_time(123.4), "123");
  EXPECT_EQ(format_time(12.34), "12.3");
  EXPECT_EQ(format_time(1.234), "1.23");
  EXPECT_EQ(format_time(0.001234), "0.00123");
  EXPECT_EQ(format_flops(999), "999 FLOP");
  EXPECT_EQ(format_flops(6'702'846), "6.7 MFLOP");
  EXPECT_EQ(format_flops(int64_t{4'404'023'296}), "4.4 GFLOP");
  EXPECT_EQ(format_flops(int64_t{1'230'000'000'000'000}), "1.23 PFLOP");
  EXPECT_EQ(axis_value_text(json(64.0)), "64");
  EXPECT_EQ(axis_value_text(json(0.1)), "0.1");
}

// Real runs (tests/fixtures/compare_time_b.json): its checkpoint cell's 10 runs spread by cv 12.1% (one run
// of 0.81 s among 0.53-0.66), flagged; streambp's (4.5%) is not. Tokens per second in a table of its own.
TEST_F(Report, TimeSpreadTooWideToCompareIsFlaggedAndTokensPerSecondShown) {
  const fs::path run = fs::path(BPBENCH_SOURCE_DIR) / "tests" / "fixtures" / "compare_time_b.json";
  const json results = load_results(run);
  const std::string md = render_report_markdown(results, run.parent_path());
  const std::string time = section(md, "BP time");
  ASSERT_FALSE(time.empty()) << md;
  EXPECT_NE(time.find("too wide to compare"), std::string::npos) << time;
  EXPECT_NE(row(time, "checkpoint").find("spread cv 12%"), std::string::npos) << time;
  EXPECT_EQ(row(time, "streambp").find("spread"), std::string::npos) << time;
  const auto tokens = time.find("Tokens per second");
  ASSERT_NE(tokens, std::string::npos) << time;
  // 512 tokens over streambp's median 0.548 s.
  EXPECT_NE(time.find("| streambp | 934 |", tokens), std::string::npos) << time.substr(tokens);
}

// A peer beside a bpbench run: streambp's peak and time as ratios to the peer's at the same length.
TEST_F(Report, StreambpBesideEachPeerAsRatios) {
  const fs::path run = fs::path(BPBENCH_SOURCE_DIR) / "tests" / "fixtures" / "compare_time_a.json";
  json peer = load_results(run);
  json cell = peer["cells"][0];  // its checkpoint cell, as if a peer had measured it
  ASSERT_EQ(cell["axes"]["impl"], "checkpoint");
  cell["axes"]["impl"] = "hf-checkpoint";
  peer["cells"] = json::array({cell});
  peer["meta"]["peer"] = "a peer for the test";
  const fs::path peer_file = dir_ / "peer.json";
  std::ofstream(peer_file) << peer.dump();
  const json merged = load_merged_results({run, peer_file});
  const std::string md = render_report_markdown(merged, run.parent_path());
  const std::string peers = section(md, "bpbench streambp beside the peers");
  ASSERT_FALSE(peers.empty()) << md;
  const json mine = load_results(run)["cells"][1];
  ASSERT_EQ(mine["axes"]["impl"], "streambp");
  const double peak_ratio =
      mine["memory"]["peak_bytes"].get<double>() / cell["memory"]["peak_bytes"].get<double>();
  const double time_ratio = mine["time"]["median_s"].get<double>() / cell["time"]["median_s"].get<double>();
  const std::string line = row(peers, "hf-checkpoint");
  EXPECT_NE(line.find(fmt::format("| {:.2f} |", peak_ratio)), std::string::npos) << line;
  EXPECT_NE(line.rfind(fmt::format("| {:.2f} |", time_ratio)), std::string::npos) << line;
  // Without a peer, no such section.
  EXPECT_TRUE(section(render_report_markdown(load_results(run), run.parent_path()), "bpbench streambp beside")
                  .empty());
}

}  // namespace
}  // namespace bpbench::test_report
