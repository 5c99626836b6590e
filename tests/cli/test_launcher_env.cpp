// test_launcher_env.cpp: `bpbench run` started by a launcher (torchrun, srun, mpirun) as one of several
// ranks. A grid over launched ranks is not built yet (issue 77), so every rank refuses at once, in one line,
// before any of them touches --out: against the project's own torchrun (.venv) too.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

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

}  // namespace
}  // namespace bpbench::test_launcher_env
