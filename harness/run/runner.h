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

#include <functional>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/estimate/estimate.h"
#include "harness/model/model.h"
#include "harness/run/launcher_env.h"
#include "harness/run/maxlen.h"
#include "harness/run/results.h"
#include "harness/run/resume.h"
#include "harness/run/scenario.h"

namespace bpbench {

// Everything one cell needs, self-contained so it can travel to a child process as JSON.
struct CellJob {
  Cell cell;
  RunSettings settings;  // threads resolved (>= 1)
  // With measure.timeline: the timeline goes to DIR/NAME.json and its Chrome trace to DIR/NAME.trace.json
  // (NAME relative to DIR, which holds results.json). Empty: the timeline is not written.
  std::string timeline_dir, timeline_name;
  // A rank of a distributed cell writes its result here (the launcher collects every rank's); empty: stdout.
  std::string result_file;

  nlohmann::json to_json() const;
  static CellJob from_json(const nlohmann::json& j);  // throws InputError
};

// The one place a model is built by name: a preset (random weights from `seed`) or a Hugging Face model
// directory (its weights; `seed` unused). `rope`: a scenario's RoPE override (RunSettings::rope; null: the
// model's own), an InputError naming the model where it does not apply.
Model load_model(const std::string& name, const torch::TensorOptions& options, uint64_t seed,
                 const nlohmann::json& rope = nullptr);
ModelConfig model_config_of(const std::string& name, const nlohmann::json& rope = nullptr);  // no weights
// The analytic estimate (harness/estimate/estimate.h) of a cell run with `threads` CPU threads on `device`
// (cpu | cuda: whose attention kernel the terms model): its peak, and offload's host bytes; nullopt for an
// impl without an estimate, or a CUDA cell on the math kernel (float64). With `train`: the training run's
// peak. With `ranks` > 1 (a distributed cell's world_size): one rank's.
std::optional<MemoryEstimate> estimate_cell(const Cell& cell, int64_t threads,
                                            const std::string& device = "cpu",
                                            const std::optional<TrainEstimate>& train = std::nullopt,
                                            int64_t ranks = 1);
// What estimate_cell estimates: the cell's axes as an EstimateInput (also the collectives' estimate's,
// harness/estimate/estimate_comm.h). Throws InputError for a model or dtype it cannot read.
EstimateInput estimate_input_of(const Cell& cell, int64_t threads, const std::string& device = "cpu",
                                const std::optional<TrainEstimate>& train = std::nullopt, int64_t ranks = 1);
torch::ScalarType parse_dtype(const std::string& name);  // float32 | bfloat16 | float64; throws InputError
int64_t default_threads();                               // every core

// Runs the cell in this process. Never throws for a failure of the cell itself: that is in the status.
CellResult run_cell(const CellJob& job);
// Runs the cell in a child: `exe run-cell JOBFILE`, one JSON result on its stdout.
CellResult run_cell_isolated(const CellJob& job, const std::string& exe);
// Runs a distributed cell as settings.world_size local ranks (`exe run-cell JOBFILE` each, with the torchrun
// environment); returns rank 0's result with every rank's peak, time and communication under "ranks".
CellResult run_cell_distributed(const CellJob& job, const std::string& exe);
// What a max-length search tells its caller as it goes: `on_start` before a probe's process starts (a Probe
// with status "started" and its attempts, which the results file keeps, so a run killed during that probe is
// known on --resume), `on_probe` as each probe finishes (progress lines, the results file's probes).
struct ProbeCallbacks {
  std::function<void(const Probe&)> on_start, on_probe;
};

// What offloaded checkpoints may take of the host when a search sets no host_budget_bytes: the memory
// available now, less a tenth and 4 GiB for what the probe's process holds beside its checkpoints (LibTorch,
// the CUDA context, pinned staging buffers). Pinned memory cannot be swapped: a probe past it would stall the
// machine or meet the OOM killer rather than fail cleanly. run_scenario reads it once and keeps it in meta.
int64_t default_host_budget();

// The largest seq_len of the cell that fits measure.max_seq_len's budget, every probe a child process
// (maxlen_cell.cpp). `finished`: probes an interrupted search already ran (run --resume); the search takes
// their outcome instead of running them again, and so follows the path it took before. A "started" record
// among them counts the starts of a probe that never finished; after two it is "killed", not started again.
CellResult search_cell_max_seq_len(const CellJob& job, const std::string& exe,
                                   const ProbeCallbacks& callbacks = {},
                                   const std::vector<Probe>& finished = {});

struct RunOptions {
  std::string out_dir;                      // results.json goes here
  std::optional<int64_t> threads;           // overrides the scenario's
  std::optional<bool> isolate;              // overrides the scenario's
  std::string self_exe = "/proc/self/exe";  // the bpbench binary, for isolated cells
  std::vector<std::string> argv;            // recorded in meta
  std::ostream* progress = nullptr;         // a line per cell (stderr in the CLI); null: silent
  std::ostream* table = nullptr;            // the final table (stdout in the CLI); null: none
  ResumeMode resume = ResumeMode::off;      // keep the finished cells of out_dir/results.json (resume.h)
  bool force = false;  // no resume: move an earlier out_dir/results.json aside rather than refuse (out_dir.h)
  // Started by a launcher as one of its ranks (launcher_env.h): the grid runs over them (grid_ranks.h), rank
  // 0 alone writing out_dir.
  std::optional<LaunchedRank> launched;
};

struct RunSummary {
  std::vector<CellResult> cells;
  std::string results_path;
  size_t errors = 0;  // cells with status "error"
};

// Expands the grid, runs every cell (with options.resume, those not finished already), rewrites results.json
// after each. Throws InputError for a bad output dir, one in use by another run, a results.json there without
// resume or force (out_dir.h), a results file it cannot resume, or check_world_size. Under a launcher
// (options.launched) every rank calls it: rank 0 returns the summary, the others an empty one; GridError
// when a rank stopped answering (grid_ranks.h).
RunSummary run_scenario(const Scenario& scenario, const RunOptions& options);

// NCCL runs one rank per GPU (two ranks on one GPU hang or fail inside NCCL): on device cuda, world_size
// ranks need as many visible GPUs. Throws InputError naming both numbers. With no GPU at all nothing is
// refused: every CUDA cell is skipped with the reason, as on any machine without one. Under a launcher
// (`launched`), the ranks it started on this machine must fit its GPUs instead (single-device cells take one
// each too), named as the launcher's.
void check_world_size(const std::string& device, int64_t world_size, int visible_gpus,
                      const LaunchedRank* launched = nullptr);

// The hidden `run-cell` subcommand: reads a CellJob from `job_path` ("-": stdin), prints one JSON result.
int run_cell_main(const std::string& job_path);

}  // namespace bpbench
