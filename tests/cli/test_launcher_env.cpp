// test_launcher_env.cpp: `bpbench run` started by a launcher (torchrun, srun, mpirun) as one of several
// ranks. A grid over launched ranks is not built yet (issue 77), so every rank refuses at once, in one line,
// before any of them touches --out: against the project's own torchrun (.venv) too. And what a launcher runs
// instead, `bpbench run-cell JOB.json` per rank, under that real torchrun.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "harness/run/dist_launch.h"
#include "harness/run/launcher_env.h"
#include "tests/support/test_support.h"

namespace bpbench::test_launcher_env {
namespace {

namespace fs = std::filesystem;
using testing::file_text;
using testing::TempDir;

// Sets the variables for the scope, unsetting every launcher's first.
class Env {
 public:
  Env(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* name : kAll) ::unsetenv(name);
    for (const auto& [name, value] : vars) ::setenv(name, value, 1);
  }
  ~Env() {
    for (const char* name : kAll) ::unsetenv(name);
  }

 private:
  static constexpr const char* kAll[] = {"RANK",
                                         "WORLD_SIZE",
                                         "SLURM_PROCID",
                                         "SLURM_NTASKS",
                                         "SLURM_STEP_NUM_TASKS",
                                         "OMPI_COMM_WORLD_RANK",
                                         "OMPI_COMM_WORLD_SIZE"};
};

TEST(LauncherEnv, ReadsEachLaunchersRankAndWorld) {
  {
    const Env env({{"RANK", "3"}, {"WORLD_SIZE", "4"}});
    const auto r = launched_rank();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->rank, 3);
    EXPECT_EQ(r->world, 4);
    EXPECT_EQ(r->launcher, "torchrun");
  }
  {
    const Env env({{"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "2"}});
    ASSERT_TRUE(launched_rank().has_value());
    EXPECT_EQ(launched_rank()->launcher, "srun");
  }
  {
    const Env env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "8"}});
    ASSERT_TRUE(launched_rank().has_value());
    EXPECT_EQ(launched_rank()->launcher, "mpirun");
  }
  {  // one process, or a Slurm batch script's own shell (tasks allocated, no step): not launched
    const Env env({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
    EXPECT_FALSE(launched_rank().has_value());
  }
  {
    const Env env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}});
    EXPECT_FALSE(launched_rank().has_value());
  }
}

// torchrun --nproc-per-node 2 --no-python bpbench run: both ranks exit 2 with the line, --out never made.
TEST(LauncherEnv, EveryRankUnderTorchrunRefusesBeforeTouchingOut) {
  const fs::path torchrun = fs::path(BPBENCH_SOURCE_DIR) / ".venv" / "bin" / "torchrun";
  ASSERT_TRUE(fs::exists(torchrun)) << torchrun << " (scripts/setup.sh installs torch into .venv)";
  TempDir tmp;
  const fs::path out = tmp.dir() / "out", log = tmp.dir() / "torchrun.log";
  const std::string cmd = fmt::format(
      "'{}' --nproc-per-node 2 --master-port 0 --no-python '{}' run '{}/scenarios/quickstart.json' --out "
      "'{}' "
      "> '{}' 2>&1",
      torchrun.string(), BPBENCH_BINARY, BPBENCH_SOURCE_DIR, out.string(), log.string());
  const Env clean({});
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const std::string text = file_text(log);
  for (const char* rank : {"rank 0 of 2", "rank 1 of 2"})
    EXPECT_NE(
        text.find(fmt::format("bpbench: error: run: started as {} by torchrun (RANK, WORLD_SIZE)", rank)),
        std::string::npos)
        << text;
  EXPECT_FALSE(fs::exists(out));
}

// What the docs give a launcher instead (docs/distributed.md, "Under torchrun"): `bpbench run-cell JOB.json`
// on every rank joins the group from torchrun's own environment (its agent's store: rank 0's TCPStore server
// yields to it) and prints its record; both ranks measure the cell, with one global loss.
TEST(LauncherEnv, RunCellUnderTorchrunJoinsTheGroupFromItsEnvironment) {
  const fs::path torchrun = fs::path(BPBENCH_SOURCE_DIR) / ".venv" / "bin" / "torchrun";
  ASSERT_TRUE(fs::exists(torchrun)) << torchrun;
  TempDir tmp;
  // Every grid key, as `bpbench run` writes its ranks' jobs.
  const nlohmann::json job = {{"axes",
                               {{"model", "tiny"},
                                {"impl", "streambp-dist"},
                                {"objective", "sft"},
                                {"seq_len", 48},
                                {"batch", 1},
                                {"dtype", "float32"},
                                {"partition", 16},
                                {"logits_partition", 16},
                                {"offload", "none"},
                                {"lora_rank", 0},
                                {"lora_alpha", 64},
                                {"group", 8},
                                {"prompt_len", -1},
                                {"padding", false},
                                {"beta", 0.1},
                                {"epsilon", 0.2},
                                {"ulysses_degree", 1}}},
                              {"device", "cpu"},
                              {"seed", 0},
                              {"threads", 1},
                              {"measure", {{"memory", true}}}};
  std::ofstream(tmp.file("job.json")) << job.dump();
  const fs::path log = tmp.dir() / "torchrun.log";
  const std::string cmd =
      fmt::format("'{}' --nproc-per-node 2 --master-port {} --no-python '{}' run-cell '{}' > '{}' 2>&1",
                  torchrun.string(), free_local_port(), BPBENCH_BINARY, tmp.file("job.json"), log.string());
  const Env clean({});
  ASSERT_EQ(std::system(cmd.c_str()), 0) << file_text(log);
  std::istringstream lines(file_text(log));
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("{\"axes\"", 0) == 0) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 2u) << file_text(log);
  for (const auto& r : records) {
    EXPECT_EQ(r["status"], "ok") << r["reason"];
    EXPECT_GT(r["memory"]["peak_bytes"].get<int64_t>(), 0);
  }
  EXPECT_EQ(records[0]["loss"], records[1]["loss"]);  // the global loss, all-reduced
}

}  // namespace
}  // namespace bpbench::test_launcher_env
