// grid_ranks.h: a scenario's grid run over the ranks a launcher started (torchrun, srun, mpirun).
//
// Every rank walks the same grid; rank 0 alone writes DIR. The ranks meet in the launcher's c10d store
// (grid_store.h), under a prefix that names the sitting.
// - Single-device cells are handed out one at a time: a rank takes the next from a shared counter when it
//   is free, so a node of 8 GPUs measures 8 cells at once. Each runs in its own process (`bpbench run-cell`),
//   which sees only its rank's GPU (CUDA_VISIBLE_DEVICES = the LOCAL_RANK-th visible one).
// - Then each distributed cell runs on all ranks at once: a barrier, then every rank starts its cell process
//   with torchrun's variables, and the cell's group meets in the same store under the cell's own prefix.
// - A rank sends rank 0 a "start" before each cell and its record after, with the files the cell wrote (its
//   timeline and trace), over the store. Rank 0 writes a placeholder when a cell starts (status error, its
//   reason saying where it runs, "interrupted": the sittings that stopped during it), and the record when it
//   comes. So a sitting that stops leaves every cell either finished or marked as running.
// Faults, and why the run ends rather than re-forming its group:
// - A cell's process that dies (SIGKILL from the OOM killer, a crash) is a record: the rank and its signal.
//   Of a distributed cell, rank 0 then tells the other ranks to stop theirs, and the grid goes on.
// - A cell's process that hangs: its peers' collectives fail within BPBENCH_DIST_TIMEOUT_S, rank 0 stops
//   the rest, and the cell is recorded with each rank's outcome.
// - A rank itself that dies or hangs (no sign of life within BPBENCH_GRID_TIMEOUT_S, by default
//   BPBENCH_DIST_TIMEOUT_S: every rank beats its counter in the store each half second): the ranks that wait
//   on it stop, rank 0 records the cells that were running as failed, and the sitting ends non-zero.
//   Distributed cells cannot run on fewer ranks, and the launcher is the one that forms groups again:
//   torchrun --max-restarts, or a requeued Slurm job, starts every rank anew. A restarted sitting
//   (TORCHELASTIC_RESTART_COUNT or SLURM_RESTART_COUNT > 0) resumes by itself: it keeps every finished
//   record, failures included, and runs the cells not finished, a cell that two sittings stopped during never
//   a third time.
#pragma once

#include <cstddef>
#include <functional>
#include <iosfwd>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/run/grid_store.h"
#include "harness/run/launcher_env.h"
#include "harness/run/runner.h"

namespace bpbench {

struct GridCell {
  size_t index = 0;          // in the grid
  CellJob job;               // timeline_dir: rank 0's DIR; another rank writes its files aside and sends them
  bool distributed = false;  // on every rank at once; else on one
  int64_t interrupted = 0;   // sittings that stopped during it so far

  nlohmann::json to_json() const;
  static GridCell from_json(const nlohmann::json& j);
};

// What rank 0 does with what the ranks report: the runner's results file and progress.
struct GridLeader {
  std::function<void(const GridCell&, const CellResult&)> started;   // the placeholder
  std::function<void(const GridCell&, const CellResult&)> finished;  // the record
  std::string dir;                                                   // where the ranks' files go (DIR)
};

class GridSession {
 public:
  // Joins the grid's store and starts this rank's sign of life. `device`: the scenario's (cuda: every
  // single-device cell's process sees only this rank's GPU).
  GridSession(const LaunchedRank& launched, const std::string& device);
  ~GridSession();
  GridSession(const GridSession&) = delete;
  GridSession& operator=(const GridSession&) = delete;

  const LaunchedRank& launched() const { return launched_; }

  // Rank 0, when the grid cannot start (DIR in use, a results file it cannot resume): the other ranks end
  // with this line rather than wait. Waits (bounded) until they have read it.
  void fail(const std::string& line);
  // Rank 0: publishes `cells` (the grid's cells to run), runs its share of them and collects every rank's
  // records into `leader` until all are in. Throws GridError when a rank stops answering; the cells that
  // were running are recorded as failed first.
  void lead(const std::vector<GridCell>& cells, const std::string& exe, GridLeader& leader);
  // Every other rank: reads the plan, runs its share, and returns when rank 0 has every record. Throws
  // GridError (rank 0 failed, or stopped answering) or the InputError of rank 0's fail().
  void follow(const std::string& exe, std::ostream* progress);

 private:
  struct Impl;
  LaunchedRank launched_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bpbench
