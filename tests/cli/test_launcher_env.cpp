// test_launcher_env.cpp: how bpbench knows it is one of a launcher's ranks (torchrun, srun, mpirun), and
// `bpbench run-cell JOB.json` per rank under the project's own torchrun (.venv). The grid over launched ranks
// is tests/run/test_grid_ranks.cpp.
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
                                         "LOCAL_RANK",
                                         "LOCAL_WORLD_SIZE",
                                         "MASTER_ADDR",
                                         "MASTER_PORT",
                                         "TORCHELASTIC_USE_AGENT_STORE",
                                         "TORCHELASTIC_RESTART_COUNT",
                                         "SLURM_LOCALID",
                                         "SLURM_STEP_TASKS_PER_NODE",
                                         "SLURM_RESTART_COUNT",
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
    const Env env({{"RANK", "5"},
                   {"WORLD_SIZE", "8"},
                   {"LOCAL_RANK", "1"},
                   {"LOCAL_WORLD_SIZE", "4"},
                   {"MASTER_ADDR", "node0"},
                   {"MASTER_PORT", "29400"},
                   {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                   {"TORCHELASTIC_RESTART_COUNT", "2"}});
    const auto r = launched_rank();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->local_rank, 1);
    EXPECT_EQ(r->local_world, 4);
    EXPECT_EQ(r->master_addr, "node0");
    EXPECT_EQ(r->master_port, 29400);
    EXPECT_TRUE(r->agent_store);
    EXPECT_EQ(r->restart, 2);
  }
  {
    const Env env({{"SLURM_PROCID", "1"},
                   {"SLURM_STEP_NUM_TASKS", "8"},
                   {"SLURM_LOCALID", "1"},
                   {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
                   {"SLURM_RESTART_COUNT", "1"}});
    const auto r = launched_rank();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->launcher, "srun");
    EXPECT_EQ(r->local_rank, 1);
    EXPECT_EQ(r->local_world, 4);
    EXPECT_FALSE(r->agent_store);  // rank 0 serves the grid's store
    EXPECT_EQ(r->restart, 1);      // a requeued job
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

// One cell by hand (docs/distributed.md, "Under torchrun"): `bpbench run-cell JOB.json`
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
