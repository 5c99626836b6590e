// runner.h: runs the cells of a scenario and records what each one measured.
//
// A cell: build the model and batch (unmeasured), pre-allocate gradients, warm up, then measure memory on the
// first measured run and time on every measured run of strategy->forward_backward, and finally compare the
// gradients with plain BP in float64 on the same weights and batch. Out-of-memory is a result (status "oom"),
// any other exception status "error"; neither stops the run. The runner never knows which strategy it runs.
//
// Isolation runs a cell by executing the bpbench binary again (`bpbench run-cell JOB.json`): a fresh process
// per cell gives every cell the same allocator state and survives a crash. Never a fork() without exec:
// libgomp's thread pool does not survive it.
#pragma once

#include <torch/torch.h>

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/model.h"
#include "harness/results.h"
#include "harness/scenario.h"

namespace bpbench {

// Everything one cell needs, self-contained so it can travel to a child process as JSON.
struct CellJob {
  Cell cell;
  RunSettings settings;  // threads resolved (>= 1)

  nlohmann::json to_json() const;
  static CellJob from_json(const nlohmann::json& j);  // throws InputError
};

// The one place a model is built by name (a later issue adds Hugging Face directories here).
Model load_model(const std::string& name, const torch::TensorOptions& options, uint64_t seed);
torch::ScalarType parse_dtype(const std::string& name);  // float32 | bfloat16 | float64; throws InputError
int64_t default_threads();                               // every core

// Runs the cell in this process. Never throws for a failure of the cell itself: that is in the status.
CellResult run_cell(const CellJob& job);
// Runs the cell in a child: `exe run-cell JOBFILE`, one JSON result on its stdout.
CellResult run_cell_isolated(const CellJob& job, const std::string& exe);

struct RunOptions {
  std::string out_dir;                      // results.json goes here
  std::optional<int64_t> threads;           // overrides the scenario's
  std::optional<bool> isolate;              // overrides the scenario's
  std::string self_exe = "/proc/self/exe";  // the bpbench binary, for isolated cells
  std::vector<std::string> argv;            // recorded in meta
  std::ostream* progress = nullptr;         // a line per cell (stderr in the CLI); null: silent
  std::ostream* table = nullptr;            // the final table (stdout in the CLI); null: none
};

struct RunSummary {
  std::vector<CellResult> cells;
  std::string results_path;
  size_t errors = 0;  // cells with status "error"
};

// Expands the grid, runs every cell, rewrites results.json after each. Throws InputError for a bad output
// dir.
RunSummary run_scenario(const Scenario& scenario, const RunOptions& options);

// The hidden `run-cell` subcommand: reads a CellJob from `job_path` ("-": stdin), prints one JSON result.
int run_cell_main(const std::string& job_path);

}  // namespace bpbench
