// test_maxlen_cell.cpp: a max-length cell as the runner searches it, with real child probes of the tiny
// model:
//   - offloaded checkpoints: the first probe is bounded by the host budget too, and a probe whose estimated
//     pinned checkpoints pass it is recorded as oom and not run;
//   - a probe whose process dies of SIGKILL (the OOM killer) is "killed" and brackets the search;
//   - before each probe's process starts the results file says so ("started", with its attempts), and a
//     resumed run does not start a probe a third time after two starts that never finished;
//   - a resumed run finishes the search under way first, with the host budget of its first sitting.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "harness/run/runner.h"
#include "harness/run/scenario.h"
#include "tests/support/test_support.h"

namespace bpbench::test_maxlen_cell {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

CellJob search_job(const std::string& measure, const std::string& grid_extra = "") {
  const Scenario s = parse_scenario_text(
      fmt::format(R"({{"threads": 1, "grid": {{"model": "tiny", "impl": "streambp", "partition": 32,
          "logits_partition": 32{}}}, "measure": {{"memory": true, "max_seq_len": {}}}}})",
                  grid_extra, measure),
      "test");
  CellJob job;
  job.cell = s.expand().at(0);
  job.settings = s.settings;
  job.settings.threads = 1;
  return job;
}

// A stand-in for the bpbench binary: a shell script that runs `action` (with $T the probe's length, read from
// its job file, the second argument) and then the real binary.
std::string stand_in(const testing::TempDir& tmp, const std::string& name, const std::string& action) {
  const std::string script = tmp.file(name);
  std::ofstream(script) << fmt::format(
      "#!/bin/sh\n"
      "T=$(grep -o '\"seq_len\":[0-9]*' \"$2\" | head -n 1 | cut -d: -f2)\n"
      "{}\n"
      "exec '{}' \"$@\"\n",
      action, BPBENCH_BINARY);
  EXPECT_EQ(chmod(script.c_str(), 0755), 0);
  return script;
}

// Dies of SIGKILL, as under the OOM killer, for a probe longer than `longest` tokens.
std::string dies_above(const testing::TempDir& tmp, int64_t longest) {
  return stand_in(tmp, "oom_killer.sh", fmt::format("[ \"$T\" -gt {} ] && kill -KILL $$", longest));
}

TEST(MaxLenCell, OffloadedProbesAreBoundedByTheHostBudget) {
  CellJob job = search_job(R"({"budget_bytes": 1000000000, "granularity": 64, "upper": 4096,
                               "host_budget_bytes": 1})",
                           R"(, "offload": "checkpoints")");
  // The host budget: exactly what the estimate puts in host memory at 512 tokens.
  Cell at512 = job.cell;
  at512.seq_len = 512;
  at512.partition = at512.logits_partition = 32;
  const auto e = estimate_cell(at512, 1, "cpu");
  ASSERT_TRUE(e && e->host_bytes > 0);
  job.settings.measure.max_seq_len->host_budget_bytes = e->host_bytes;  // (the scenario's 1 replaced)

  std::vector<Probe> started;
  const CellResult r =
      search_cell_max_seq_len(job, BPBENCH_BINARY, {[&](const Probe& p) { started.push_back(p); }, {}});
  ASSERT_EQ(r.status, "ok") << r.reason;
  ASSERT_TRUE(r.max_len);
  EXPECT_EQ(r.max_len->max_seq_len, 512);  // the device budget alone would allow all 4096
  EXPECT_EQ(r.max_len->host_budget_bytes, e->host_bytes);
  ASSERT_FALSE(r.max_len->probes.empty());
  EXPECT_LE(r.max_len->probes.front().seq_len, 512);  // the first probe is within the host budget
  bool refused_one = false;
  for (const Probe& p : r.max_len->probes) {
    if (p.seq_len <= 512) {
      EXPECT_EQ(p.status, "ok") << p.seq_len << ": " << p.reason;
    } else {
      EXPECT_EQ(p.status, "oom") << p.seq_len;
      EXPECT_NE(p.reason.find("not run"), std::string::npos) << p.reason;
      EXPECT_EQ(p.peak_bytes, 0);
      refused_one = true;
    }
  }
  EXPECT_TRUE(refused_one) << "the search never reached past the host budget";
  EXPECT_NE(r.reason.find("bounded by the host budget"), std::string::npos) << r.reason;
  // Only the probes that ran were started.
  for (const Probe& s : started) EXPECT_LE(s.seq_len, 512);
  EXPECT_EQ(static_cast<size_t>(std::count_if(r.max_len->probes.begin(), r.max_len->probes.end(),
                                              [](const Probe& p) { return p.status == "ok"; })),
            started.size());
}

TEST(MaxLenCell, AProbeKilledBySigkillBracketsTheSearch) {
  testing::TempDir tmp;
  const CellJob job = search_job(R"({"budget_bytes": 1000000000, "granularity": 64, "upper": 1024})");
  const CellResult r = search_cell_max_seq_len(job, dies_above(tmp, 256));
  ASSERT_EQ(r.status, "ok") << r.reason;
  EXPECT_EQ(r.max_len->max_seq_len, 256);
  EXPECT_FALSE(r.max_len->hit_upper);
  bool saw_killed = false;
  for (const Probe& p : r.max_len->probes) {
    EXPECT_EQ(p.status, p.seq_len > 256 ? "killed" : "ok") << p.seq_len << ": " << p.reason;
    saw_killed |= p.status == "killed";
  }
  EXPECT_TRUE(saw_killed);
  EXPECT_NE(r.reason.find("killed from outside"), std::string::npos) << r.reason;
}

TEST(MaxLenCell, ResumeCountsStartsAndStopsAfterTwo) {
  CellJob job = search_job(R"({"budget_bytes": 1000000000, "granularity": 64, "upper": 1024})");
  const CellResult whole = search_cell_max_seq_len(job, BPBENCH_BINARY);
  ASSERT_EQ(whole.status, "ok") << whole.reason;
  ASSERT_GE(whole.max_len->probes.size(), 1u);
  const int64_t first = whole.max_len->probes.front().seq_len;

  // The first probe was started twice and never finished: it is killed, not run, and brackets the search.
  std::vector<Probe> started;
  const CellResult twice =
      search_cell_max_seq_len(job, BPBENCH_BINARY, {[&](const Probe& p) { started.push_back(p); }, {}},
                              {Probe{first, "started", 0, "", 2}});
  ASSERT_EQ(twice.status, "ok") << twice.reason;
  EXPECT_EQ(twice.max_len->probes.front().seq_len, first);
  EXPECT_EQ(twice.max_len->probes.front().status, "killed");
  EXPECT_NE(twice.max_len->probes.front().reason.find("started 2 times"), std::string::npos);
  EXPECT_LT(twice.max_len->max_seq_len, first);
  for (const Probe& s : started) EXPECT_NE(s.seq_len, first);

  // Started once: it runs again, as its second attempt.
  started.clear();
  const CellResult once =
      search_cell_max_seq_len(job, BPBENCH_BINARY, {[&](const Probe& p) { started.push_back(p); }, {}},
                              {Probe{first, "started", 0, "", 1}});
  EXPECT_EQ(once.max_len->max_seq_len, whole.max_len->max_seq_len);
  ASSERT_FALSE(started.empty());
  EXPECT_EQ(started.front().seq_len, first);
  EXPECT_EQ(started.front().attempts, 2);
  EXPECT_EQ(once.max_len->probes.front().status, whole.max_len->probes.front().status);
}

// Through the runner and the file: a stand-in binary copies results.json as each probe starts, and the copy
// shows that probe "started", attempt 1; the finished file keeps no "started" record.
TEST(MaxLenCell, TheResultsFileSaysWhichProbeIsRunning) {
  testing::TempDir tmp;
  const std::string out = tmp.sub("out");
  const std::string script =
      stand_in(tmp, "snapshot.sh", fmt::format("cp '{0}/results.json' '{0}/seen-'$T.json", out));
  RunOptions opt;
  opt.out_dir = out;
  opt.self_exe = script;
  opt.argv = {"test"};
  const Scenario s = parse_scenario_text(
      R"({"threads": 1, "grid": {"model": "tiny", "impl": "streambp", "partition": 32, "logits_partition": 32},
          "measure": {"memory": true, "max_seq_len": {"budget_bytes": 1000000000, "granularity": 64,
                                                      "upper": 256}}})",
      "test");
  const RunSummary summary = run_scenario(s, opt);
  ASSERT_EQ(summary.cells.size(), 1u);
  ASSERT_TRUE(summary.cells[0].max_len);
  size_t seen = 0;
  for (const Probe& p : summary.cells[0].max_len->probes) {
    const json doc = json::parse(testing::file_text(fs::path(out) / fmt::format("seen-{}.json", p.seq_len)));
    const json& probes = doc.at("in_progress").at("probes");
    ASSERT_FALSE(probes.empty());
    EXPECT_EQ(probes.back().at("seq_len"), p.seq_len);
    EXPECT_EQ(probes.back().at("status"), "started");
    EXPECT_EQ(probes.back().at("attempts"), 1);
    ++seen;
  }
  EXPECT_GE(seen, 1u);
  const std::string final_text = testing::file_text(fs::path(out) / "results.json");
  EXPECT_EQ(final_text.find("\"started\""), std::string::npos);
}

RunSummary run_search(const std::string& scenario_json, const std::string& out, ResumeMode mode,
                      std::ostream* progress = nullptr) {
  RunOptions opt;
  opt.out_dir = out;
  opt.self_exe = BPBENCH_BINARY;
  opt.argv = {"test"};
  opt.resume = mode;
  opt.progress = progress;
  return run_scenario(parse_scenario_text(scenario_json, "test"), opt);
}

json read_results(const std::string& dir) {
  return json::parse(testing::file_text(fs::path(dir) / "results.json"));
}

void write_results(const std::string& dir, const json& doc) {
  std::ofstream(fs::path(dir) / "results.json") << doc.dump();
}

// Without host_budget_bytes, an offloaded search's host budget is the machine's available memory as the run
// first starts, kept in meta: a resumed sitting uses that figure, not what is available then.
TEST(MaxLenCell, TheDefaultHostBudgetIsFixedAtTheFirstSitting) {
  testing::TempDir tmp;
  const std::string scenario =
      R"({"threads": 1, "grid": {"model": "tiny", "impl": "streambp", "partition": 32,
      "logits_partition": 32, "offload": "checkpoints"},
      "measure": {"memory": true, "max_seq_len": {"budget_bytes": 1000000000, "granularity": 64, "upper": 256}}})";
  const std::string out = tmp.sub("out");
  run_search(scenario, out, ResumeMode::off);
  json doc = read_results(out);
  ASSERT_TRUE(doc.at("meta").at("host_budget_bytes").is_number_integer()) << doc.at("meta").dump();
  EXPECT_EQ(doc.at("cells")[0].at("search").at("host_budget_bytes"), doc.at("meta").at("host_budget_bytes"));

  // The file says the first sitting had room for 128 tokens' checkpoints only: the resumed search keeps that.
  Cell at128 = search_job(R"({"budget_bytes": 1000000000})", R"(, "offload": "checkpoints")").cell;
  at128.seq_len = 128;
  const int64_t host128 = estimate_cell(at128, 1, "cpu")->host_bytes;
  doc["meta"]["host_budget_bytes"] = host128;
  doc["cells"] = json::array();
  doc["complete"] = false;
  write_results(out, doc);
  const RunSummary resumed = run_search(scenario, out, ResumeMode::same);
  ASSERT_EQ(resumed.cells.size(), 1u);
  EXPECT_EQ(resumed.cells[0].max_len->host_budget_bytes, host128);
  EXPECT_EQ(resumed.cells[0].max_len->max_seq_len, 128);
}

// A resumed run finishes the search that was under way before any earlier cell that runs again, so the
// probes (and starts) it kept are not replaced in the file before they are used.
TEST(MaxLenCell, AResumedRunFinishesTheSearchUnderWayFirst) {
  testing::TempDir tmp;
  const std::string scenario = R"({"threads": 1, "grid": {"model": "tiny", "impl": ["checkpoint", "streambp"],
      "partition": 32, "logits_partition": 32},
      "measure": {"memory": true, "max_seq_len": {"budget_bytes": 1000000, "granularity": 64, "upper": 4096}}})";
  const std::string out = tmp.sub("out");
  const RunSummary whole = run_search(scenario, out, ResumeMode::off);
  ASSERT_EQ(whole.cells.size(), 2u);
  json doc = read_results(out);
  const json second = doc.at("cells")[1];
  ASSERT_GE(second.at("probes").size(), 2u);
  // Cell 0 failed; cell 1's search was under way with its first probe finished and its second started once.
  doc["cells"][0]["status"] = "error";
  doc["cells"][0]["reason"] = "a child died";
  doc["in_progress"] = {{"index", 1},
                        {"axes", second.at("axes")},
                        {"probes", json::array({second.at("probes")[0],
                                                {{"seq_len", second.at("probes")[1].at("seq_len")},
                                                 {"status", "started"},
                                                 {"peak_bytes", 0},
                                                 {"reason", ""},
                                                 {"attempts", 1}}})}};
  doc["cells"] = json::array({doc["cells"][0]});
  doc["complete"] = false;
  write_results(out, doc);
  std::ostringstream progress;
  const RunSummary resumed = run_search(scenario, out, ResumeMode::same, &progress);
  const std::string log = progress.str();
  EXPECT_LT(log.find("[2/2]"), log.find("[1/2]")) << log;
  EXPECT_NE(log.find("(kept)"), std::string::npos) << log;
  ASSERT_EQ(resumed.cells.size(), 2u);  // in grid order
  EXPECT_EQ(resumed.cells[0].cell.impl, "checkpoint");
  EXPECT_EQ(resumed.cells[0].max_len->max_seq_len, whole.cells[0].max_len->max_seq_len);
  EXPECT_EQ(resumed.cells[1].max_len->max_seq_len, whole.cells[1].max_len->max_seq_len);
  EXPECT_TRUE(read_results(out).at("complete").get<bool>());
}

}  // namespace
}  // namespace bpbench::test_maxlen_cell
