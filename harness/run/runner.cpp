// runner.cpp: the loop over a scenario's grid (each cell in this process, in a child or as ranks, or a
// max-length search of child probes), writing results.json after every cell.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "harness/objectives/data_file.h"
#include "harness/run/grid_ranks.h"
#include "harness/run/out_dir.h"
#include "harness/run/run_detail.h"
#include "harness/run/runner.h"
#include "profiles/cuda_build.h"
#include "profiles/memory.h"

namespace bpbench {

using nlohmann::json;
using profiles::MemoryRecorder;
using namespace run_detail;

namespace {

// Checks the scenario's data file against every cell before anything runs: readable, ids within each
// model's vocabulary, enough sequences for the largest batch. One line naming the problem otherwise.
void check_data_file(const Scenario& scenario, const std::vector<Cell>& cells, int64_t world_size) {
  const std::string& path = scenario.settings.data_path;
  if (path.empty()) return;
  const std::string valid = "a JSON list of token-id lists with ids below the model's vocabulary";
  std::map<std::string, int64_t> rows_needed;  // model -> sequences its largest cell needs
  for (const auto& c : cells) {
    // Data-parallel ranks take batch sequences each; sequence-parallel ranks share the same batch; a
    // single-device cell runs on one.
    const auto strategy = make_strategy(c.impl);
    const int64_t copies = strategy->sequence_parallel() || !is_distributed(*strategy) ? 1 : world_size;
    rows_needed[c.model] = std::max(rows_needed[c.model], c.batch * copies);
  }
  for (const auto& [model, rows] : rows_needed) {
    TokenData d;
    try {
      d = load_token_data(path, 2, model_config_of(model).vocab);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      input_error(fmt::format("data: {}", one_line(e.what())), valid);
    }
    if (d.sequences < rows)
      input_error(fmt::format("data: '{}' has {} sequences; model {} needs {} (batch x world_size)", path,
                              d.sequences, model, rows),
                  "a batch no larger than the file's sequences");
  }
}

// " and 5 probes of a search (1 more started)": what a resumed search keeps, and the probes that were
// running.
std::string search_probes_kept(const std::vector<Probe>& probes) {
  const auto started =
      std::count_if(probes.begin(), probes.end(), [](const Probe& p) { return p.status == "started"; });
  return fmt::format(" and {} probes of a search{}", probes.size() - static_cast<size_t>(started),
                     started ? fmt::format(" ({} more started)", started) : "");
}

// A max-length search with offloaded checkpoints and no host_budget_bytes is bounded by this machine's
// available memory (default_host_budget), read once at the run's first sitting and kept in meta, so that a
// resumed search starts where it started before and takes the path it took.
void fix_host_budget(const std::vector<Cell>& cells, json& meta, RunSettings& settings) {
  auto& search = settings.measure.max_seq_len;
  if (!search || search->host_budget_bytes) return;
  if (std::none_of(cells.begin(), cells.end(), [](const Cell& c) { return c.offload != "none"; })) return;
  if (!meta.contains("host_budget_bytes") || !meta.at("host_budget_bytes").is_number_integer())
    meta["host_budget_bytes"] = default_host_budget();
  search->host_budget_bytes = meta.at("host_budget_bytes").get<int64_t>();
}

// Under a launcher the distributed cells run on its ranks: a scenario's world_size, where it sets one,
// must say the same. A distributed search would start ranks of its own for each probe: not over a launcher's.
int64_t launched_world_size(const Scenario& scenario, const std::vector<Cell>& cells,
                            const LaunchedRank& launched) {
  const int64_t asked = scenario.settings.world_size;
  if (asked > 1 && asked != launched.world)
    input_error(
        fmt::format("world_size: the scenario runs its distributed cells on {} ranks; {} started {} "
                    "({})",
                    asked, launched.launcher, launched.world, launched.variables),
        fmt::format("world_size {}, or none (a grid under a launcher takes its ranks)", launched.world));
  if (scenario.settings.measure.max_seq_len)
    for (const auto& c : cells)
      if (is_distributed(*make_strategy(c.impl)))
        input_error(fmt::format("measure.max_seq_len: the search of {} starts its own ranks for each probe, "
                                "which a grid under {} does not",
                                c.impl, launched.launcher),
                    "a search of single-device strategies under a launcher, or `bpbench run` on one machine "
                    "with world_size for a distributed one");
  return launched.world;
}

}  // namespace

void check_world_size(const std::string& device, int64_t world_size, int visible_gpus,
                      const LaunchedRank* launched) {
  // Under a launcher, what must fit a machine's GPUs is the ranks it started there.
  const int64_t ranks = launched ? launched->local_world : world_size;
  if (device != "cuda" || ranks <= 1 || visible_gpus == 0 || ranks <= visible_gpus) return;
  if (launched)
    input_error(
        fmt::format("{} started {} ranks on this machine, and device cuda needs a GPU for each; {} {} "
                    "visible",
                    launched->launcher, ranks, visible_gpus, visible_gpus == 1 ? "is" : "are"),
        fmt::format("at most {} ranks a machine (torchrun --nproc-per-node; CUDA_VISIBLE_DEVICES shows "
                    "the GPUs)",
                    visible_gpus));
  input_error(fmt::format("world_size: {} ranks on device cuda need {} GPUs; {} {} visible (NCCL runs one "
                          "rank per GPU)",
                          world_size, world_size, visible_gpus, visible_gpus == 1 ? "is" : "are"),
              fmt::format("world_size <= {} here (CUDA_VISIBLE_DEVICES shows the GPUs)", visible_gpus));
}

RunSummary run_scenario(const Scenario& scenario, const RunOptions& options) {
  MemoryRecorder::instance();  // installed before the first tensor, so every tensor of every cell is seen
  if (const char* v = std::getenv("BPBENCH_DIST_SHARD_PARAMS"); v && *v)
    input_error(
        "BPBENCH_DIST_SHARD_PARAMS: parameter sharding is a grid axis now, not a variable of the run",
        "unset it, and write \"sharding\": \"zero3\" (or [\"zero2\", \"zero3\"]) in the scenario's grid");
  const auto& launched = options.launched;
  // Ranks that share a machine share its cores, as torchrun's OMP_NUM_THREADS does.
  const int64_t default_share =
      std::max<int64_t>(1, default_threads() / (launched ? launched->local_world : 1));
  const int64_t threads =
      options.threads.value_or(scenario.settings.threads > 0 ? scenario.settings.threads : default_share);
  if (threads < 1) input_error(fmt::format("threads: {} is out of range", threads), "integers >= 1");
  const bool isolate = options.isolate.value_or(scenario.isolate);
  const auto cells = scenario.expand();
  RunSettings settings = scenario.settings;
  settings.threads = threads;
  if (launched) settings.world_size = launched_world_size(scenario, cells, *launched);
  check_data_file(scenario, cells, settings.world_size);
  // A RoPE override that some model cannot take is an input error before anything runs, not a failed cell.
  std::set<std::string> models;
  for (const auto& c : cells)
    if (models.insert(c.model).second) model_config_of(c.model, scenario.settings.rope);
  check_world_size(settings.device, settings.world_size, profiles::cuda_device_count(),
                   launched ? &*launched : nullptr);
  if (launched && launched->rank != 0) {  // every other rank: its share of the cells, and never DIR
    GridSession grid(*launched, settings.device);
    grid.follow(options.self_exe, options.progress);
    return {};
  }
  json meta = collect_meta(scenario, options.argv, threads, isolate);
  std::optional<GridSession> grid;
  if (launched) grid.emplace(*launched, settings.device);
  // A launcher that started the job again (launcher_env.h) resumes it, whatever its argv says.
  const bool restarted = launched && launched->restart > 0;
  const ResumeMode resume_mode =
      restarted && options.resume == ResumeMode::off ? ResumeMode::same : options.resume;
  std::optional<OutDirClaim> claim;
  std::optional<ResumeState> resumed;
  std::optional<ResultsWriter> results_file;
  std::map<size_t, json> kept;  // grid index -> the record of an earlier sitting that the run keeps
  json run_meta;
  try {
    const OutDirUse use = resume_mode != ResumeMode::off ? OutDirUse::resume
                          : options.force                ? OutDirUse::force
                                                         : OutDirUse::fresh;
    claim.emplace(options.out_dir, use);  // held until the run returns
    resumed = load_resume_state(std::filesystem::path(options.out_dir) / "results.json", scenario, cells,
                                meta, resume_mode, restarted);
    if (resumed) kept = resumed->kept_cells;
    run_meta = resumed ? resumed->meta : std::move(meta);
    fix_host_budget(cells, run_meta, settings);
    results_file.emplace(options.out_dir, run_meta, cells.size(), kept);
  } catch (const std::exception& e) {
    if (grid) grid->fail(one_line(e.what()));  // the other ranks end with the same line
    throw;
  }
  ResultsWriter& writer = *results_file;
  if (!claim->moved_aside().empty() && options.progress)
    *options.progress << fmt::format("--force: the earlier results are kept as {}\n",
                                     claim->moved_aside().string());
  // A kept cell's timeline files stay where they are; a new cell never writes over them (--resume-any of
  // another grid can give a new cell a kept cell's index).
  std::set<std::string> kept_timelines;
  for (const auto& [index, cell] : kept)
    if (cell.contains("memory") && cell.at("memory").is_object())
      kept_timelines.insert(cell.at("memory").value("timeline_file", std::string()));
  // The grid in order, but a search under way first: the file holds one search's probes in progress, so an
  // earlier cell that runs again (an "error") must not replace them before they are used, nor the starts they
  // count. Until it starts, the file keeps them as they were.
  std::vector<size_t> order(cells.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (resumed && resumed->search_index) {
    const size_t first = *resumed->search_index;
    std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(first),
                order.begin() + static_cast<std::ptrdiff_t>(first) + 1);
    writer.set_in_progress(first, cells[first], resumed->search_probes);
  }
  if (resumed && options.progress)
    *options.progress << fmt::format(
        "resuming {}{}: {} of {} cells kept{}, {} to run\n", writer.path().string(),
        restarted ? fmt::format(" (restart {} by {})", launched->restart, launched->launcher) : "",
        kept.size(), cells.size(), resumed->search_index ? search_probes_kept(resumed->search_probes) : "",
        cells.size() - kept.size());

  std::vector<std::string> label_keys = {"model", "impl", "objective", "seq_len"};
  for (const auto& key : scenario.varying_keys())
    if (std::find(label_keys.begin(), label_keys.end(), key) == label_keys.end()) label_keys.push_back(key);

  RunSummary summary;
  summary.results_path = writer.path().string();
  const auto start = Clock::now();
  const bool search = scenario.settings.measure.max_seq_len.has_value();
  if (search) label_keys.erase(std::find(label_keys.begin(), label_keys.end(), "seq_len"));
  size_t ran = 0;
  const size_t to_run = cells.size() - kept.size();
  std::map<size_t, CellResult> results;  // by grid index: the summary is in grid order whatever ran first
  auto distributed = [&](size_t i) {
    return settings.world_size > 1 && is_distributed(*make_strategy(cells[i].impl));
  };
  auto job_of = [&](size_t i) {
    CellJob job;
    job.cell = cells[i];
    job.settings = settings;
    if (!distributed(i)) job.settings.world_size = 1;  // a single-device cell of a multi-rank scenario
    job.timeline_dir = writer.path().parent_path().string();
    job.timeline_name = fmt::format("timelines/cell-{:03d}", i);
    if (kept_timelines.count(job.timeline_name + ".json") ||
        kept_timelines.count(job.timeline_name + "-rank0.json"))
      job.timeline_name += fmt::format("-resumed-{}", resumed->meta.at("resumed").size());
    return job;
  };
  auto progress_done = [&](const CellResult& r, const std::string& where) {
    if (r.status == "error") ++summary.errors;
    ++ran;
    if (!options.progress) return;
    const double elapsed = seconds_since(start);
    const double eta = elapsed / static_cast<double>(ran) * static_cast<double>(to_run - ran);
    *options.progress << fmt::format("{}{} | elapsed {}, ETA {}\n", outcome_summary(r), where,
                                     format_seconds(elapsed), format_seconds(eta))
                      << std::flush;
  };
  for (const size_t i : order) {
    auto it = kept.find(i);
    if (it == kept.end()) continue;
    CellResult r = CellResult::from_json(it->second);
    if (options.progress)
      *options.progress << fmt::format("[{}/{}] {} ... kept: {}\n", i + 1, cells.size(),
                                       cells[i].label(label_keys), outcome_summary(r))
                        << std::flush;
    results.emplace(i, std::move(r));
  }
  if (grid) {
    std::vector<GridCell> to_share;
    for (const size_t i : order)
      if (!kept.count(i))
        to_share.push_back({i, job_of(i), distributed(i),
                            resumed && resumed->interrupted.count(i) ? resumed->interrupted.at(i) : 0});
    GridLeader leader;
    leader.dir = writer.path().parent_path().string();
    leader.started = [&](const GridCell& gc, const CellResult& placeholder) {
      writer.add(gc.index, placeholder);
    };
    leader.finished = [&](const GridCell& gc, const CellResult& r) {
      writer.add(gc.index, r);
      if (options.progress)
        *options.progress << fmt::format("[{}/{}] {} ... ", gc.index + 1, cells.size(),
                                         cells[gc.index].label(label_keys));
      const std::string where = r.measured_by.is_object()
                                    ? fmt::format(" (rank {})", r.measured_by.value("rank", int64_t{0}))
                                : gc.distributed ? fmt::format(" ({} ranks)", settings.world_size)
                                                 : "";
      progress_done(r, where);
      results.insert_or_assign(gc.index, r);
    };
    grid->lead(to_share, options.self_exe, leader);
  } else {
    for (const size_t i : order) {
      if (kept.count(i)) continue;
      CellJob job = job_of(i);
      if (options.progress)
        *options.progress << fmt::format("[{}/{}] {} ... ", i + 1, cells.size(), cells[i].label(label_keys))
                          << std::flush;
      const std::vector<Probe> finished =
          resumed && resumed->search_index == i ? resumed->search_probes : std::vector<Probe>{};
      std::vector<Probe> probes;  // this search's, finished ones first: the file's probes in progress
      auto on_probe = [&](const Probe& p) {
        probes.push_back(p);
        writer.set_in_progress(i, job.cell, probes);
        if (!options.progress) return;
        const bool was_kept = std::any_of(finished.begin(), finished.end(), [&](const Probe& f) {
          return f.seq_len == p.seq_len && f.status != "started";
        });
        *options.progress << fmt::format(
                                 "\n    probe T={}: {}{}{} | elapsed {}", p.seq_len, p.status,
                                 p.peak_bytes ? fmt::format(" {} MiB peak", format_mib(p.peak_bytes)) : "",
                                 was_kept ? " (kept)" : "", format_seconds(seconds_since(start)))
                          << std::flush;
      };
      // Before a probe's process starts, the file says so: a run killed during it leaves that on record.
      auto on_start = [&](const Probe& started) {
        std::vector<Probe> with_started = probes;
        with_started.push_back(started);
        writer.set_in_progress(i, job.cell, with_started);
      };
      CellResult r = search ? search_cell_max_seq_len(job, options.self_exe, {on_start, on_probe}, finished)
                     : distributed(i) ? run_cell_distributed(job, options.self_exe)
                     : isolate        ? run_cell_isolated(job, options.self_exe)
                                      : run_cell(job);
      if (search && options.progress) *options.progress << "\n    ";
      writer.add(i, r);
      progress_done(r, "");
      results.emplace(i, std::move(r));
    }
  }
  for (auto& [index, r] : results) summary.cells.push_back(std::move(r));
  writer.finish();
  if (options.table) {
    *options.table << render_table(summary.cells)
                   << "\npeak: LibTorch CPU tensors only (BLAS scratch not counted"
                   << "); MiB = 2^20 bytes. Results: " << summary.results_path << "\n"
                   << std::flush;
  }
  return summary;
}

}  // namespace bpbench
