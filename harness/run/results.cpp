// results.cpp: result records <-> JSON, run metadata, the atomically rewritten results.json, console tables.
#include "harness/run/results.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <thread>

#include "harness/run/json_schema.h"
#include "harness/run/out_dir.h"
#include "harness/run/run_detail.h"
#include "profiles/cuda_build.h"
#include "profiles/heap_policy.h"

namespace bpbench {

using nlohmann::json;

namespace {

// One translation: a file of version `from` into the version after it. A translation rewrites what changed
// meaning and nothing else. Empty while there is one version.
struct ResultsUpgrade {
  const char* from;
  void (*to_next)(json& doc);
};
const std::vector<ResultsUpgrade>& results_upgrades() {
  static const std::vector<ResultsUpgrade> upgrades = {};
  return upgrades;
}

}  // namespace

std::vector<std::string> readable_results_schemas() {
  std::vector<std::string> names;
  for (const auto& u : results_upgrades()) names.emplace_back(u.from);
  names.emplace_back(kResultsSchema);
  return names;
}

std::string upgrade_results(json& doc, const std::string& origin) {
  const auto version_of = [](const json& d) {
    return d.is_object() && d.contains("schema") && d["schema"].is_string() ? d["schema"].get<std::string>()
                                                                            : std::string();
  };
  const std::string written = version_of(doc);
  if (written.empty())
    input_error(fmt::format("'{}' is not a bpbench results file (no \"schema\")", origin),
                "a results.json written by bpbench run");
  for (std::string now = written; now != kResultsSchema; now = version_of(doc)) {
    const auto& upgrades = results_upgrades();
    const auto step = std::find_if(upgrades.begin(), upgrades.end(),
                                   [&](const ResultsUpgrade& u) { return now == u.from; });
    if (step == upgrades.end())
      input_error(fmt::format("'{}' has schema '{}', which this bpbench cannot read", origin, now),
                  fmt::format("{}", fmt::join(readable_results_schemas(), ", ")));
    step->to_next(doc);
  }
  return written;
}

namespace {

// Invalid UTF-8 in an exception message must not make the results unwritable.
std::string dump(const json& j, int indent) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

std::string git_commit() {
  const std::string cmd = fmt::format("git -C '{}' rev-parse HEAD 2>/dev/null", BPBENCH_SOURCE_DIR);
  FILE* p = popen(cmd.c_str(), "r");  // popen execs a shell: no fork-without-exec of a LibTorch process
  if (!p) return "unknown";
  char buf[128] = {0};
  std::string out = fgets(buf, sizeof buf, p) ? buf : "";
  const int rc = pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return rc == 0 && out.size() == 40 ? out : "unknown";
}

}  // namespace

// ---- CellResult
// ---------------------------------------------------------------------------------------------
// to_json and from_json: result_fields.cpp, from the tables of its fields.

std::optional<double> CellResult::grad_rel_l2() const {
  if (!grad_error) return std::nullopt;
  auto it = grad_error->groups.find("all");
  if (it == grad_error->groups.end()) return std::nullopt;
  return it->second.rel_l2;
}

// ---- meta
// ---------------------------------------------------------------------------------------------------

std::string iso8601_utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string cpu_description() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) break;
    auto s = line.substr(colon + 1);
    s.erase(0, s.find_first_not_of(" \t"));
    return s;
  }
  return "unknown CPU";
}

namespace {

// "NVIDIA H100 80GB HBM3 (79.2 GiB) x 2", or "no CUDA device".
std::string gpus_description(const json& gpus) {
  if (gpus.empty()) return "no CUDA device";
  std::map<std::string, int> count;
  std::vector<std::string> order;
  for (const auto& g : gpus) {
    const std::string name =
        fmt::format("{} ({:.1f} GiB)", g.at("name").get<std::string>(),
                    static_cast<double>(g.at("total_memory_bytes").get<int64_t>()) / (1 << 30));
    if (count[name]++ == 0) order.push_back(name);
  }
  std::string out;
  for (const auto& name : order) out += (out.empty() ? "" : ", ") + fmt::format("{} x {}", name, count[name]);
  return out;
}

}  // namespace

json collect_meta(const Scenario& scenario, const std::vector<std::string>& argv, int64_t threads,
                  bool isolate) {
  json device = {{"kind", scenario.settings.device},
                 {"cpu", cpu_description()},
                 {"cores", std::thread::hardware_concurrency()}};
  if (scenario.settings.device == "cuda") {
    device["cuda_devices"] = profiles::cuda_device_count();
    // Which GPUs wrote the numbers (resume refuses another model or memory size: resume.h), and the allocator
    // settings that change reserved bytes and fragmentation.
    device["gpus"] = profiles::cuda_devices();
    const char* alloc_conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
    device["pytorch_cuda_alloc_conf"] = alloc_conf ? json(alloc_conf) : json(nullptr);
  }
  device["description"] =
      scenario.settings.device == "cuda"
          ? fmt::format("{}, host {}", gpus_description(device["gpus"]), device["cpu"].get<std::string>())
          : fmt::format("{}, {} cores", device["cpu"].get<std::string>(),
                        std::thread::hardware_concurrency());
  json meta = {
      {"bpbench_version", kBpbenchVersion},
      {"versions",
       {{"bpbench", kBpbenchVersion},
        {"torch", std::string(TORCH_VERSION)},
        {"fmt", fmt::format("{}.{}.{}", FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100)},
        {"nlohmann_json", fmt::format("{}.{}.{}", NLOHMANN_JSON_VERSION_MAJOR, NLOHMANN_JSON_VERSION_MINOR,
                                      NLOHMANN_JSON_VERSION_PATCH)},
        {"compiler", __VERSION__},
        {"cuda", profiles::cuda_build_info()}}},
      {"argv", argv},
      {"device", device},
      {"threads", threads},
      {"isolate", isolate},
      {"git_commit", git_commit()},
      {"start_time", iso8601_utc_now()},
      {"hostname", run_detail::host_name()},
      {"scenario_name", scenario.name},
      {"scenario", scenario.source},
      {"memory_note", "peaks count LibTorch CPU tensors only, not BLAS scratch buffers (oneDNN is off)"},
  };
  if (const std::string heap = profiles::heap_policy_note(); !heap.empty()) meta["heap"] = heap;
  return meta;
}

// ---- results.json
// -------------------------------------------------------------------------------------------

void write_json_atomically(const std::filesystem::path& path, const json& j) {
  write_file_atomically(path, dump(j, 2) + "\n");
}

void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  const auto tmp = path.string() + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw std::runtime_error(fmt::format("cannot write '{}': {}", tmp, std::strerror(errno)));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 &&
                  fsync(fileno(f)) == 0;
  const int err = errno;
  std::fclose(f);
  if (!ok) {
    std::remove(tmp.c_str());
    throw std::runtime_error(fmt::format("cannot write '{}': {}", tmp, std::strerror(err)));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    throw std::runtime_error(fmt::format("cannot rename '{}' to '{}': {}", tmp, path.string(), ec.message()));
}

ResultsWriter::ResultsWriter(const std::filesystem::path& dir, json meta, size_t cells_total,
                             std::map<size_t, json> carried)
    : cells_(std::move(carried)) {
  make_output_dir(dir);
  path_ = dir / "results.json";
  doc_ = {{"schema", kResultsSchema},
          {"complete", false},
          {"cells_total", cells_total},
          {"meta", std::move(meta)}};
  try {
    write();
  } catch (const std::exception& e) {
    input_error(e.what(), "a writable directory path");
  }
}

void ResultsWriter::add(size_t index, const CellResult& cell) {
  cells_[index] = cell.to_json();
  if (doc_.contains("in_progress") && doc_["in_progress"].value("index", size_t{0}) == index)
    doc_.erase("in_progress");
  write();
}

void ResultsWriter::add(const CellResult& cell) {
  add(cells_.empty() ? 0 : cells_.rbegin()->first + 1, cell);
}

void ResultsWriter::set_in_progress(size_t index, const Cell& cell, const std::vector<Probe>& probes) {
  json list = json::array();
  for (const auto& p : probes) list.push_back(probe_to_json(p));
  doc_["in_progress"] = {{"index", index}, {"axes", cell.axes()}, {"probes", list}};
  write();
}

void ResultsWriter::finish() {
  doc_["complete"] = true;
  doc_["meta"]["end_time"] = iso8601_utc_now();
  write();
}

void ResultsWriter::write() {
  json doc = doc_;
  json cells = json::array();
  for (const auto& [index, cell] : cells_) cells.push_back(cell);
  doc["cells"] = std::move(cells);
  // The test suite sets BPBENCH_VALIDATE_RESULTS=1: every file a test makes bpbench write must match the
  // published schema, so a field written without its schema entry fails there, not in a user's reader.
  static const bool validate = [] {
    const char* v = std::getenv("BPBENCH_VALIDATE_RESULTS");
    return v && std::string(v) == "1";
  }();
  if (validate)
    if (const auto why = schema_violation(results_schema(), doc))
      throw std::logic_error(
          fmt::format("{} does not match reports/results.schema.json: {}", path_.string(), *why));
  write_json_atomically(path_, doc);
}

// ---- rendering
// ----------------------------------------------------------------------------------------------

std::string format_mib(int64_t bytes) {
  return fmt::format("{:.1f}", static_cast<double>(bytes) / (1 << 20));
}

std::string format_seconds(double s) {
  const auto t = static_cast<int64_t>(s + 0.5);
  if (t < 60) return fmt::format("{}s", t);
  if (t < 3600) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}h{:02d}m", t / 3600, t / 60 % 60);
}

std::string outcome_summary(const CellResult& r) {
  if (r.status != "ok") {
    std::string why = r.reason.size() > 120 ? r.reason.substr(0, 117) + "..." : r.reason;
    return why.empty() ? r.status : fmt::format("{} ({})", r.status, why);
  }
  std::string s = "ok";
  if (r.max_len)
    return fmt::format("ok max_seq_len {}{} ({} probes)", r.max_len->hit_upper ? ">= " : "",
                       r.max_len->max_seq_len, r.max_len->probes.size());
  if (r.memory) s += fmt::format(" {} MiB peak", format_mib(r.memory->peak_bytes));
  if (r.time) s += fmt::format("{} {:.3g} s", r.memory ? "," : "", r.time->median_s);
  if (r.memory && r.memory->files_not_written.is_object() && !r.memory->files_not_written.empty())
    s += fmt::format("; {} of its files not written ({})", r.memory->files_not_written.size(),
                     r.memory->files_not_written.begin().value().get<std::string>());
  return s;
}

std::string render_table(const std::vector<CellResult>& cells) {
  std::vector<std::string> header = {"model",           "impl",   "objective",  "T",
                                     "partition",       "status", "peak (MiB)", "above base (MiB)",
                                     "time median (s)", "loss",   "grad rel L2"};
  // Numbers align right, names left.
  std::vector<bool> right = {false, false, false, true, true, false, true, true, true, true, true};
  // Offloaded cells' host bytes get a column of their own, beside the device's, only where there are some.
  const bool any_host = std::any_of(cells.begin(), cells.end(), [](const CellResult& r) {
    return r.memory && r.memory->host_peak_bytes.has_value();
  });
  constexpr size_t kHostColumn = 8;
  if (any_host) {
    header.insert(header.begin() + kHostColumn, "host (MiB)");
    right.insert(right.begin() + kHostColumn, true);
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : cells) {
    const Cell& c = r.cell;
    std::string part = "-";
    if (r.uses_partition || r.uses_logits_partition)
      part = fmt::format("{}/{}", r.uses_partition ? std::to_string(c.partition) : "-",
                         r.uses_logits_partition ? std::to_string(c.logits_partition) : "-");
    const auto rel = r.grad_rel_l2();
    const std::string length =
        r.max_len ? fmt::format("max {}{}", r.max_len->hit_upper ? ">=" : "", r.max_len->max_seq_len)
                  : std::to_string(c.seq_len);
    // The ring strategies' 2-D mesh beside the plain ring: "ring U=2"; ZeRO-3: "zero3"; offloaded:
    // "+offload" (the checkpoints), "+offload optimizer", "+offload checkpoints,optimizer".
    const std::string impl = c.impl + (c.ulysses_degree > 1 ? fmt::format(" U={}", c.ulysses_degree) : "") +
                             (c.sharding == "zero3" ? " zero3" : "") +
                             (c.offload == "none"          ? ""
                              : c.offload == "checkpoints" ? " +offload"
                                                           : " +offload " + c.offload);
    rows.push_back({c.model, impl, c.objective, length, part, r.status,
                    r.memory ? format_mib(r.memory->peak_bytes) : "-",
                    r.memory ? format_mib(r.memory->peak_bytes - r.memory->base_bytes) : "-",
                    r.time ? fmt::format("{:.3f}", r.time->median_s) : "-",
                    r.loss ? fmt::format("{:.6g}", *r.loss) : "-", rel ? fmt::format("{:.2e}", *rel) : "-"});
    if (any_host)
      rows.back().insert(rows.back().begin() + kHostColumn, r.memory && r.memory->host_peak_bytes
                                                                ? format_mib(*r.memory->host_peak_bytes)
                                                                : "-");
  }
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) {
    width[i] = header[i].size();
    for (const auto& row : rows) width[i] = std::max(width[i], row[i].size());
  }
  auto line = [&](const std::vector<std::string>& cols) {
    std::string s = "|";
    for (size_t i = 0; i < cols.size(); ++i)
      s += right[i] ? fmt::format(" {:>{}} |", cols[i], width[i])
                    : fmt::format(" {:<{}} |", cols[i], width[i]);
    return s + "\n";
  };
  std::string out = line(header) + "|";
  for (size_t i = 0; i < header.size(); ++i)
    out += std::string(width[i] + 1, '-') + (right[i] ? ":" : "-") + "|";
  out += "\n";
  for (const auto& row : rows) out += line(row);
  return out;
}

}  // namespace bpbench
