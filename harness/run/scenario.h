// scenario.h: the scenario file (a declarative grid of cells plus how to measure them) and its expansion.
//
// A scenario is JSON:
//   {"name": "...", "description": "...", "device": "cpu", "seed": 0, "threads": 2, "isolate": false,
//    "rope": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768},
//    "grid": {"model": ["small"], "impl": ["plain", "streambp"], "seq_len": [512, 1024], ...},
//    "measure": {"memory": true, "budget_bytes": 1000000, "time": {"warmup": 1, "repeat": 3},
//                "grad_error": {"reference": "float64"}, "timeline": false, "device_activity": false}}
// Every grid value may be a scalar or a list; the grid is their cartesian product. Keys are checked against
// the tables in scenario.cpp and scenario_grid.cpp (one row per key, so a later issue adds a key in one
// place); an unknown key, a bad value or a malformed file is an InputError whose one-line message names the
// problem and lists the valid choices.
//
// Expansion order: axes in the order of grid_keys() (model, objective, dtype, batch, seq_len, impl,
// partition, ...), the last one varying fastest, so cells that differ only by impl are neighbours in the
// results table.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/run/train_spec.h"

namespace bpbench {

// Bad user input (scenario file, command line, job file). The CLI prints it on one line and exits with 2.
class InputError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Throws InputError("<problem> (valid: <valid>)"), the one shape of every input error message.
[[noreturn]] void input_error(const std::string& problem, const std::string& valid);

struct TimeSpec {
  bool enabled = true;  // false: exactly one run, no timing statistics
  int64_t warmup = 1;
  int64_t repeat = 3;  // >= 0; 0: the warm-up and the memory step only, no time statistics
};

struct MeasureSpec {
  bool memory = true;
  std::optional<int64_t> budget_bytes;  // live-byte limit during the measured run: overruns become status oom
  TimeSpec time;
  std::string grad_error_reference = "float64";  // empty: no gradient error
  // Where the reference runs: "cell" (the cell's device) or "cpu". A float64 reference of a long CUDA cell
  // may not fit the GPU (its float64 attention runs the math kernel, which saves a T x T score matrix per
  // head and layer); the CPU's fused attention saves none.
  std::string grad_error_reference_device = "cell";
  bool timeline = false;  // record the measured step's memory timeline (results + a Chrome trace file)
  // CUDA, with timeline: CUPTI's kernels, memcpys and memsets of that step in its Chrome trace. That step is
  // then run once more than the timed repeats and left out of the time statistics (CUPTI slows it).
  bool device_activity = false;
  // With timeline: every allocation of that step carries its C++ stack in the memory_viz pickle (its
  // frames after bpbench's phases). Unwinding at every allocation slows that step; its time is not reported.
  bool cpp_stacks = false;
  // A max-sequence-length search instead of fixed lengths: the grid has no seq_len, and each cell finds the
  // largest T (a multiple of granularity, at most upper) whose forward + backward fits budget_bytes.
  struct MaxSeqLen {
    std::optional<int64_t> budget_bytes;  // absent: the device's memory (GPU); required on the CPU
    int64_t granularity = 256;
    int64_t upper = 1 << 20;
    // offload: the host memory the offloaded checkpoints may take (estimated); absent: this machine's
    // available memory less a margin (maxlen_cell.cpp). Probes that would need more are not run.
    std::optional<int64_t> host_budget_bytes;
  };
  std::optional<MaxSeqLen> max_seq_len;
  // A training run of many optimizer steps instead of one measured step (train_spec.h). It records its own
  // time per step and excludes time, grad_error (off with it), max_seq_len, timeline and device_activity.
  std::optional<TrainSpec> train;

  nlohmann::json to_json() const;
  static MeasureSpec from_json(const nlohmann::json& j);  // the parser's rules; throws InputError
};

// One grid point: a value for every grid key. partition / logits_partition are resolved (absent -> seq_len).
struct Cell {
  std::string model, impl, objective = "sft", dtype = "float32";
  int64_t seq_len = 0;  // T; 0 (null in JSON): found by a max-sequence-length search
  int64_t batch = 1;    // B: SFT sequences, DPO pairs, GRPO prompts
  int64_t partition = 0, logits_partition = 0;
  std::string offload =
      "none";  // "none" | "checkpoints": layer checkpoints in host memory (impls/machinery/offload.h)
  // The ring strategies' 2-D mesh: Ulysses over groups of this many ranks inside ring groups of world_size /
  // ulysses_degree (impls/machinery/ring_layer.h); 1: the ring over every rank. Other strategies: 1.
  int64_t ulysses_degree = 1;
  // The distributed strategies' sharding (impls/machinery/dist_common.h): "zero2", each rank keeps a shard of
  // the gradients; "zero3", of the parameters too, gathered per layer for its forward and again for its
  // backward. Other strategies: "zero2" (nothing to shard).
  std::string sharding = "zero2";
  int64_t lora_rank = 0;  // 0: full fine-tuning
  double lora_alpha = 64;
  int64_t group = 8;        // GRPO completions per prompt
  int64_t prompt_len = -1;  // -1: T/8
  bool padding = false;
  double beta = 0.1, epsilon = 0.2;

  nlohmann::json axes() const;                        // every grid key -> its value
  static Cell from_axes(const nlohmann::json& axes);  // every grid key required; throws InputError
  std::string label(const std::vector<std::string>& keys) const;  // "model=small impl=plain ..."
};

// What every cell of a scenario shares besides its axes.
struct RunSettings {
  std::string device = "cpu";  // "cpu" | "cuda"
  uint64_t seed = 0;
  int64_t threads = 0;  // intra-op threads; 0: all cores
  MeasureSpec measure;
  // "data": a JSON file of token-id sequences used instead of synthetic tokens (SFT only;
  // harness/objectives/data_file.h). Stored as given; relative paths are relative to the working directory,
  // as for every path on the command line.
  std::string data_path;
  // "world_size": data-parallel ranks, each a local process (impls/machinery/dist_common.h); 1: a single
  // process.
  int64_t world_size = 1;
  // "rope": every model's RoPE replaced by this object in transformers' rope_parameters form
  // (harness/model/rope_config.h), the way users turn on YaRN past Qwen3's 32k; rope_theta stays the model's
  // unless given. Null: each model's own RoPE. RoPE changes values only, never memory or time.
  nlohmann::json rope;
  // "rms_norm": "hf" or "fused" (harness/model/ops.h); empty: the device's default (fused on CUDA, hf on
  // the CPU). "hf" on a GPU is Hugging Face's float32 formula, for value parity with transformers.
  std::string rms_norm;
  // "router_aux_loss_coef": transformers' router_aux_loss_coef, the weight of the routers' load-balancing
  // loss added to every mixture-of-experts cell's loss (harness/model/router_balance.h); 0: off, as in
  // transformers unless output_router_logits is set. Dense models have no routers: it changes nothing there.
  double router_aux_loss_coef = 0.0;
};

struct GridAxis {
  std::string key;
  std::vector<nlohmann::json> values;  // at least one; null in partition axes means "seq_len"
  bool given = false;                  // false: the default from the key table
};

struct Scenario {
  std::string name = "scenario", description;
  RunSettings settings;
  bool isolate = false;
  std::vector<GridAxis> grid;  // every key of grid_keys(), in that order
  nlohmann::json source;       // the scenario object as written

  size_t cell_count() const;
  std::vector<Cell> expand() const;
  // Keys with more than one value: what tells one cell from another in progress lines.
  std::vector<std::string> varying_keys() const;
};

const std::vector<std::string>& grid_keys();
// The keys a scenario's top level and its "measure" object take (the parser's own tables): what
// scenarios/scenario.schema.json must list, checked by a test.
std::vector<std::string> scenario_keys();
std::vector<std::string> measure_keys();
const std::vector<std::string>& dtype_names();  // float32, bfloat16, float64

Scenario parse_scenario(const nlohmann::json& j);
// `origin` names the text in messages (a file path).
Scenario parse_scenario_text(const std::string& text, const std::string& origin = "scenario");
// A relative "data" path in the file is taken relative to the file's directory.
Scenario load_scenario(const std::string& path);

}  // namespace bpbench
