// test_resume.cpp: `bpbench run --resume`. A run killed with SIGKILL mid-cell (and a max-length search killed
// mid-search) is resumed by the real binary and ends with the cells (and probes) of an uninterrupted run,
// none measured twice; a results file of another scenario, build or GPU is refused unless --resume-any;
// "error" cells run again. Also the world_size check that keeps NCCL from two ranks on one GPU.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/run/runner.h"
#include "harness/run/scenario.h"
#include "tests/support/test_support.h"

extern char** environ;

namespace bpbench::test_resume {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The parsed file, or null while it does not exist (or is being replaced).
json read_json(const fs::path& p) {
  try {
    return json::parse(testing::file_text(p));
  } catch (const std::exception&) {
    return nullptr;
  }
}

size_t count_matches(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<size_t>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

class Resume : public ::testing::Test {
 protected:
  // `bpbench run SCENARIO --out DIR EXTRA...` as a child of this process, stderr into DIR.log.
  pid_t start(const std::string& scenario, const fs::path& out, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {BPBENCH_BINARY, "run", scenario, "--out", out.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = out.string() + ".log";
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, BPBENCH_BINARY, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(rc, 0);
    return pid;
  }
  // The child's exit status (128 + signal when a signal ended it).
  static int wait_for(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  int run(const std::string& scenario, const fs::path& out, const std::vector<std::string>& extra = {}) {
    return wait_for(start(scenario, out, extra));
  }
  // Starts a run and SIGKILLs it the moment its results.json satisfies `ready` (checked every 5 ms).
  void run_and_kill(const std::string& scenario, const fs::path& out,
                    const std::function<bool(const json&)>& ready) {
    const pid_t pid = start(scenario, out);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    bool killed = false;
    while (std::chrono::steady_clock::now() < deadline) {
      const json doc = read_json(out / "results.json");
      if (!doc.is_null() && ready(doc)) {
        kill(pid, SIGKILL);
        killed = true;
        break;
      }
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) FAIL() << "the run ended before it could be killed";
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(killed) << "timed out waiting for the run to get that far";
    EXPECT_EQ(wait_for(pid), 128 + SIGKILL);
  }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }

  testing::TempDir tmp_;
  const fs::path& dir_ = tmp_.dir();
};

// Eight cells of a few hundred milliseconds each: a kill lands mid-cell.
const char* kGrid = R"({"name": "resume-grid", "seed": 1, "threads": 1,
  "grid": {"model": "tiny", "impl": ["plain", "checkpoint", "mst", "streambp"], "seq_len": [40, 72],
           "partition": 16, "logits_partition": 16},
  "measure": {"memory": true, "time": {"warmup": 1, "repeat": 2}, "grad_error": {"reference": "float64"}}})";

TEST_F(Resume, ARunKilledMidCellEndsWithTheCellsOfAnUninterruptedRunNoneMeasuredTwice) {
  const std::string scenario = write("grid.json", kGrid);
  ASSERT_EQ(run(scenario, dir_ / "whole"), 0);
  const json whole = read_json(dir_ / "whole" / "results.json");
  ASSERT_EQ(whole.at("cells").size(), 8u);

  run_and_kill(scenario, dir_ / "cut", [](const json& d) { return d.at("cells").size() >= 3; });
  const json cut = read_json(dir_ / "cut" / "results.json");
  ASSERT_FALSE(cut.at("complete").get<bool>());
  const size_t kept = cut.at("cells").size();
  ASSERT_GE(kept, 3u);
  ASSERT_LT(kept, 8u) << "the run finished before the kill";

  ASSERT_EQ(run(scenario, dir_ / "cut", {"--resume"}), 0);
  const json resumed = read_json(dir_ / "cut" / "results.json");
  const std::string log = testing::file_text(dir_ / "cut.log");
  EXPECT_TRUE(resumed.at("complete").get<bool>());
  EXPECT_NE(log.find(fmt::format("{} of 8 cells kept", kept)), std::string::npos) << log;
  EXPECT_EQ(count_matches(log, R"(\.\.\. kept: ok)"), kept) << log;
  EXPECT_EQ(count_matches(log, R"(\.\.\. ok [0-9.]+ MiB peak)"), 8 - kept) << log;  // ran only the rest
  ASSERT_EQ(resumed.at("cells").size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    SCOPED_TRACE(i);
    const json& a = whole.at("cells")[i];
    const json& b = resumed.at("cells")[i];
    EXPECT_EQ(a.at("axes"), b.at("axes"));  // grid order
    EXPECT_EQ(b.at("status"), "ok");
    EXPECT_EQ(a.at("loss"), b.at("loss"));
    EXPECT_EQ(a.at("memory").at("peak_bytes"), b.at("memory").at("peak_bytes"));
    EXPECT_EQ(a.at("grad_error").at("groups").at("all").at("rel_l2"),
              b.at("grad_error").at("groups").at("all").at("rel_l2"));
    if (i < kept) {
      EXPECT_EQ(b, cut.at("cells")[i]) << "a kept cell was measured again";
    }
  }
  const json& sittings = resumed.at("meta").at("resumed");
  ASSERT_EQ(sittings.size(), 1u);
  EXPECT_EQ(sittings[0].at("kept_cells"), kept);
  EXPECT_EQ(resumed.at("meta").at("start_time"), cut.at("meta").at("start_time"));

  // Resuming a complete file runs nothing and changes no cell.
  ASSERT_EQ(run(scenario, dir_ / "cut", {"--resume"}), 0);
  const json again = read_json(dir_ / "cut" / "results.json");
  EXPECT_EQ(again.at("cells"), resumed.at("cells"));
  EXPECT_EQ(count_matches(testing::file_text(dir_ / "cut.log"), R"(\.\.\. kept: ok)"), 8u);
}

// One search of several child probes: a kill lands between probes or in one.
const char* kSearch = R"({"name": "resume-search", "seed": 0, "threads": 1,
  "grid": {"model": "tiny", "impl": "streambp", "partition": 64, "logits_partition": 64},
  "measure": {"memory": true, "max_seq_len": {"budget_bytes": 1000000, "granularity": 64, "upper": 65536}}})";

TEST_F(Resume, AKilledMaxLengthSearchKeepsItsFinishedProbes) {
  const std::string scenario = write("search.json", kSearch);
  ASSERT_EQ(run(scenario, dir_ / "whole"), 0);
  const json whole = read_json(dir_ / "whole" / "results.json");
  const json& probes = whole.at("cells").at(0).at("probes");
  ASSERT_GE(probes.size(), 4u) << "the search needs a few probes for this test to mean something";

  // The finished probes of a search under way; the file also names the one running ("started").
  auto finished_probes = [](const json& d) {
    size_t n = 0;
    for (const auto& p : d.at("in_progress").at("probes")) n += p.at("status") != "started";
    return n;
  };
  run_and_kill(scenario, dir_ / "cut",
               [&](const json& d) { return d.contains("in_progress") && finished_probes(d) >= 2; });
  const json cut = read_json(dir_ / "cut" / "results.json");
  const size_t kept = finished_probes(cut);
  ASSERT_LT(kept, probes.size());
  EXPECT_EQ(cut.at("cells").size(), 0u);

  ASSERT_EQ(run(scenario, dir_ / "cut", {"--resume"}), 0);
  const json resumed = read_json(dir_ / "cut" / "results.json");
  const std::string log = testing::file_text(dir_ / "cut.log");
  EXPECT_FALSE(resumed.contains("in_progress"));
  const json& cell = resumed.at("cells").at(0);
  EXPECT_EQ(cell.at("max_seq_len"), whole.at("cells").at(0).at("max_seq_len"));
  ASSERT_EQ(cell.at("probes").size(), probes.size());
  for (size_t i = 0; i < probes.size(); ++i) {
    EXPECT_EQ(cell.at("probes")[i].at("seq_len"), probes[i].at("seq_len")) << i;
    EXPECT_EQ(cell.at("probes")[i].at("status"), probes[i].at("status")) << i;
    EXPECT_EQ(cell.at("probes")[i].at("peak_bytes"), probes[i].at("peak_bytes")) << i;
    if (i < kept) {
      EXPECT_EQ(cell.at("probes")[i], cut.at("in_progress").at("probes")[i]) << i;
    }
  }
  EXPECT_EQ(count_matches(log, R"(probe T=\d+: \w+[^\n]*\(kept\))"), kept) << log;
  EXPECT_EQ(count_matches(log, R"(probe T=\d+: )"), probes.size()) << log;  // the rest ran once each
}

// In process, for the refusals: the small kTiny grid of test_runner.cpp, one impl.
const char* kSmall = R"({"name": "resume-small", "seed": 3, "threads": 1,
  "grid": {"model": "tiny", "impl": ["plain", "streambp"], "seq_len": 21, "partition": 8},
  "measure": {"memory": true, "time": false, "grad_error": false}})";

RunSummary run_in_process(const std::string& scenario_json, const fs::path& out, ResumeMode mode) {
  RunOptions opt;
  opt.out_dir = out.string();
  opt.self_exe = BPBENCH_BINARY;
  opt.argv = {"test_resume"};
  opt.resume = mode;
  return run_scenario(parse_scenario_text(scenario_json, "test"), opt);
}

void expect_input_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST_F(Resume, RefusesAnotherBuildOrScenarioUnlessAskedAndRerunsErrors) {
  const fs::path out = dir_ / "out";
  run_in_process(kSmall, out, ResumeMode::off);
  const fs::path file = out / "results.json";
  json doc = read_json(file);
  ASSERT_EQ(doc.at("cells").size(), 2u);

  // Another build.
  json other = doc;
  other["meta"]["git_commit"] = "0123456789012345678901234567890123456789";
  std::ofstream(file) << other.dump();
  expect_input_error([&] { run_in_process(kSmall, out, ResumeMode::same); },
                     {"cannot resume", "another build", "git_commit", "--resume-any"});
  // Another scenario (the grid changed).
  std::ofstream(file) << doc.dump();
  std::string changed = kSmall;
  changed.replace(changed.find("\"seq_len\": 21"), 13, "\"seq_len\": [21, 23]");
  expect_input_error([&] { run_in_process(changed, out, ResumeMode::same); }, {"cannot resume", "scenario"});
  // ... kept anyway when asked: the two cells of length 21 stay, the two of 23 run.
  const RunSummary any = run_in_process(changed, out, ResumeMode::any);
  EXPECT_EQ(any.cells.size(), 4u);
  json after = read_json(file);
  EXPECT_EQ(after.at("cells")[0], doc.at("cells")[0]);
  EXPECT_EQ(after.at("cells")[1], doc.at("cells")[1]);  // grid order: seq_len before impl, impl fastest
  EXPECT_EQ(after.at("cells")[2].at("axes").at("seq_len"), 23);
  EXPECT_EQ(after.at("meta").at("resumed")[0].at("kept_cells"), 2);
  EXPECT_TRUE(after.at("meta").at("resumed")[0].contains("from"));

  // An "error" cell runs again; the "ok" one is kept.
  doc["cells"][1]["status"] = "error";
  doc["cells"][1]["reason"] = "a child died";
  std::ofstream(file) << doc.dump();
  run_in_process(kSmall, out, ResumeMode::same);
  after = read_json(file);
  EXPECT_EQ(after.at("cells")[0], doc.at("cells")[0]);
  EXPECT_EQ(after.at("cells")[1].at("status"), "ok");
  EXPECT_EQ(after.at("meta").at("resumed").back().at("kept_cells"), 1);

  // Not a results file; no file at all (everything runs).
  std::ofstream(file) << "{not json";
  expect_input_error([&] { run_in_process(kSmall, out, ResumeMode::same); },
                     {"cannot resume", "not valid JSON"});
  std::ofstream(file) << R"({"schema": "something else", "cells": []})";
  expect_input_error([&] { run_in_process(kSmall, out, ResumeMode::same); }, {"not a bpbench.results/1"});
  const RunSummary fresh = run_in_process(kSmall, dir_ / "new", ResumeMode::same);
  EXPECT_EQ(fresh.cells.size(), 2u);
  EXPECT_FALSE(read_json(dir_ / "new" / "results.json").at("meta").contains("resumed"));
}

// Results measured on another GPU model or memory size are refused like another build's; the same GPUs (in
// the order and with the details a driver reports) are accepted. And the meta of a CUDA run names them.
TEST_F(Resume, RefusesResultsOfAnotherGpuModelOrMemorySize) {
  const fs::path out = dir_ / "out";
  run_in_process(kSmall, out, ResumeMode::off);
  const fs::path file = out / "results.json";
  const json doc = read_json(file);
  const Scenario scenario = parse_scenario_text(kSmall, "test");
  const auto cells = scenario.expand();
  auto gpu = [](const std::string& name, int64_t bytes) {
    return json{{"index", 0}, {"name", name}, {"total_memory_bytes", bytes}, {"capability", "9.0"}};
  };
  json measured = doc;
  measured["meta"]["device"]["gpus"] = json::array({gpu("NVIDIA H100 80GB HBM3", 85045477376)});
  std::ofstream(file) << measured.dump();
  auto resume_on = [&](const json& gpus) {
    json now = doc.at("meta");
    now["device"]["gpus"] = gpus;
    return load_resume_state(file, scenario, cells, now, ResumeMode::same);
  };
  const auto same = resume_on(json::array({gpu("NVIDIA H100 80GB HBM3", 85045477376)}));
  ASSERT_TRUE(same);
  EXPECT_EQ(same->kept_cells.size(), 2u);
  expect_input_error([&] { resume_on(json::array({gpu("NVIDIA H200", 150754820096)})); },
                     {"cannot resume", "another build", "gpus", "NVIDIA H200", "--resume-any"});
  expect_input_error([&] { resume_on(json::array({gpu("NVIDIA H100 80GB HBM3", 99857989632)})); },
                     {"cannot resume", "gpus", "99857989632"});
  expect_input_error([&] { resume_on(nullptr); }, {"cannot resume", "gpus"});  // a CPU run's file
  EXPECT_TRUE(load_resume_state(file, scenario, cells, measured.at("meta"), ResumeMode::any));

  setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 1);
  const json cuda_meta = collect_meta(parse_scenario_text(R"({"device": "cuda", "grid": {"model": "tiny",
      "impl": "plain", "seq_len": 8}})",
                                                          "test"),
                                      {"test"}, 1, false);
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  ASSERT_TRUE(cuda_meta.at("device").at("gpus").is_array());  // [] here: no GPU; one record per GPU there
  EXPECT_EQ(cuda_meta.at("device").at("gpus").size(),
            static_cast<size_t>(cuda_meta.at("device").at("cuda_devices").get<int>()));
  EXPECT_EQ(cuda_meta.at("device").at("pytorch_cuda_alloc_conf"), "expandable_segments:True");
  EXPECT_FALSE(doc.at("meta").at("device").contains("gpus"));  // a CPU run names none
}

TEST(WorldSize, MoreRanksThanVisibleGpusOnCudaIsAnInputErrorNamingBothNumbers) {
  expect_input_error([] { check_world_size("cuda", 2, 1); },
                     {"world_size", "2 ranks", "1 is visible", "NCCL"});
  expect_input_error([] { check_world_size("cuda", 8, 4); }, {"8 ranks", "4 are visible"});
  EXPECT_NO_THROW(check_world_size("cuda", 2, 2));
  EXPECT_NO_THROW(check_world_size("cuda", 1, 1));
  EXPECT_NO_THROW(check_world_size("cuda", 4, 0));  // no GPU: its cells are skipped, as every CUDA cell
  EXPECT_NO_THROW(check_world_size("cpu", 8, 0));   // Gloo runs any number of ranks on one host
  // Under a launcher: the ranks it started on this machine, whatever the scenario's world_size.
  LaunchedRank launched;
  launched.launcher = "torchrun";
  launched.world = 16;
  launched.local_world = 8;
  expect_input_error(
      [&] { check_world_size("cuda", 16, 4, &launched); },
      {"torchrun started 8 ranks on this machine", "4 are visible", "at most 4 ranks a machine"});
  launched.local_world = 4;
  EXPECT_NO_THROW(check_world_size("cuda", 16, 4, &launched));
}

}  // namespace
}  // namespace bpbench::test_resume
