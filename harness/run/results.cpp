// results.cpp: result records <-> JSON, run metadata, the atomically rewritten results.json, console tables.
#include "harness/run/results.h"

#include <fmt/format.h>
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
#include "profiles/cuda_build.h"

namespace bpbench {

using nlohmann::json;

namespace {

json opt_number(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}

std::optional<double> read_opt_number(const json& j, const char* key) {
  if (!j.contains(key) || !j.at(key).is_number()) return std::nullopt;
  return j.at(key).get<double>();
}

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

std::string hostname() {
  char buf[256] = {0};
  return gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : "unknown";
}

}  // namespace

// ---- CellResult
// ---------------------------------------------------------------------------------------------

namespace {

// FlopCounts' fields by their JSON name, in flop_count.h's order.
constexpr std::pair<const char*, int64_t FlopCounts::*> kFlopFields[] = {
    {"forward_matmul", &FlopCounts::forward_matmul},
    {"forward_attention", &FlopCounts::forward_attention},
    {"backward_matmul", &FlopCounts::backward_matmul},
    {"backward_attention", &FlopCounts::backward_attention},
    {"recompute_matmul", &FlopCounts::recompute_matmul},
    {"recompute_attention", &FlopCounts::recompute_attention},
    {"attention_rescore", &FlopCounts::attention_rescore},
    {"attention_masked", &FlopCounts::attention_masked},
    {"attention_dense", &FlopCounts::attention_dense}};

json compute_to_json(const ComputeResult& c) {
  json counts = json::object();
  for (const auto& [name, field] : kFlopFields) counts[name] = c.counts.*field;
  return {{"model_flops", c.counts.model()},
          {"hardware_flops", c.counts.hardware()},
          {"tflops_per_s", opt_number(c.tflops_per_s)},
          {"mfu", opt_number(c.mfu)},
          {"hfu", opt_number(c.hfu)},
          {"peak", c.peak},
          {"counts", counts}};
}

ComputeResult compute_from_json(const json& j) {
  ComputeResult c;
  const json& counts = j.at("counts");
  for (const auto& [name, field] : kFlopFields) c.counts.*field = counts.at(name).get<int64_t>();
  c.tflops_per_s = read_opt_number(j, "tflops_per_s");
  c.mfu = read_opt_number(j, "mfu");
  c.hfu = read_opt_number(j, "hfu");
  c.peak = j.value("peak", json());
  return c;
}

}  // namespace

json CellResult::to_json() const {
  json j;
  j["axes"] = cell.axes();
  j["threads"] = threads;
  j["status"] = status;
  j["reason"] = reason;
  j["loss"] = opt_number(loss);
  j["wall_s"] = wall_s;
  j["uses_partition"] = uses_partition;
  j["uses_logits_partition"] = uses_logits_partition;
  j["rope"] = rope;
  j["sliding_window"] = sliding_window;
  if (!train.is_null()) j["train"] = train;
  if (memory) {
    j["memory"] = {
        {"base_bytes", memory->base_bytes},
        {"peak_bytes", memory->peak_bytes},
        {"peak_above_base_bytes", memory->peak_bytes - memory->base_bytes},
        {"peak_by_category", memory->peak_by_category},
        {"estimate_bytes", memory->estimate_bytes ? json(*memory->estimate_bytes) : json(nullptr)}};
    if (!memory->timeline_file.empty()) j["memory"]["timeline_file"] = memory->timeline_file;
    if (!memory->trace_file.empty()) j["memory"]["trace_file"] = memory->trace_file;
    if (memory->reserved_peak_bytes) j["memory"]["reserved_peak_bytes"] = *memory->reserved_peak_bytes;
    if (memory->alloc_retries) j["memory"]["alloc_retries"] = *memory->alloc_retries;
    if (!memory->snapshot_file.empty()) j["memory"]["snapshot_file"] = memory->snapshot_file;
    if (!memory->device_activity.is_null()) j["memory"]["device_activity"] = memory->device_activity;
    if (memory->host_peak_bytes) j["memory"]["host_peak_bytes"] = *memory->host_peak_bytes;
    if (memory->estimate_host_bytes) j["memory"]["estimate_host_bytes"] = *memory->estimate_host_bytes;
  } else {
    j["memory"] = nullptr;
  }
  if (time) {
    j["time"] = {{"median_s", time->median_s},   {"min_s", time->min_s},   {"max_s", time->max_s},
                 {"count", time->runs_s.size()}, {"warmup", time->warmup}, {"runs_s", time->runs_s}};
  } else {
    j["time"] = nullptr;
  }
  if (grad_error) {
    json g = {{"reference", grad_error->reference}, {"reference_device", grad_error->reference_device}};
    if (!grad_error->error.empty()) {
      g["error"] = grad_error->error;
    } else {
      g["reference_loss"] = grad_error->reference_loss;
      g["loss_abs_error"] = grad_error->loss_abs_error;
      json groups = json::object();
      for (const auto& [name, s] : grad_error->groups) groups[name] = s.to_json();
      g["groups"] = groups;
    }
    j["grad_error"] = g;
  } else {
    j["grad_error"] = nullptr;
  }
  j["compute"] = compute ? compute_to_json(*compute) : json(nullptr);
  if (!data.is_null()) j["data"] = data;
  if (max_len) {
    j["max_seq_len"] = max_len->max_seq_len;
    j["hit_upper"] = max_len->hit_upper;
    j["search"] = {{"budget_bytes", max_len->search.budget_bytes},
                   {"granularity", max_len->search.granularity},
                   {"upper", max_len->search.upper},
                   {"error", max_len->error}};
    if (max_len->host_budget_bytes) j["search"]["host_budget_bytes"] = *max_len->host_budget_bytes;
    json probes = json::array();
    for (const auto& p : max_len->probes) probes.push_back(probe_to_json(p));
    j["probes"] = probes;
  }
  if (!comm.is_null()) j["comm"] = comm;
  if (world_size > 1) {
    j["world_size"] = world_size;
    j["ranks"] = ranks;
  }
  return j;
}

CellResult CellResult::from_json(const json& j) {
  CellResult r;
  r.cell = Cell::from_axes(j.at("axes"));
  r.threads = j.value("threads", int64_t{0});
  r.status = j.at("status").get<std::string>();
  r.reason = j.value("reason", std::string());
  r.loss = read_opt_number(j, "loss");
  r.wall_s = j.value("wall_s", 0.0);
  r.uses_partition = j.value("uses_partition", false);
  r.uses_logits_partition = j.value("uses_logits_partition", false);
  r.rope = j.value("rope", json());  // absent in files written before it was recorded
  r.sliding_window = j.value("sliding_window", json());
  r.train = j.value("train", json());
  if (j.contains("memory") && j.at("memory").is_object()) {
    const json& m = j.at("memory");
    MemoryResult mem;
    mem.base_bytes = m.at("base_bytes").get<int64_t>();
    mem.peak_bytes = m.at("peak_bytes").get<int64_t>();
    if (m.contains("peak_by_category"))
      mem.peak_by_category = m.at("peak_by_category").get<std::map<std::string, int64_t>>();
    if (m.contains("estimate_bytes") && m.at("estimate_bytes").is_number_integer())
      mem.estimate_bytes = m.at("estimate_bytes").get<int64_t>();
    mem.timeline_file = m.value("timeline_file", std::string());
    mem.trace_file = m.value("trace_file", std::string());
    if (m.contains("reserved_peak_bytes") && m.at("reserved_peak_bytes").is_number_integer())
      mem.reserved_peak_bytes = m.at("reserved_peak_bytes").get<int64_t>();
    if (m.contains("alloc_retries") && m.at("alloc_retries").is_number_integer())
      mem.alloc_retries = m.at("alloc_retries").get<int64_t>();
    mem.snapshot_file = m.value("snapshot_file", std::string());
    for (auto [key, field] : {std::pair{"host_peak_bytes", &MemoryResult::host_peak_bytes},
                              std::pair{"estimate_host_bytes", &MemoryResult::estimate_host_bytes}})
      if (m.contains(key) && m.at(key).is_number_integer()) mem.*field = m.at(key).get<int64_t>();
    mem.device_activity = m.value("device_activity", json());
    r.memory = mem;
  }
  if (j.contains("time") && j.at("time").is_object()) {
    const json& t = j.at("time");
    TimeResult tr;
    tr.median_s = t.at("median_s").get<double>();
    tr.min_s = t.at("min_s").get<double>();
    tr.max_s = t.at("max_s").get<double>();
    tr.warmup = t.value("warmup", int64_t{0});
    tr.runs_s = t.at("runs_s").get<std::vector<double>>();
    r.time = tr;
  }
  if (j.contains("grad_error") && j.at("grad_error").is_object()) {
    const json& g = j.at("grad_error");
    GradErrorResult ge;
    ge.reference = g.value("reference", std::string("float64"));
    ge.reference_device = g.value("reference_device", std::string());
    ge.error = g.value("error", std::string());
    ge.reference_loss = g.value("reference_loss", 0.0);
    ge.loss_abs_error = g.value("loss_abs_error", 0.0);
    if (g.contains("groups")) {
      for (const auto& [name, s] : g.at("groups").items()) {
        ErrorStats e;
        e.er_abs = s.at("er_abs").get<double>();
        e.er_rel = s.at("er_rel").get<double>();
        e.max_abs = s.at("max_abs").get<double>();
        e.rel_l2 = s.at("rel_l2").get<double>();
        e.count = s.at("count").get<int64_t>();
        ge.groups[name] = e;
      }
    }
    r.grad_error = ge;
  }
  if (j.contains("compute") && j.at("compute").is_object()) r.compute = compute_from_json(j.at("compute"));
  if (j.contains("data")) r.data = j.at("data");
  if (j.contains("max_seq_len") && j.contains("search")) {
    const json& s = j.at("search");
    MaxLenRecord m;
    m.search.budget_bytes = s.at("budget_bytes").get<int64_t>();
    m.search.granularity = s.at("granularity").get<int64_t>();
    m.search.upper = s.at("upper").get<int64_t>();
    m.error = s.value("error", std::string());
    if (s.contains("host_budget_bytes")) m.host_budget_bytes = s.at("host_budget_bytes").get<int64_t>();
    m.max_seq_len = j.at("max_seq_len").get<int64_t>();
    m.hit_upper = j.value("hit_upper", false);
    for (const auto& p : j.value("probes", json::array())) m.probes.push_back(probe_from_json(p));
    r.max_len = m;
  }
  if (j.contains("comm")) r.comm = j.at("comm");
  r.world_size = j.value("world_size", int64_t{1});
  if (j.contains("ranks")) r.ranks = j.at("ranks");
  return r;
}

json probe_to_json(const Probe& p) {
  json j = {{"seq_len", p.seq_len}, {"status", p.status}, {"peak_bytes", p.peak_bytes}, {"reason", p.reason}};
  if (p.status == "started") j["attempts"] = p.attempts;
  return j;
}

Probe probe_from_json(const json& j) {
  return {j.at("seq_len").get<int64_t>(), j.at("status").get<std::string>(),
          j.value("peak_bytes", int64_t{0}), j.value("reason", std::string()),
          j.value("attempts", int64_t{0})};
}

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
  return {
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
      {"hostname", hostname()},
      {"scenario_name", scenario.name},
      {"scenario", scenario.source},
      {"memory_note", "peaks count LibTorch CPU tensors only, not BLAS scratch buffers (oneDNN is off)"},
  };
}

// ---- results.json
// -------------------------------------------------------------------------------------------

void write_json_atomically(const std::filesystem::path& path, const json& j) {
  const auto tmp = path.string() + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw std::runtime_error(fmt::format("cannot write '{}': {}", tmp, std::strerror(errno)));
  const std::string text = dump(j, 2) + "\n";
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
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    input_error(fmt::format("cannot create output directory '{}': {}", dir.string(),
                            ec ? ec.message() : "a file is in the way"),
                "a writable directory path");
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
    const std::string impl = c.offload == "none" ? c.impl : c.impl + " +offload";
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
