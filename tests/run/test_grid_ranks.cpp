// test_grid_ranks.cpp: `bpbench run` started by a launcher (harness/run/grid_ranks.h), against the project's
// own torchrun (.venv): two "nodes" of two ranks on 127.0.0.1 give the results of the same grid launched on
// one machine with world_size 4; a killed cell process and a killed rank under --max-restarts 1 leave every
// cell exactly once; a hung cell process is stopped within the timeout; srun's and mpirun's environments (no
// Slurm or MPI here: their variables, as those launchers set them) run the same grid; and what every rank
// refuses, in one line.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "harness/run/dist_launch.h"
#include "tests/support/test_support.h"

namespace bpbench::test_grid_ranks {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::file_text;
using testing::TempDir;

const fs::path& torchrun() {
  static const fs::path path = fs::path(BPBENCH_SOURCE_DIR) / ".venv" / "bin" / "torchrun";
  return path;
}

// Single-device cells (plain, streambp) and distributed ones (streambp-dist, ulysses) of the tiny model.
json grid_scenario(const std::string& name, int repeat, std::vector<int> lengths) {
  return {{"name", name},
          {"device", "cpu"},
          {"seed", 0},
          {"threads", 1},
          {"world_size", 4},
          {"grid",
           {{"model", "tiny"},
            {"impl", {"plain", "streambp", "streambp-dist", "ulysses"}},
            {"objective", "sft"},
            {"seq_len", lengths},
            {"batch", 1},
            {"dtype", "float32"},
            {"partition", 16},
            {"logits_partition", 16}}},
          {"measure",
           {{"memory", true},
            {"time", {{"warmup", 0}, {"repeat", repeat}}},
            {"grad_error", {{"reference", "float64"}}},
            {"timeline", true}}}};
}

std::string write_scenario(TempDir& tmp, const json& scenario) {
  const std::string path = tmp.file(scenario.at("name").get<std::string>() + ".json");
  std::ofstream(path) << scenario.dump(2);
  return path;
}

json read_results(const fs::path& dir) {
  return json::parse(file_text(dir / "results.json"));
}

// The launcher's variables are this test's to set: none of the test process's own may leak in.
const char* const kLauncherVariables[] = {"RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_RANK",
                                          "LOCAL_WORLD_SIZE",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "TORCHELASTIC_RESTART_COUNT",
                                          "SLURM_PROCID",
                                          "SLURM_STEP_NUM_TASKS",
                                          "OMPI_COMM_WORLD_RANK",
                                          "OMPI_COMM_WORLD_SIZE"};
std::string unset_launchers() {
  std::string s = "env";
  for (const char* v : kLauncherVariables) s += fmt::format(" -u {}", v);
  return s;
}

// Runs `script` with bash from a file (its $? and $rc are bash's, not std::system's shell's).
int run_script(const std::string& path, const std::string& script) {
  std::ofstream(path) << script << "\n";
  return std::system(fmt::format("bash '{}'", path).c_str());
}

// Two ranks as srun or mpirun starts them, each a process of its own: `bpbench run SCENARIO --out OUT` with
// `vars(r)` ("KEY=value ...") and MASTER_ADDR/PORT set, its output in LOG.r, rank 1 in the background and
// rank 0 in the foreground, `after` (bash) once rank 0 has exited. Returns rank 0's exit status.
int two_tasks(const std::function<std::string(int)>& vars, int port, const std::string& scenario,
              const fs::path& out, const std::string& log, const char* after = "wait") {
  std::string cmd;
  for (int r = 1; r >= 0; --r)
    cmd += fmt::format("{} {} MASTER_ADDR=127.0.0.1 MASTER_PORT={} '{}' run '{}' --out '{}' > '{}.{}' 2>&1{}",
                       unset_launchers(), vars(r), port, BPBENCH_BINARY, scenario, out.string(), log, r,
                       r > 0 ? " & " : fmt::format("; rc=$?; {}; exit $rc", after));
  return run_script(log + ".sh", cmd);
}

// torchrun NODES x PER_NODE ranks on 127.0.0.1 (a static rendezvous: node 0 serves the store), every node
// started here at once; returns node 0's exit status, its log in LOG.
int torchrun_nodes(int nodes, int per_node, const std::string& scenario, const fs::path& out,
                   const fs::path& log, const std::string& extra = "", int port = free_local_port()) {
  std::string cmd;
  for (int node = nodes - 1; node >= 0; --node)
    cmd += fmt::format(
        "{} '{}' --nnodes {} --node-rank {} --nproc-per-node {} --master-addr 127.0.0.1 --master-port {} {} "
        "--no-python '{}' run '{}' --out '{}' > '{}.node{}' 2>&1{}",
        unset_launchers(), torchrun().string(), nodes, node, per_node, port, extra, BPBENCH_BINARY, scenario,
        out.string(), log.string(), node, node > 0 ? " & " : "; rc=$?; wait; exit $rc");
  return run_script(log.string() + ".sh", cmd);
}

void expect_same_measurements(const json& local, const json& launched) {
  ASSERT_EQ(local["cells"].size(), launched["cells"].size());
  for (size_t i = 0; i < local["cells"].size(); ++i) {
    const json &a = local["cells"][i], &b = launched["cells"][i];
    SCOPED_TRACE(a["axes"].dump());
    ASSERT_EQ(a["axes"], b["axes"]);
    ASSERT_EQ(b["status"], "ok") << b["reason"];
    EXPECT_EQ(a["memory"]["peak_bytes"], b["memory"]["peak_bytes"]);
    EXPECT_EQ(a["memory"]["base_bytes"], b["memory"]["base_bytes"]);
    EXPECT_EQ(a["loss"], b["loss"]);
    EXPECT_EQ(a["grad_error"], b["grad_error"]);
    if (a.contains("ranks")) {
      ASSERT_EQ(a["ranks"].size(), 4u);
      for (size_t r = 0; r < 4; ++r) {
        EXPECT_EQ(a["ranks"][r]["peak_bytes"], b["ranks"][r]["peak_bytes"]);
        EXPECT_EQ(b["ranks"][r]["device"], "cpu");
      }
      EXPECT_FALSE(b.contains("measured_by"));
    } else {  // a single-device cell: which rank measured it
      ASSERT_TRUE(b.contains("measured_by")) << b.dump();
      EXPECT_GE(b["measured_by"]["rank"].get<int>(), 0);
      EXPECT_LT(b["measured_by"]["rank"].get<int>(), 4);
      EXPECT_EQ(b["measured_by"]["device"], "cpu");
    }
    // Every timeline is in rank 0's DIR, another rank's sent there over the store.
    if (b["memory"].contains("timeline_file"))
      EXPECT_TRUE(fs::exists(fs::path(launched["_dir"].get<std::string>()) /
                             b["memory"]["timeline_file"].get<std::string>()));
  }
}

TEST(GridRanks, TwoNodesOfTwoRanksGiveTheResultsOfTheLocalWorldSizeFourRun) {
  ASSERT_TRUE(fs::exists(torchrun())) << torchrun() << " (scripts/setup.sh installs torch into .venv)";
  TempDir tmp;
  const std::string scenario = write_scenario(tmp, grid_scenario("grid", 1, {32, 48}));
  const fs::path local = tmp.dir() / "local", launched = tmp.dir() / "launched", log = tmp.dir() / "log";
  ASSERT_EQ(std::system(fmt::format("{} '{}' run --quiet '{}' --out '{}' > '{}.local' 2>&1",
                                    unset_launchers(), BPBENCH_BINARY, scenario, local.string(), log.string())
                            .c_str()),
            0)
      << file_text(log.string() + ".local");
  ASSERT_EQ(torchrun_nodes(2, 2, scenario, launched, log), 0)
      << file_text(log.string() + ".node0") << file_text(log.string() + ".node1");
  json b = read_results(launched);
  b["_dir"] = launched.string();
  expect_same_measurements(read_results(local), b);
  // The timelines of both runs hold the same files, whichever rank wrote them.
  std::vector<std::string> local_files, launched_files;
  for (const auto& e : fs::directory_iterator(local / "timelines"))
    local_files.push_back(e.path().filename());
  for (const auto& e : fs::directory_iterator(launched / "timelines"))
    launched_files.push_back(e.path().filename());
  std::sort(local_files.begin(), local_files.end());
  std::sort(launched_files.begin(), launched_files.end());
  EXPECT_EQ(local_files, launched_files);
  EXPECT_EQ(std::system(
                fmt::format("'{}' validate '{}/results.json' > /dev/null", BPBENCH_BINARY, launched.string())
                    .c_str()),
            0);
}

// The processes of this machine: pid, argv[1], environment.
struct Proc {
  int pid = 0;
  std::string command;
  std::map<std::string, std::string> env;
};
std::vector<Proc> processes() {
  std::vector<Proc> all;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    Proc p;
    p.pid = std::stoi(name);
    std::ifstream cmdline(e.path() / "cmdline"), environ(e.path() / "environ");
    std::string arg;
    std::getline(cmdline, arg, '\0');
    if (arg != BPBENCH_BINARY || !std::getline(cmdline, p.command, '\0')) continue;
    for (std::string kv; std::getline(environ, kv, '\0');)
      if (auto eq = kv.find('='); eq != std::string::npos) p.env[kv.substr(0, eq)] = kv.substr(eq + 1);
    all.push_back(std::move(p));
  }
  return all;
}

// Waits (up to 120 s) for a process of this binary with `command` on rank `rank` of this test's run (its
// MASTER_PORT: other tests run beside it) in the first sitting, that `also` accepts, and sends it `sig`.
// Returns its pid, 0 when none came.
int signal_when_seen(const std::string& command, const std::string& rank, int port, int sig,
                     bool (*also)(const Proc&), std::atomic<bool>& give_up) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto is = [](const Proc& p, const char* key, const std::string& value) {
    return p.env.count(key) && p.env.at(key) == value;
  };
  while (!give_up && std::chrono::steady_clock::now() < until) {
    for (const Proc& p : processes())
      if (p.command == command && is(p, "RANK", rank) && is(p, "MASTER_PORT", std::to_string(port)) &&
          is(p, "TORCHELASTIC_RESTART_COUNT", "0") && also(p)) {
        ::kill(p.pid, sig);
        return p.pid;
      }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

int parent_of(int pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(stat)), {});
  const size_t close = text.rfind(')');  // pid (comm) state ppid ...
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 2));
  std::string state;
  int ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

bool distributed_cell(const Proc& p) {
  return p.env.count("BPBENCH_DIST_STORE_PREFIX") > 0;
}
bool any_process(const Proc&) {
  return true;
}

// Whether DIR/results.json (rewritten atomically) holds a finished record of a killed cell.
bool failure_recorded(const fs::path& out) {
  try {
    const json results = read_results(out);
    for (const auto& c : results["cells"])
      if (c["status"] == "error" && !c.contains("interrupted") &&
          c.value("reason", std::string()).find("killed by signal 9") != std::string::npos)
        return true;
  } catch (const std::exception&) {  // not written yet
  }
  return false;
}

// A distributed cell's process of rank 1 is killed (SIGKILL, as the OOM killer does), later rank 1 itself:
// the first is a record naming the rank and the signal, the second ends the sitting, and torchrun's restart
// resumes it. Every cell is in the file exactly once, measured or failed with why.
TEST(GridRanks, AKilledCellProcessAndAKilledRankLeaveEveryCellOnceUnderMaxRestarts) {
  ASSERT_TRUE(fs::exists(torchrun())) << torchrun();
  TempDir tmp;
  const std::string scenario = write_scenario(tmp, grid_scenario("faults", 5, {64, 96, 128}));
  const fs::path out = tmp.dir() / "out", log = tmp.dir() / "log";
  const int port = free_local_port();
  std::atomic<bool> give_up{false};
  int killed_cell = 0, killed_rank = 0;
  std::thread killer([&] {
    killed_cell = signal_when_seen("run-cell", "1", port, SIGKILL, distributed_cell, give_up);
    // Rank 1 itself once the killed cell is on record (before, the restart would run that cell again).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!give_up && std::chrono::steady_clock::now() < until && !failure_recorded(out))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    killed_rank = signal_when_seen("run", "1", port, SIGKILL, any_process, give_up);
  });
  const int rc = torchrun_nodes(1, 4, scenario, out, log, "--max-restarts 1", port);
  give_up = true;
  killer.join();
  const std::string text = file_text(log.string() + ".node0");
  ASSERT_EQ(rc, 0) << text;
  ASSERT_GT(killed_cell, 0) << text;
  ASSERT_GT(killed_rank, 0) << text;
  const json results = read_results(out);
  ASSERT_EQ(results["cells"].size(), 12u);
  std::set<std::string> axes;
  int failed = 0;
  for (const auto& c : results["cells"]) {
    EXPECT_TRUE(axes.insert(c["axes"].dump()).second) << "twice: " << c["axes"];
    EXPECT_FALSE(c.contains("interrupted")) << c.dump();
    if (c["status"] == "ok") continue;
    ++failed;
    EXPECT_EQ(c["status"], "error");
    const std::string reason = c["reason"];
    EXPECT_NE(reason.find(fmt::format("rank 1 (pid {})", killed_cell)), std::string::npos) << reason;
    EXPECT_NE(reason.find("killed by signal 9"), std::string::npos) << reason;
  }
  EXPECT_EQ(failed, 1) << results.dump(1);
  ASSERT_TRUE(results["meta"].contains("resumed")) << text;
  EXPECT_EQ(results["meta"]["resumed"].size(), 1u);
  EXPECT_NE(text.find("(restart 1 by torchrun)"), std::string::npos) << text;
}

// A distributed cell's process that hangs (SIGSTOP): the other ranks' collectives give up after
// BPBENCH_DIST_TIMEOUT_S, rank 0 stops the rest, and the grid goes on.
TEST(GridRanks, AHungCellProcessIsStoppedWithinTheTimeout) {
  ASSERT_TRUE(fs::exists(torchrun())) << torchrun();
  TempDir tmp;
  json s = grid_scenario("hang", 30, {64});
  s["world_size"] = 2;
  s["grid"]["impl"] = {"streambp-dist", "streambp"};
  const std::string scenario = write_scenario(tmp, s);
  const fs::path out = tmp.dir() / "out", log = tmp.dir() / "log";
  const int port = free_local_port();
  std::atomic<bool> give_up{false};
  int stopped = 0;
  std::thread stopper(
      [&] { stopped = signal_when_seen("run-cell", "1", port, SIGSTOP, distributed_cell, give_up); });
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = std::system(
      fmt::format(
          "{} BPBENCH_DIST_TIMEOUT_S=4 BPBENCH_GRID_TIMEOUT_S=60 '{}' --nproc-per-node 2 --master-addr "
          "127.0.0.1 --master-port {} --no-python '{}' run '{}' --out '{}' > '{}' "
          "2>&1",
          unset_launchers(), torchrun().string(), port, BPBENCH_BINARY, scenario, out.string(), log.string())
          .c_str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  give_up = true;
  stopper.join();
  if (stopped > 0) ::kill(stopped, SIGKILL);  // its rank kills it; never leave a stopped process behind
  ASSERT_GT(stopped, 0) << file_text(log);
  EXPECT_EQ(rc, 0) << file_text(log);
  EXPECT_LT(seconds, 60) << "the timeout is 4 s";
  const json results = read_results(out);
  ASSERT_EQ(results["cells"].size(), 2u);
  const json& dist = results["cells"][0];
  EXPECT_EQ(dist["status"], "error") << dist.dump();
  EXPECT_EQ(dist["ranks"][1]["status"], "error") << dist.dump();
  EXPECT_EQ(results["cells"][1]["status"], "ok") << results["cells"][1].dump();
}

// The grid process of srun's task 1 (SLURM_PROCID) that stops answering (SIGSTOP) while a distributed cell
// runs: rank 0 notices within BPBENCH_GRID_TIMEOUT_S (the cell's own collectives wait their 60 s), records
// the cell as stopped during, and the sitting ends non-zero. The job requeued (SLURM_RESTART_COUNT=1, the
// same argv) resumes by itself: every cell once, the interrupted one measured.
TEST(GridRanks, AStoppedRankEndsTheSittingAndTheRequeuedJobFinishesIt) {
  TempDir tmp;
  json s = grid_scenario("requeue", 20, {64, 96});
  s["world_size"] = 2;
  s["grid"]["impl"] = {"streambp", "streambp-dist"};
  const std::string scenario = write_scenario(tmp, s);
  const fs::path out = tmp.dir() / "out", log = tmp.dir() / "log";
  const int port = free_local_port();
  auto sitting = [&](int restart) {
    auto vars = [&](int r) {
      return fmt::format(
          "SLURM_PROCID={} SLURM_STEP_NUM_TASKS=2 SLURM_LOCALID={} SLURM_RESTART_COUNT={} "
          "BPBENCH_GRID_TIMEOUT_S=3",
          r, r, restart);
    };
    return two_tasks(vars, port + restart, scenario, out, fmt::format("{}.{}", log.string(), restart),
                     "kill -9 %1");
  };
  std::atomic<bool> give_up{false};
  int stopped = 0;
  std::thread stopper([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!give_up && !stopped && std::chrono::steady_clock::now() < until) {
      int cell_parent = 0;
      for (const Proc& p : processes())  // task 1's distributed cell process: stop its parent, the rank
        if (p.command == "run-cell" && distributed_cell(p) && p.env.count("SLURM_PROCID") &&
            p.env.at("SLURM_PROCID") == "1" && p.env.count("MASTER_PORT") &&
            p.env.at("MASTER_PORT") == std::to_string(port))
          cell_parent = parent_of(p.pid);
      if (cell_parent > 0 && ::kill(cell_parent, SIGSTOP) == 0) stopped = cell_parent;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  const int first = sitting(0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  give_up = true;
  stopper.join();
  const std::string rank0 = file_text(log.string() + ".0.0");
  ASSERT_GT(stopped, 0) << rank0;
  EXPECT_NE(first, 0) << rank0;
  EXPECT_LT(seconds, 60) << rank0;
  EXPECT_NE(rank0.find("rank 1 stopped answering"), std::string::npos) << rank0;
  bool marked = false;
  for (const auto& c : read_results(out)["cells"].get<std::vector<json>>())
    marked = marked || (c.value("interrupted", 0) == 1 &&
                        c.value("reason", std::string()).find("the grid stopped during this cell") == 0);
  EXPECT_TRUE(marked) << file_text(out / "results.json");

  ASSERT_EQ(sitting(1), 0) << file_text(log.string() + ".1.0");
  const json results = read_results(out);
  ASSERT_EQ(results["cells"].size(), 4u);
  std::set<std::string> axes;
  for (const auto& c : results["cells"]) {
    EXPECT_TRUE(axes.insert(c["axes"].dump()).second) << "twice: " << c["axes"];
    EXPECT_EQ(c["status"], "ok") << c.dump();
  }
  EXPECT_NE(file_text(log.string() + ".1.0").find("(restart 1 by srun)"), std::string::npos);
}

// A single-device cell's process is bounded like a distributed cell's (BPBENCH_DIST_LAUNCH_TIMEOUT_S): past
// it the process is killed and the cell recorded with why, so that no rank of a grid waits on it for ever.
TEST(GridRanks, ACellProcessPastTheLaunchTimeoutIsKilledAndRecorded) {
  TempDir tmp;
  json s = grid_scenario("slow_cell", 200, {256});
  s.erase("world_size");
  s["isolate"] = true;
  s["grid"]["impl"] = "plain";
  s["grid"]["model"] = "small";
  const std::string scenario = write_scenario(tmp, s);
  const fs::path out = tmp.dir() / "out";
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = std::system(
      fmt::format("{} BPBENCH_DIST_LAUNCH_TIMEOUT_S=1 '{}' run --quiet '{}' --out '{}' > /dev/null "
                  "2>&1",
                  unset_launchers(), BPBENCH_BINARY, scenario, out.string())
          .c_str());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30);
  EXPECT_NE(rc, 0);  // one machine: a failed cell fails the run
  const json cell = read_results(out)["cells"].at(0);
  EXPECT_EQ(cell["status"], "error");
  const std::string reason = cell["reason"];
  EXPECT_NE(reason.find("killed by signal 9 (Killed) after "), std::string::npos) << reason;
  EXPECT_NE(reason.find(" s (BPBENCH_DIST_LAUNCH_TIMEOUT_S)"), std::string::npos) << reason;
}

// srun and mpirun, one task per rank, with the variables each sets (and MASTER_ADDR/PORT, which a job script
// exports): the grid runs over them as under torchrun.
TEST(GridRanks, SrunAndMpirunEnvironmentsRunTheGrid) {
  TempDir tmp;
  json s = grid_scenario("launchers", 1, {32});
  s["world_size"] = 2;
  s["grid"]["impl"] = {"streambp-dist", "streambp", "plain"};
  const std::string scenario = write_scenario(tmp, s);
  struct Launcher {
    const char *name, *rank, *world, *local_rank;
  };
  for (const Launcher& l :
       {Launcher{"srun", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID"},
        Launcher{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"}}) {
    SCOPED_TRACE(l.name);
    const fs::path out = tmp.dir() / l.name, log = tmp.dir() / (std::string(l.name) + ".log");
    auto vars = [&](int r) { return fmt::format("{}={} {}=2 {}={}", l.rank, r, l.world, l.local_rank, r); };
    ASSERT_EQ(two_tasks(vars, free_local_port(), scenario, out, log.string()), 0)
        << file_text(log.string() + ".0") << file_text(log.string() + ".1");
    const json results = read_results(out);
    ASSERT_EQ(results["cells"].size(), 3u);
    for (const auto& c : results["cells"]) EXPECT_EQ(c["status"], "ok") << c.dump();
    EXPECT_EQ(results["cells"][0]["ranks"].size(), 2u);
    EXPECT_NE(file_text(log.string() + ".1").find(fmt::format("rank 1 of 2")), std::string::npos);
  }
}

std::vector<std::string> error_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("bpbench: error: ", 0) == 0) lines.push_back(line);
  return lines;
}

// What every rank refuses, each in one line: a scenario world_size that is not the launcher's, and (from
// rank 0, which alone looks at DIR) a results.json already there, which rank 0 sends the other ranks. As srun
// starts them, each task lives on its own and both lines are there; torchrun stops the other workers once
// one fails, so some of the lines may not be printed, and those that are are the same line.
TEST(GridRanks, EveryRankEndsWithOneLineWhenTheGridCannotStart) {
  ASSERT_TRUE(fs::exists(torchrun())) << torchrun();
  TempDir tmp;
  json s = grid_scenario("mismatched", 1, {32});
  s["world_size"] = 3;
  const std::string mismatched = write_scenario(tmp, s);
  s["world_size"] = 2;
  s["name"] = "fine";
  const std::string fine = write_scenario(tmp, s);
  const fs::path out = tmp.dir() / "out", log = tmp.dir() / "log";
  auto srun_tasks = [&](const std::string& scenario) {
    auto vars = [](int r) { return fmt::format("SLURM_PROCID={} SLURM_STEP_NUM_TASKS=2", r); };
    const int rc = two_tasks(vars, free_local_port(), scenario, out, log.string());
    return std::make_pair(rc, error_lines(file_text(log.string() + ".0") + file_text(log.string() + ".1")));
  };
  auto torchrun_ranks = [&](const std::string& scenario) {
    const int rc = std::system(
        fmt::format(
            "{} '{}' --nproc-per-node 2 --master-port {} --no-python '{}' run '{}' --out '{}' > '{}' 2>&1",
            unset_launchers(), torchrun().string(), free_local_port(), BPBENCH_BINARY, scenario, out.string(),
            log.string())
            .c_str());
    return std::make_pair(rc, error_lines(file_text(log)));
  };
  auto world_line = [](const char* launcher, const char* variables) {
    return fmt::format(
        "bpbench: error: world_size: the scenario runs its distributed cells on 3 ranks; {} started 2 ({}) "
        "(valid: world_size 2, or none (a grid under a launcher takes its ranks))",
        launcher, variables);
  };
  auto [rc, lines] = srun_tasks(mismatched);
  EXPECT_NE(rc, 0);
  EXPECT_EQ(lines, std::vector<std::string>(2, world_line("srun", "SLURM_PROCID, SLURM_STEP_NUM_TASKS")));
  std::tie(rc, lines) = torchrun_ranks(mismatched);
  EXPECT_NE(rc, 0);
  ASSERT_FALSE(lines.empty()) << file_text(log);
  for (const auto& line : lines) EXPECT_EQ(line, world_line("torchrun", "RANK, WORLD_SIZE"));
  EXPECT_FALSE(fs::exists(out));

  fs::create_directories(out);
  std::ofstream(out / "results.json") << "{}";
  std::tie(rc, lines) = srun_tasks(fine);
  EXPECT_NE(rc, 0);
  ASSERT_EQ(lines.size(), 2u) << file_text(log.string() + ".0") << file_text(log.string() + ".1");
  EXPECT_EQ(lines[0], lines[1]);  // rank 0's line, and rank 1's copy of it
  EXPECT_NE(lines[0].find("already holds results"), std::string::npos) << lines[0];
  std::tie(rc, lines) = torchrun_ranks(fine);
  EXPECT_NE(rc, 0);
  ASSERT_FALSE(lines.empty()) << file_text(log);
  for (const auto& line : lines) EXPECT_NE(line.find("already holds results"), std::string::npos) << line;
  EXPECT_EQ(file_text(out / "results.json"), "{}");
}

}  // namespace
}  // namespace bpbench::test_grid_ranks
