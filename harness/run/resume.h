// resume.h: what `bpbench run --resume` keeps of an earlier sitting's DIR/results.json.
//
// A run rewrites results.json after every cell and every max-length probe, so a run killed at any moment
// leaves a file whose cells are all finished. Resuming keeps the cells of the same grid that finished with
// status "ok" or "oom" (they are measured, and measuring them again would give the same answer at the cost
// of the time they took) and the probes of the search that was under way (finished, or started and never
// finished: harness/run/maxlen_cell.cpp counts those starts); "error" and "skipped"
// cells run again (an error may have been a dead child or a fault since fixed; a skip costs nothing and may
// not apply on this machine). The file must come from the same scenario and the same build: bpbench
// version, git commit, LibTorch, compiler and CUDA build with its driver, and the same GPUs (model name and
// memory size of each, meta.device.gpus), so that no table mixes cells of two programs or two GPUs.
// `--resume-any` keeps the matching cells of any results file.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/run/maxlen.h"
#include "harness/run/scenario.h"

namespace bpbench {

enum class ResumeMode {
  off,   // a fresh results.json
  same,  // keep the finished cells of the same scenario and build; refuse any other file
  any,   // keep the finished cells whose axes are in this grid, whoever wrote the file
};

struct ResumeState {
  nlohmann::json meta;                          // the earlier meta, this sitting added to "resumed"
  std::map<size_t, nlohmann::json> kept_cells;  // grid index -> the record as written
  std::optional<size_t> search_index;           // the max-length search that was under way
  std::vector<Probe> search_probes;             // its probes: finished ("ok", "oom", "killed") or "started"
  size_t rerun_cells = 0;                       // records of this grid that run again
  // Cells that earlier sittings stopped during (a grid over launched ranks marks a running cell so,
  // grid_ranks.h): grid index -> how many sittings.
  std::map<size_t, int64_t> interrupted;
};

// The part of a results file's meta that names the program that wrote it (see the header comment).
nlohmann::json build_identity(const nlohmann::json& meta);

// Reads `results_path` for a resumed run of `scenario` (whose grid is `cells`); `meta` is this sitting's
// (collect_meta). `restarted`: the launcher started the job again (a torchrun restart, a requeued Slurm job):
// every finished record is kept, failures included, so that no cell runs twice; a cell that one sitting
// stopped during runs again, one that two sittings stopped during is kept as the failure it is. Nullopt when
// there is no file: the run starts fresh. Throws InputError for a file that is not a results file, or (mode
// same) one of another scenario or build, naming the difference.
std::optional<ResumeState> load_resume_state(const std::filesystem::path& results_path,
                                             const Scenario& scenario, const std::vector<Cell>& cells,
                                             const nlohmann::json& meta, ResumeMode mode,
                                             bool restarted = false);

}  // namespace bpbench
