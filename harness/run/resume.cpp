// resume.cpp: reading an earlier sitting's results.json for `bpbench run --resume` (what is kept: resume.h).
#include "harness/run/resume.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "harness/run/results.h"

namespace bpbench {

using nlohmann::json;

namespace {

const char* kResumeChoices = "--resume-any to keep its matching cells anyway, or another --out directory";

// The first key whose value differs, "key: 'a' in the file, 'b' now".
std::string first_difference(const json& was, const json& now) {
  for (const auto& [key, value] : now.items()) {
    const json old = was.contains(key) ? was.at(key) : json();
    if (old != value)
      return fmt::format("{}: {} in the file, {} now", key,
                         old.dump(-1, ' ', false, json::error_handler_t::replace),
                         value.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  return "";
}

// The GPUs a results file was measured on, by what decides its numbers: model name and memory size (their
// index and capability follow from those). Null for a CPU run, and for files written before GPUs were kept.
json measured_gpus(const json& meta) {
  const json device = meta.value("device", json::object());
  if (!device.is_object() || !device.contains("gpus") || !device.at("gpus").is_array()) return nullptr;
  json gpus = json::array();
  for (const auto& g : device.at("gpus"))
    gpus.push_back(
        {{"name", g.value("name", json())}, {"total_memory_bytes", g.value("total_memory_bytes", json())}});
  return gpus;
}

}  // namespace

json build_identity(const json& meta) {
  const json versions = meta.value("versions", json::object());
  return {
      {"bpbench", versions.value("bpbench", json())}, {"git_commit", meta.value("git_commit", json())},
      {"torch", versions.value("torch", json())},     {"compiler", versions.value("compiler", json())},
      {"cuda", versions.value("cuda", json())},       {"gpus", measured_gpus(meta)},
  };
}

namespace {
// A cell that this many sittings stopped during is not run again on a restart: it may be what stops them
// (a process the OOM killer takes with its rank).
constexpr int64_t kSittingsStoppedInACell = 2;
}  // namespace

std::optional<ResumeState> load_resume_state(const std::filesystem::path& results_path,
                                             const Scenario& scenario, const std::vector<Cell>& cells,
                                             const json& meta, ResumeMode mode, bool restarted) {
  if (mode == ResumeMode::off || !std::filesystem::exists(results_path)) return std::nullopt;
  const std::string where = results_path.string();
  json doc;
  try {
    std::ifstream in(results_path);
    std::stringstream text;
    text << in.rdbuf();
    doc = json::parse(text.str());
  } catch (const std::exception& e) {
    input_error(fmt::format("cannot resume: '{}' is not valid JSON ({})", where, e.what()),
                "a results.json written by bpbench run, or another --out directory");
  }
  const auto readable = readable_results_schemas();
  if (doc.is_object() && doc.contains("schema") &&
      std::find(readable.begin(), readable.end(), doc.value("schema", std::string())) != readable.end())
    upgrade_results(doc, where);  // an older version, read as the current one
  if (!doc.is_object() || doc.value("schema", std::string()) != kResultsSchema || !doc.contains("cells") ||
      !doc.at("cells").is_array() || !doc.contains("meta"))
    input_error(fmt::format("cannot resume: '{}' is not a {} results file", where, kResultsSchema),
                "a results.json written by bpbench run, or another --out directory");
  const json& was = doc.at("meta");
  if (mode == ResumeMode::same) {
    if (was.value("scenario", json()) != scenario.source)
      input_error(
          fmt::format("cannot resume: '{}' holds scenario '{}', not this '{}' (the scenario files differ)",
                      where, was.value("scenario_name", std::string("?")), scenario.name),
          kResumeChoices);
    const std::string diff = first_difference(build_identity(was), build_identity(meta));
    if (!diff.empty())
      input_error(fmt::format("cannot resume: '{}' was written by another build ({})", where, diff),
                  kResumeChoices);
  }

  ResumeState state;
  std::map<std::string, size_t> index_of;  // axes (dumped) -> grid index
  for (size_t i = 0; i < cells.size(); ++i) index_of.emplace(cells[i].axes().dump(), i);
  auto grid_index = [&](const json& axes) -> std::optional<size_t> {
    try {
      auto it = index_of.find(Cell::from_axes(axes).axes().dump());  // normalised as the grid writes it
      if (it != index_of.end()) return it->second;
    } catch (const std::exception&) {
    }
    return std::nullopt;
  };
  for (const json& cell : doc.at("cells")) {
    if (!cell.is_object() || !cell.contains("axes")) continue;
    const auto index = grid_index(cell.at("axes"));
    if (!index) continue;
    const std::string status = cell.value("status", std::string());
    const int64_t interrupted = cell.value("interrupted", int64_t{0});
    if (interrupted > 0) state.interrupted[*index] = interrupted;
    const bool keep = status == "ok" || status == "oom" ||
                      (restarted && (interrupted == 0 || interrupted >= kSittingsStoppedInACell));
    if (keep && !state.kept_cells.count(*index)) {
      json kept = cell;
      if (interrupted > 0) {
        kept.erase("interrupted");
        kept["reason"] = fmt::format(
            "{} sittings stopped during this cell, which a restart does not run again (the last: {})",
            interrupted, cell.value("reason", std::string()));
      }
      state.kept_cells.emplace(*index, kept);
    } else {
      ++state.rerun_cells;
    }
  }
  if (doc.contains("in_progress") && doc.at("in_progress").is_object()) {
    const json& p = doc.at("in_progress");
    const auto index = grid_index(p.value("axes", json()));
    if (index && !state.kept_cells.count(*index)) {
      for (const json& probe : p.value("probes", json::array())) {
        Probe kept = probe_from_json(probe);
        // "started": a probe whose process never reported back; the search counts its starts (runner.h).
        if (kept.status == "ok" || kept.status == "oom" || kept.status == "killed" ||
            kept.status == "started")
          state.search_probes.push_back(kept);
      }
      if (!state.search_probes.empty()) state.search_index = index;
    }
  }
  // The same run goes on under its first meta; with --resume-any the file is this sitting's, and names
  // where its kept cells came from.
  json sitting = {{"time", meta.value("start_time", json())},
                  {"argv", meta.value("argv", json::array())},
                  {"kept_cells", state.kept_cells.size()},
                  {"kept_probes", state.search_probes.size()}};
  if (mode == ResumeMode::any) {
    sitting["from"] = {{"scenario_name", was.value("scenario_name", json())},
                       {"start_time", was.value("start_time", json())},
                       {"build", build_identity(was)}};
    state.meta = meta;
  } else {
    state.meta = was;
    state.meta.erase("end_time");
  }
  if (!state.meta.contains("resumed") || !state.meta.at("resumed").is_array())
    state.meta["resumed"] = json::array();
  state.meta["resumed"].push_back(sitting);
  return state;
}

}  // namespace bpbench
