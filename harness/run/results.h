// results.h: the per-cell result record, the results.json file and the console rendering of results.
//
// results.json (schema "bpbench.results/1"): every field, its type and meaning are published in
// reports/results.schema.json, which bpbench compiles in (harness/run/json_schema.h): `bpbench validate`
// checks a file against it, and under the test suite (BPBENCH_VALIDATE_RESULTS=1) every write is checked, so
// a field added here without its schema entry fails a test.
// JSON holds bytes and seconds; MiB / GiB (2^20 / 2^30) appear only in rendered text.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/model/flop_count.h"
#include "harness/run/grad_error.h"
#include "harness/run/maxlen.h"
#include "harness/run/scenario.h"

namespace bpbench {

// The version changes when a field changes meaning, not when one is added (the schema lists every field and
// the readers ignore none). Readers (report, compare, validate, run --resume) keep reading the versions
// before it: upgrade_results translates them on load. There has been one so far. To change a field's meaning:
// bump the number here and in reports/results.schema.json, add the translation from the version before to
// results.cpp's upgrade table, and keep tests/fixtures/results_small_first.json (the first file bpbench
// wrote) loading.
inline constexpr const char* kResultsSchema = "bpbench.results/1";
inline constexpr const char* kBpbenchVersion = "0.1.0";

// The versions of results.json this bpbench reads, oldest first; the last is kResultsSchema.
std::vector<std::string> readable_results_schemas();
// Brings `doc`, a results file of a readable version, to kResultsSchema in place, one version at a time, so
// its fields mean what reports/results.schema.json says; returns the version it was written in. Any other
// "schema" is an InputError naming `origin` and the readable versions.
std::string upgrade_results(nlohmann::json& doc, const std::string& origin);

struct MemoryResult {
  int64_t base_bytes = 0;  // live when the measured step starts: parameters, grads, batch
  int64_t peak_bytes = 0;
  std::map<std::string, int64_t> peak_by_category;  // the breakdown at the moment of the peak
  std::optional<int64_t> estimate_bytes;            // harness/estimate/estimate.h, where the impl has one
  std::string timeline_file, trace_file;            // relative to results.json; empty: none recorded
  std::optional<int64_t> reserved_peak_bytes;       // CUDA: the caching allocator's reserved peak
  std::optional<int64_t> alloc_retries;  // CUDA: the allocator's num_alloc_retries during the measured step
  std::string snapshot_file;  // memory_viz pickle (memory_viz.h; CUDA: or the allocator's own of an OOM)
  // With measure.device_activity: {"kernels", "memcpys", "memsets"} counted into trace_file and the records
  // the trace lacks, {"dropped" (by CUPTI, no buffer space), "incomplete" (no end time)}; or {"error"}.
  nlohmann::json device_activity;
  // offload: host bytes holding the layer checkpoints (profiles/host_memory.h), and their estimate; not part
  // of peak_bytes, which is the device's.
  std::optional<int64_t> host_peak_bytes, estimate_host_bytes;
  // offload: the bytes copied between the device and host memory in the measured step (a training run's last
  // step), counted by each copy (profiles/host_memory.h: what PCIe carries on a GPU), and their estimate.
  std::optional<int64_t> host_copy_bytes, estimate_host_copy_bytes;
  // The cell's files that could not be written (a full disk, a quota), each with why: {"FILE": "reason"};
  // the measurement stands without them. null: none failed.
  nlohmann::json files_not_written;
};

// A max-sequence-length search's outcome with the settings it ran under (harness/run/maxlen.h).
struct MaxLenRecord : MaxLenResult {
  MaxLenSearch search;                       // budget_bytes, granularity, upper (and where it started)
  std::optional<int64_t> host_budget_bytes;  // offload: what the checkpoints could take of the host
  // The estimate's answer for the same budgets and granularity (estimate_inverse.h), where the strategy has
  // an estimate and the search a device budget: what the search started from, beside what it measured.
  std::optional<int64_t> estimate_max_seq_len;
};

struct TimeResult {
  double median_s = 0, min_s = 0, max_s = 0;
  int64_t warmup = 0;
  std::vector<double> runs_s;  // measured runs only
  // The spread of runs_s (2 runs or more): the sample standard deviation and its ratio to the mean. A report
  // flags a cell whose cv is too wide to compare (reports/table_time.cpp); compare tests the runs themselves.
  std::optional<double> stddev_s, cv;
  std::optional<double> tokens_per_s;  // the step's tokens (every sequence of every rank) / median_s
};

struct GradErrorResult {
  std::string reference;         // "float64"
  std::string reference_device;  // where the reference ran: "cpu", "cuda:0" ("" in files before it was kept)
  double reference_loss = 0, loss_abs_error = 0;
  std::map<std::string, ErrorStats> groups;
  std::string error;  // non-empty: the reference could not be computed, groups are empty
};

// The step's FLOPs and the rate they ran at (docs/estimate.md, "FLOPs").
struct ComputeResult {
  FlopCounts counts;                   // counted on the cell's first step (every step runs the same ops)
  std::optional<double> tflops_per_s;  // hardware FLOPs / median step time, 1e12 FLOP/s; null: not timed
  std::optional<double> mfu, hfu;      // model / hardware FLOP/s over peak.tflops; CUDA with a known peak
  nlohmann::json peak;  // gpu_peak.h: {"gpu", "precision", "tflops", "source"}, or {"gpu", "error"}
};

struct CellResult {
  Cell cell;
  int64_t threads = 0;
  std::string status = "ok";  // ok | oom | skipped | error
  std::string reason;
  // oom: the bytes the allocation that failed asked for, where the allocator said (allocation_failure.h).
  std::optional<int64_t> oom_requested_bytes;
  std::optional<double> loss;
  double wall_s = 0;  // the whole cell: build, runs, reference
  bool uses_partition = false, uses_logits_partition = false;
  nlohmann::json rope;  // rope_to_json of the cell's model (a scenario's override applied); null: unreadable
  nlohmann::json sliding_window;  // the model's sliding-window layers (sliding_window_json); null: none
  nlohmann::json train;  // measure.train's run (train_loop.h, TrainRun::to_json); null: one measured step
  std::optional<MemoryResult> memory;
  std::optional<TimeResult> time;
  std::optional<GradErrorResult> grad_error;
  std::optional<ComputeResult> compute;
  nlohmann::json data;                  // {"file", "sha256", "sequences"} or null: synthetic tokens
  std::optional<MaxLenRecord> max_len;  // a max-sequence-length search cell
  int64_t world_size = 1;
  nlohmann::json comm;   // a distributed strategy's collectives in the measured step (comm.h), else null
  nlohmann::json ranks;  // world_size > 1: one record per rank (peak, base, time, comm), else null
  // Under a launcher (harness/run/grid_ranks.h): the rank that measured a single-device cell,
  // {"rank", "local_rank", "host", "device"}; null in a run on one machine.
  nlohmann::json measured_by;
  // Under a launcher, the record a cell holds while it runs (status error, its reason says where it runs):
  // how many sittings have stopped during it. Absent from every finished record.
  std::optional<int64_t> interrupted;

  nlohmann::json to_json() const;
  static CellResult from_json(const nlohmann::json& j);  // throws on a malformed record
  std::optional<double> grad_rel_l2() const;             // groups["all"].rel_l2 when there is one
};

// Facts about this run: versions, argv, device, threads, git commit, start time, host, the scenario.
nlohmann::json collect_meta(const Scenario& scenario, const std::vector<std::string>& argv, int64_t threads,
                            bool isolate);
std::string iso8601_utc_now();
std::string cpu_description();  // "model name" from /proc/cpuinfo

// Writes `j` to `path` through a temporary file in the same directory and a rename, so a reader (or a crash)
// sees either the previous complete file or the new one.
void write_json_atomically(const std::filesystem::path& path, const nlohmann::json& j);
// Any bytes the same way (a temporary beside it, synced, renamed over it).
void write_file_atomically(const std::filesystem::path& path, const std::string& text);

// DIR/results.json, rewritten after every cell (and every max-length probe) so that nothing measured is
// ever lost. Cells are written in grid order, by their index in the grid.
class ResultsWriter {
 public:
  // Creates `dir` (InputError when it cannot) and writes the file with the `carried` cells (grid index ->
  // the record as an earlier sitting wrote it: `run --resume`), none by default, in a single write.
  ResultsWriter(const std::filesystem::path& dir, nlohmann::json meta, size_t cells_total,
                std::map<size_t, nlohmann::json> carried = {});
  void add(size_t index, const CellResult& cell);  // also ends that cell's probes in progress
  void add(const CellResult& cell);                // at the index after the last one
  // The finished probes of the max-length search of cell `index`, while it runs: "in_progress" in the file,
  // {"index", "axes", "probes": [{"seq_len", "status", "peak_bytes", "reason"}]}, what `run --resume` keeps.
  void set_in_progress(size_t index, const Cell& cell, const std::vector<Probe>& probes);
  void finish();  // marks the file complete and stamps the end time
  const std::filesystem::path& path() const { return path_; }

 private:
  void write();
  std::filesystem::path path_;
  nlohmann::json doc_;  // everything but the cells
  std::map<size_t, nlohmann::json> cells_;
};

nlohmann::json probe_to_json(const Probe& p);
Probe probe_from_json(const nlohmann::json& j);
// The keys each record of a cell writes ("cell", "memory", "time", "grad_error", "error_stats", "compute",
// "probe"), from the tables that drive to_json and from_json (result_fields.cpp); a test holds them equal to
// reports/results.schema.json.
std::map<std::string, std::vector<std::string>> result_field_names();

std::string format_mib(int64_t bytes);                           // "123.4"
std::string format_seconds(double s);                            // "12s", "3m04s", "1h02m"
std::string render_table(const std::vector<CellResult>& cells);  // markdown, one row per cell
// "ok 123.4 MiB peak, 0.81 s" / "oom (reason)" / "skipped (reason)" / "error (reason)".
std::string outcome_summary(const CellResult& r);

}  // namespace bpbench
