// cli.cpp: `bpbench run | list | help`, and the hidden `run-cell` that isolated cells execute.
//
// Every bad input ends the same way: one line `bpbench: error: <problem> (valid: <choices>)` on stderr and
// exit status 2, before anything else is printed, so scripts can rely on it.
#include "harness/cli/cli.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "harness/cli/accelerators.h"
#include "harness/cli/estimate_command.h"
#include "harness/cli/help_text.h"
#include "harness/cli/validate_command.h"
#include "harness/cli/version.h"
#include "harness/model/hf_model.h"
#include "harness/model/model_config.h"
#include "harness/model/rope_config.h"
#include "harness/objectives/objective.h"
#include "harness/run/launcher_env.h"
#include "harness/run/run_detail.h"
#include "harness/run/runner.h"
#include "harness/run/scenario.h"
#include "impls/interface/strategy.h"
#include "reports/compare.h"
#include "reports/history.h"
#include "reports/report.h"

namespace bpbench {

namespace {

constexpr int kExitOk = 0, kExitCellErrors = 1, kExitUsage = 2;

const char* kMainHelp = R"(usage: bpbench <command> [options]

Measures how backpropagation strategies for long-sequence LLM training trade memory for time, and checks that
their gradients are exact.

commands:
  run SCENARIO.json [--out DIR] [--threads N] [--isolate] [--resume | --force] [--quiet]
                          run every cell of a scenario's grid; write DIR/results.json
  list [models|impls|objectives|families|gpus|grid] [--names]
                          what a scenario's grid may name, the model families, the GPUs
  report RESULTS.json --out DIR
                          markdown tables (the paper's layouts) and PNG plots, and report.html:
                          the same in one self-contained page with interactive timelines
  compare BASE.json NEW.json [--mem-tol PCT] [--time-tol PCT] [--time-alpha P] [--junit FILE]
          [--markdown FILE] [--benchmark-json FILE] [--html FILE]
                          match cells by axes; exit status = number of memory regressions
  history append RESULTS.json... --to HISTORY.jsonl | history report HISTORY.jsonl --out DIR
                          keep runs over time; the trend of the cells that repeat
  estimate --model M --seq-len T[,T...] | --gpu NAME|all | --budget BYTES
                          analytic peak bytes and FLOPs of each strategy; the longest length that fits
  hf-config MODEL         a preset as transformers' config.json (stdout), for peers run in transformers
  validate FILE...        a results.json or a scenario against its published JSON Schema
  help [COMMAND]          this text, or a command's

options:
  -h, --help              help (also after a command: bpbench run --help)
  --version               print the version, the commit, LibTorch, CUDA and the compiler it was built with

Exit status: 0 success; 1 a cell failed with status "error"; 2 bad input (one line on stderr).
)";

const char* kRunHelp =
    R"(usage: bpbench run SCENARIO.json [--out DIR] [--threads N] [--isolate] [--resume | --force] [--quiet]

Expands the scenario's grid (every combination of its values) and runs each cell: one forward + backward of the
strategy `impl` under a memory recorder, timed over warmup + repeat runs, with the gradient error against plain
backpropagation in float64 on the same weights and batch. DIR/results.json is rewritten (atomically) after every
cell (and every max-length probe), so nothing measured is lost if the run is interrupted; --resume goes on
from there.

options:
  --out DIR       output directory (default: out/<scenario name>)
  --threads N     intra-op threads (default: the scenario's "threads", else every core)
  --isolate       run each cell in its own bpbench process (default: the scenario's "isolate")
  --resume        keep the cells of DIR/results.json that finished "ok" or "oom" and the finished probes of
                  a max-length search, and run the rest ("error" and "skipped" cells run again); no file: run
                  all. Refuses a file of another scenario or build (version, git commit, LibTorch, compiler,
                  CUDA build, GPUs, driver)
  --resume-any    --resume, keeping the matching cells of any results file (recorded in meta.resumed)
  --force         start anew where DIR already holds a results.json: the old file is moved aside to
                  DIR/results.replaced-TIME.json. Without --resume or --force such a DIR is refused, and so
                  is a DIR another run is writing into (DIR/.bpbench.lock)
  --quiet         no progress lines on stderr
  -h, --help      this text

Scenario file (see scenarios/quickstart.json):
  {"name": "...", "description": "...", "device": "cpu"|"cuda", "seed": 0, "threads": N, "isolate": false,
   "data": "tokens.json", "world_size": 1, "rope": {"rope_type": "yarn", "factor": 4, ...} | null,
   "rms_norm": "hf" | "fused" (default: fused on cuda, hf on cpu),
   "router_aux_loss_coef": 0 (mixture-of-experts load-balancing loss weight; 0: off),
   "grid": {KEY: value or [values], ...},
   "measure": {"memory": true, "budget_bytes": N, "time": {"warmup": 1, "repeat": 3} | false,
               "grad_error": {"reference": "float64", "reference_device": "cell"|"cpu"} | false,
               "timeline": false, "device_activity": false, "cpp_stacks": false,
               "max_seq_len": {"budget_bytes": N, "granularity": 256, "upper": N, "host_budget_bytes": N},
               "train": {"steps": N, "lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01,
                         "warmup_steps": 0, "schedule": "cosine"|"constant", "min_lr_ratio": 0,
                         "clip_grad_norm": 0, "eval_every": 0, "eval_batches": 1, "grad_accum": 1,
                         "precision": "model"|"mixed"}}}
grid keys (required: model, impl, and seq_len unless measure.max_seq_len searches for it):
  model (a preset, or a Hugging Face model directory), objective [sft], dtype [float32], batch [1], seq_len,
  impl, partition [seq_len], logits_partition [seq_len], offload [none], ulysses_degree [1], sharding [zero2],
  lora_rank [0], lora_alpha [64], group [8], prompt_len [-1 = T/8], padding [false], beta [0.1], epsilon [0.2]
offload: "checkpoints" keeps the layer checkpoints of
  @OFFLOADING@ in host memory (pinned, copied on a side stream and prefetched a layer ahead on a GPU; the same code with
  synchronous copies on the CPU); results add memory.host_peak_bytes beside the device's peak_bytes.
  "optimizer" (a training run's): AdamW's tensors and its step in host memory, on the host's CPU;
  "parameters" (sharding zero3; in a training run with "optimizer"): the layers' parameter shards in host
  memory, copied to the device for each gather (ZeRO-Infinity's offload_param); a list takes several, in the
  order checkpoints,optimizer,parameters.
data: a JSON list of token-id lists for SFT cells, cropped or padded to seq_len (needs batch x world_size
  sequences); results record the file's name and SHA-256.
world_size: ranks, started as local processes, for
  @DISTRIBUTED@;
  the other impls' cells run on one device.
Under a launcher (torchrun, srun, mpirun): every rank runs `bpbench run` with the same arguments and the grid
  runs over them: single-device cells one per rank at a time (each on its LOCAL_RANK's GPU), distributed cells
  on all ranks (world_size: the launcher's, or none), global rank 0 alone writing DIR. A restarted job
  (torchrun --max-restarts, a requeued Slurm job) resumes DIR by itself. docs/distributed.md, "A grid past one
  machine".
sharding: the distributed impls' ZeRO stage: none (whole gradients on every rank, and in training the whole
  optimizer: DDP), zero1 (whole gradients, the optimizer sharded), zero2 (a shard of the gradients and of the
  optimizer) or zero3 (of the parameters too, gathered per layer for its forward and again for its backward).
ulysses_degree: ring and streambp-ring on a 2-D mesh: Ulysses over groups of U ranks inside rings of
  world_size / U (U divides world_size and splits the model's heads; 1: the ring over every rank).
rope: replaces every model's RoPE (transformers' rope_parameters form; types default, linear, dynamic, yarn,
  llama3; rope_theta stays the model's unless given). Each cell records the RoPE it used.
timeline: DIR/timelines/cell-NNN.json, .trace.json (Chrome trace: Perfetto, chrome://tracing) and
  .memory_viz.pickle (PyTorch's memory viewer: https://pytorch.org/memory_viz).
cpp_stacks: with timeline, each allocation's C++ stack in the .memory_viz.pickle, after bpbench's phases
  (every allocation of the traced step unwinds its stack: slower, never timed).
device_activity: CUDA, with timeline: CUPTI's kernels, memcpys and memsets of the traced step in the
  .trace.json, one track per stream (that step runs once more and is left out of the time statistics).
grad_error: each cell's gradients against plain BP on a float64 copy of its weights, on the cell's device or,
  with reference_device "cpu", on the CPU (a long CUDA cell's float64 step may not fit its GPU).
max_seq_len: per cell, the largest multiple of granularity that completes a step within budget_bytes (every
  probe a child process; on a GPU the budget defaults to its memory). With offload, host_budget_bytes bounds
  the estimated pinned checkpoints [available memory less a tenth and 4 GiB]; a probe past it is "oom", not
  run. A probe started twice without finishing (the run killed meanwhile), or killed by SIGKILL, is "killed".
train: steps AdamW steps per cell instead of one measured step (warm-up then the schedule, clipping to
  clip_grad_norm, the held-out loss of eval_batches batches every eval_every steps); precision "mixed": bfloat16
  weights with float32 master weights and optimizer state (dtype bfloat16); grad_accum micro-batches a step.
  Each cell records every step's loss, lr, gradient norm and time, the evaluations, the final weights'
  fingerprint, and the run's peak with the optimizer's bytes in their own category. The distributed impls
  train on each rank's part of the global batch, AdamW over the rank's shards. Not with time, grad_error,
  max_seq_len or timeline.

Console: a progress line per cell on stderr, a table on stdout. Out-of-memory (a measure.budget_bytes overrun
included) is recorded as status "oom"; an unsupported combination as "skipped".
Exit status: 0 every cell ok/oom/skipped; 1 some cell has status "error" (under a launcher: 0, the failures
being results; 1 when a rank stopped answering and the grid stopped); 2 bad input.
)";

// kRunHelp with the registry's names where it lists strategies (@OFFLOADING@, @DISTRIBUTED@).
std::string run_help() {
  const auto distributed = run_detail::distributed_strategy_names();
  const auto data_parallel = strategies_where_sequence_parallel(distributed, false);
  const auto sequence_parallel = strategies_where_sequence_parallel(distributed, true);
  return with_names(
      kRunHelp,
      {{"@OFFLOADING@", fmt::format("{}", fmt::join(offloading_strategy_names(), ", "))},
       {"@DISTRIBUTED@", fmt::format("{} (data parallel), {} (sequence parallel)",
                                     fmt::join(data_parallel, ", "), fmt::join(sequence_parallel, ", "))}});
}

const char* kListHelp =
    R"(usage: bpbench list [models|impls|objectives|families|gpus|grid] [--names [--distributed]]

Lists model presets (with their parameter counts and RoPE), backward strategies (impls), objectives, the
Hugging Face families a model directory may be (families), the GPUs `bpbench estimate --gpu` knows and a
scenario's grid keys (grid). With no argument it lists the first three.

  --names         only the names, comma-separated on one line (what help texts and docs quote; the docs
                  test checks every such list in docs/ against this)
  --distributed   with impls --names: only the strategies that run over several ranks
)";

struct Usage {
  std::string problem, valid;
};

[[noreturn]] void usage_error(const std::string& problem, const std::string& valid) {
  throw Usage{problem, valid};
}

bool is_help(const std::string& a) {
  return a == "-h" || a == "--help";
}

void list_models(std::ostream& out) {
  out << "models (name, parameters, layers x hidden, heads/kv heads, vocab, RoPE; sliding-window layers; "
         "layers without RoPE; attention sinks; latent attention; experts):\n";
  for (const auto& m : model_presets()) {
    const int64_t n = m.parameter_count();
    std::string sliding;
    if (m.has_sliding_layers()) {
      sliding =
          fmt::format("; {} of {} layers slide over {} keys{}", m.sliding_layer_count(), m.layers,
                      m.sliding_window, m.sliding_rope ? ", RoPE " + rope_summary(*m.sliding_rope) : "");
    }
    if (m.rope_layer_count() < m.layers)
      sliding += fmt::format("; {} of {} layers without RoPE", m.layers - m.rope_layer_count(), m.layers);
    if (m.attention_sinks) sliding += "; attention sinks";
    if (m.rotary_dim > 0) sliding += fmt::format("; RoPE on {} of {} dims a head", m.rotary_dim, m.head_dim);
    if (const auto& la = m.linear_attention)
      sliding +=
          fmt::format("; {} of {} layers Gated DeltaNet ({} key heads of {}, {} value heads of {}, conv {})",
                      m.linear_layer_count(), m.layers, la->key_heads, la->key_dim, la->value_heads,
                      la->value_dim, la->conv_kernel);
    if (m.attention_output_gate) sliding += "; gated attention";
    if (m.mla)
      sliding += fmt::format("; latent attention (kv latent {} + RoPE key {}{}, values of {})",
                             m.mla->kv_lora_rank, m.mla->qk_rope_head_dim,
                             m.mla->q_lora_rank > 0 ? fmt::format(", q latent {}", m.mla->q_lora_rank) : "",
                             m.mla->v_head_dim);
    std::string experts;
    if (m.is_moe()) {
      const int64_t active = m.active_parameter_count();
      experts = fmt::format("; {} of {} layers route to {} of {} experts of Ie={} ({:.3f} B active){}",
                            m.moe_layer_count(), m.layers, m.experts_per_token, m.experts,
                            m.expert_intermediate, static_cast<double>(active) / 1e9,
                            m.activation == Activation::clamped_swiglu ? ", clamped SwiGLU" : "");
      if (m.shared_expert_intermediate > 0)
        experts += fmt::format(", a shared expert of {}", m.shared_expert_intermediate);
      if (m.grouped_routing())
        experts += fmt::format(
            ", {} scores{}", m.routing == ModelConfig::Routing::sigmoid_grouped ? "sigmoid" : "softmax",
            m.expert_groups > 1 ? fmt::format(" in {} of {} groups", m.expert_groups_chosen, m.expert_groups)
                                : "");
    }
    out << fmt::format(
        "  {:<12} {:>12} params ({:>7.3f} B)  L={:<3} d={:<5} I={:<6} Hq={:<3} Hkv={:<2} hd={:<4} "
        "V={:<6}{:<5}  RoPE {}{}{}\n",
        m.name, n, static_cast<double>(n) / 1e9, m.layers, m.hidden, m.intermediate, m.heads, m.kv_heads,
        m.head_dim, m.vocab, m.tie_embeddings ? " tied" : "", rope_summary(m.rope), sliding, experts);
  }
}

void list_impls(std::ostream& out) {
  out << "impls (backward strategies):\n";
  for (const auto& name : strategy_names())
    out << fmt::format("  {:<24} {}\n", name, make_strategy(name)->description());
}

void list_objectives(std::ostream& out) {
  out << "objectives:\n";
  for (const auto& name : objective_names())
    out << fmt::format("  {:<6} {}\n", name, objective_description(name));
}

void list_families(std::ostream& out) {
  out << "families (a Hugging Face model directory's config.json: its architecture and model_type):\n";
  for (const auto& f : hf_family_names())
    out << fmt::format("  {:<14} {:<24} {}\n", f.label, f.architecture, f.model_type);
}

void list_gpus(std::ostream& out) {
  out << "gpus (bpbench estimate --gpu; memory as the vendor's tools report it):\n";
  for (const auto& g : accelerators())
    out << fmt::format("  {:<12} {:<24} {:>7.2f} GB{}\n", g.key, g.label,
                       static_cast<double>(g.memory_bytes) / 1e9, g.note.empty() ? "" : "  " + g.note);
}

// Each list's names alone, for --names.
std::vector<std::string> list_names(const std::string& what, bool distributed_only) {
  std::vector<std::string> names;
  if (what == "models")
    for (const auto& m : model_presets()) names.push_back(m.name);
  if (what == "impls") names = distributed_only ? run_detail::distributed_strategy_names() : strategy_names();
  if (what == "objectives") names = objective_names();
  if (what == "families")
    for (const auto& f : hf_family_names()) names.push_back(f.label);
  if (what == "gpus")
    for (const auto& g : accelerators()) names.push_back(g.key);
  if (what == "grid") names = grid_keys();
  return names;
}

int cmd_list(const std::vector<std::string>& args) {
  const std::vector<std::string> lists = {"models", "impls", "objectives", "families", "gpus", "grid"};
  const std::string valid = fmt::format("{}", fmt::join(lists, ", "));
  std::optional<std::string> what;
  bool names_only = false, distributed_only = false;
  for (const auto& a : args) {
    if (is_help(a)) {
      std::cout << kListHelp;
      return kExitOk;
    }
    if (a == "--names" || a == "--distributed") {
      (a == "--names" ? names_only : distributed_only) = true;
      continue;
    }
    if (!a.empty() && a[0] == '-')
      usage_error(fmt::format("list: unknown option '{}'", a), "--names, --distributed, --help");
    if (what) usage_error(fmt::format("list: unexpected argument '{}'", a), valid);
    what = a;
  }
  if (what && std::find(lists.begin(), lists.end(), *what) == lists.end())
    usage_error(fmt::format("list: unknown list '{}'", *what), valid);
  if (distributed_only && (!names_only || what != "impls"))
    usage_error("list: --distributed goes with impls --names", "bpbench list impls --names --distributed");
  if (names_only) {
    if (!what) usage_error("list: --names needs the list to name", valid);
    std::cout << fmt::format("{}\n", fmt::join(list_names(*what, distributed_only), ", "));
    return kExitOk;
  }
  if (!what || *what == "models") list_models(std::cout);
  if (!what || *what == "impls") list_impls(std::cout);
  if (!what || *what == "objectives") list_objectives(std::cout);
  if (what == "families") list_families(std::cout);
  if (what == "gpus") list_gpus(std::cout);
  if (what == "grid")
    std::cout << fmt::format("grid keys (bpbench help run says what each takes):\n  {}\n",
                             fmt::join(grid_keys(), "\n  "));
  return kExitOk;
}

const char* kHfConfigHelp = R"(usage: bpbench hf-config MODEL

Prints the preset MODEL as transformers' config.json (transformers 5 form, RoPE as rope_parameters). A peer
built from it in transformers (AutoConfig / from_config) is the network bpbench runs as MODEL, which is how
impls/peers/hf_checkpoint.py measures Hugging Face on the same model.
)";

int cmd_hf_config(const std::vector<std::string>& args) {
  if (args.size() == 1 && is_help(args[0])) {
    std::cout << kHfConfigHelp;
    return kExitOk;
  }
  if (args.size() != 1 || args[0].empty() || args[0][0] == '-')
    usage_error("hf-config: expects exactly one model preset", model_preset_names());
  ModelConfig c;
  try {
    c = find_model_preset(args[0]);
  } catch (const std::invalid_argument&) {
    usage_error(fmt::format("hf-config: unknown model '{}'", args[0]), model_preset_names());
  }
  std::cout << hf_config_json(c).dump(2) << "\n";
  return kExitOk;
}

int64_t parse_threads(const std::string& text) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < 1)
    usage_error(fmt::format("run: --threads '{}' is not a positive integer", text), "integers >= 1");
  return v;
}

int cmd_run(const std::vector<std::string>& args, const std::vector<std::string>& argv) {
  const std::string options =
      "--out DIR, --threads N, --isolate, --resume, --resume-any, --force, --quiet, --help";
  std::optional<std::string> scenario_path, out_dir;
  RunOptions opt;
  bool quiet = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const std::string& flag) -> std::string {
      if (a.size() > flag.size() && a.compare(0, flag.size() + 1, flag + "=") == 0)
        return a.substr(flag.size() + 1);
      if (i + 1 >= args.size()) usage_error(fmt::format("run: {} needs a value", flag), options);
      return args[++i];
    };
    if (is_help(a)) {
      std::cout << run_help();
      return kExitOk;
    } else if (a == "--out" || a.rfind("--out=", 0) == 0) {
      out_dir = value("--out");
    } else if (a == "--threads" || a.rfind("--threads=", 0) == 0) {
      opt.threads = parse_threads(value("--threads"));
    } else if (a == "--isolate") {
      opt.isolate = true;
    } else if (a == "--resume") {
      opt.resume = opt.resume == ResumeMode::any ? ResumeMode::any : ResumeMode::same;
    } else if (a == "--resume-any") {
      opt.resume = ResumeMode::any;
    } else if (a == "--force") {
      opt.force = true;
    } else if (a == "--quiet") {
      quiet = true;
    } else if (a.size() > 1 && a[0] == '-') {
      usage_error(fmt::format("run: unknown option '{}'", a), options);
    } else if (scenario_path) {
      usage_error(fmt::format("run: unexpected argument '{}' (one scenario per run)", a), options);
    } else {
      scenario_path = a;
    }
  }
  if (opt.force && opt.resume != ResumeMode::off)
    usage_error("run: --force and --resume exclude each other (--force starts anew, --resume continues)",
                "one of them");
  if (!scenario_path)
    usage_error("run: missing SCENARIO.json", "a scenario file, e.g. scenarios/quickstart.json");
  const Scenario scenario = load_scenario(*scenario_path);
  opt.out_dir = out_dir.value_or("out/" + scenario.name);
  opt.argv = argv;
  opt.launched = launched_rank();  // one of a launcher's ranks: the grid runs over them (grid_ranks.h)
  opt.progress = quiet ? nullptr : &std::cerr;
  opt.table = &std::cout;
  const RunSummary summary = run_scenario(scenario, opt);
  if (summary.errors > 0) {
    std::cerr << fmt::format("bpbench: {} of {} cells failed with status \"error\" (see {})\n",
                             summary.errors, summary.cells.size(), summary.results_path);
    // Under a launcher a failing exit is a failed job, which torchrun --max-restarts and a requeue would
    // start again: the grid finished, and its failed cells are results in the file.
    if (!opt.launched) return kExitCellErrors;
  }
  return kExitOk;
}

int dispatch(const std::vector<std::string>& argv) {
  const std::string commands = "run, list, report, compare, history, estimate, hf-config, validate, help";
  if (argv.size() < 2) usage_error("missing command; try bpbench --help", commands);
  const std::string& cmd = argv[1];
  const std::vector<std::string> args(argv.begin() + 2, argv.end());
  if (is_help(cmd)) {
    std::cout << kMainHelp;
    return kExitOk;
  }
  if (cmd == "--version") {
    std::cout << version_text();
    return kExitOk;
  }
  if (cmd == "help") {
    if (args.empty())
      std::cout << kMainHelp;
    else if (args[0] == "run")
      std::cout << run_help();
    else if (args[0] == "list")
      std::cout << kListHelp;
    else if (args[0] == "history")
      return history_main({"--help"});
    else if (args[0] == "report" || args[0] == "compare")
      return args[0] == "report" ? report_main({"--help"}) : compare_main({"--help"});
    else if (args[0] == "estimate")
      std::cout << estimate_help();
    else if (args[0] == "hf-config")
      std::cout << kHfConfigHelp;
    else if (args[0] == "validate")
      std::cout << kValidateHelp;
    else
      usage_error(fmt::format("help: unknown command '{}'", args[0]), commands);
    return kExitOk;
  }
  if (cmd == "run") return cmd_run(args, argv);
  if (cmd == "list") return cmd_list(args);
  // The report and compare layers own their option parsing and exit codes (compare: number of regressions).
  if (cmd == "report") return report_main(args);
  if (cmd == "compare") return compare_main(args);
  if (cmd == "history") return history_main(args);
  if (cmd == "estimate") {
    if (std::any_of(args.begin(), args.end(), is_help)) {
      std::cout << estimate_help();
      return 0;
    }
    return estimate_command(args, std::cout);
  }
  if (cmd == "hf-config") return cmd_hf_config(args);
  if (cmd == "validate") {
    if (std::any_of(args.begin(), args.end(), is_help)) {
      std::cout << kValidateHelp;
      return 0;
    }
    return validate_command(args, std::cout);
  }
  if (cmd == "run-cell") {  // hidden: what an isolated cell's child process runs
    if (args.size() != 1) usage_error("run-cell: expects exactly one job file", "a job file, or - for stdin");
    return run_cell_main(args[0]);
  }
  if (!cmd.empty() && cmd[0] == '-')
    usage_error(fmt::format("unknown option '{}'", cmd), "--help, --version");
  usage_error(fmt::format("unknown command '{}'", cmd), commands);
}

std::string single_line(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}

}  // namespace

int cli_main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  // One write per line: the ranks of a launched run share a terminal, and cerr writes each << at once.
  auto error_line = [](const std::string& what) {
    std::cerr << single_line("bpbench: error: " + what) + "\n";
  };
  try {
    return dispatch(args);
  } catch (const Usage& u) {
    error_line(fmt::format("{} (valid: {})", u.problem, u.valid));
    return kExitUsage;
  } catch (const InputError& e) {
    error_line(e.what());
    return kExitUsage;
  } catch (const std::invalid_argument& e) {  // a library's own check of user input (unknown name, bad shape)
    error_line(e.what());
    return kExitUsage;
  } catch (const c10::Error& e) {
    error_line(e.what_without_backtrace());
    return kExitCellErrors;
  } catch (const std::exception& e) {
    error_line(e.what());
    return kExitCellErrors;
  }
}

}  // namespace bpbench
