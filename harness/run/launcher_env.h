// launcher_env.h: whether this process is one of several that a launcher started (torchrun, srun, mpirun),
// read from the environment each sets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace bpbench {

struct LaunchedRank {
  int64_t rank = 0, world = 1;
  int64_t local_rank = 0;   // this rank's index on its machine: which GPU it takes
  int64_t local_world = 1;  // the ranks on this machine, which share its cores
  std::string launcher;     // "torchrun", "srun", "mpirun"
  std::string variables;    // the variables that said so, "RANK, WORLD_SIZE"
  // Where the ranks meet: MASTER_ADDR and MASTER_PORT (torchrun sets them; under srun or mpirun the job
  // script exports them). Empty and 0 when not set.
  std::string master_addr;
  int master_port = 0;
  // torchrun's agent already serves a c10d store at MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE):
  // every rank connects to it as a client. Otherwise rank 0 serves it.
  bool agent_store = false;
  // How many times the launcher started this job again: torchrun's TORCHELASTIC_RESTART_COUNT (after
  // --max-restarts), Slurm's SLURM_RESTART_COUNT (a requeued job). 0 on the first start.
  int64_t restart = 0;
};

// This process's rank where a launcher started more than one: torchrun's RANK and WORLD_SIZE (LOCAL_RANK),
// Slurm's SLURM_PROCID and SLURM_STEP_NUM_TASKS (SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE; an srun step's: a
// batch script's own shell has no step tasks), Open MPI's OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE
// (OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE); torchrun's LOCAL_RANK, LOCAL_WORLD_SIZE. nullopt
// for one process.
std::optional<LaunchedRank> launched_rank();

}  // namespace bpbench
