// launcher_env.cpp: launcher_env.h.
#include "harness/run/launcher_env.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace bpbench {
namespace {

std::optional<int64_t> env_integer(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return *end == '\0' ? std::optional<int64_t>(n) : std::nullopt;
}

std::string env_text(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace

std::optional<LaunchedRank> launched_rank() {
  struct Kind {
    const char *launcher, *rank, *world, *local_rank, *local_world;
  };
  for (const Kind& k :
       {Kind{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
        Kind{"srun", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"},
        Kind{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_SIZE"}}) {
    const auto rank = env_integer(k.rank), world = env_integer(k.world);
    if (!rank || !world || *world <= 1) continue;
    LaunchedRank r;
    r.rank = *rank;
    r.world = *world;
    r.local_rank = env_integer(k.local_rank).value_or(0);
    r.launcher = k.launcher;
    r.variables = std::string(k.rank) + ", " + k.world;
    // Slurm writes tasks per node as "4(x2),3": this node's count leads where every node has the same.
    r.local_world = std::max<int64_t>(1, std::strtoll(env_text(k.local_world).c_str(), nullptr, 10));
    r.master_addr = env_text("MASTER_ADDR");
    r.master_port = static_cast<int>(env_integer("MASTER_PORT").value_or(0));
    r.agent_store =
        k.launcher == std::string("torchrun") && env_text("TORCHELASTIC_USE_AGENT_STORE") == "True";
    r.restart =
        env_integer("TORCHELASTIC_RESTART_COUNT").value_or(env_integer("SLURM_RESTART_COUNT").value_or(0));
    return r;
  }
  return std::nullopt;
}

}  // namespace bpbench
