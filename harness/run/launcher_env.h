// launcher_env.h: whether this process is one of several that a launcher started (torchrun, srun, mpirun),
// read from the environment each sets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace bpbench {

struct LaunchedRank {
  int64_t rank = 0, world = 1;
  std::string launcher;   // "torchrun", "srun", "mpirun"
  std::string variables;  // the variables that said so, "RANK, WORLD_SIZE"
};

// This process's rank where a launcher started more than one: torchrun's RANK and WORLD_SIZE, Slurm's
// SLURM_PROCID and SLURM_STEP_NUM_TASKS (an srun step's; a batch script's own shell has no step tasks),
// Open MPI's OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE. nullopt for one process.
std::optional<LaunchedRank> launched_rank();

}  // namespace bpbench
