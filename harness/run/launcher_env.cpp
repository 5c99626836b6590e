// launcher_env.cpp: launcher_env.h.
#include "harness/run/launcher_env.h"

#include <cstdlib>

namespace bpbench {
namespace {

std::optional<int64_t> env_integer(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return *end == '\0' ? std::optional<int64_t>(n) : std::nullopt;
}

}  // namespace

std::optional<LaunchedRank> launched_rank() {
  struct Kind {
    const char *launcher, *rank, *world;
  };
  for (const Kind& k :
       {Kind{"torchrun", "RANK", "WORLD_SIZE"}, Kind{"srun", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"},
        Kind{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}}) {
    const auto rank = env_integer(k.rank), world = env_integer(k.world);
    if (rank && world && *world > 1)
      return LaunchedRank{*rank, *world, k.launcher, std::string(k.rank) + ", " + k.world};
  }
  return std::nullopt;
}

}  // namespace bpbench
