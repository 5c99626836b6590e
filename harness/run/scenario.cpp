// scenario.cpp: scenario parsing, driven by key tables (top level and measure here, grid in
// scenario_grid.cpp).
//
// Adding a scenario key is one row in one of those tables: the row carries the parser, the default and the
// text of "(valid: ...)", so error messages and the list of known keys can never drift from what is accepted.
#include "harness/run/scenario.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "harness/model/ops.h"
#include "harness/model/rope_config.h"
#include "harness/objectives/objective.h"
#include "harness/run/run_detail.h"
#include "harness/run/scenario_read.h"
#include "impls/interface/strategy.h"

namespace bpbench {

using nlohmann::json;
using namespace scenario_detail;

void input_error(const std::string& problem, const std::string& valid) {
  throw InputError(fmt::format("{} (valid: {})", problem, valid));
}

namespace {

// ---- measure keys
// -------------------------------------------------------------------------------------------

struct KeyDef {
  std::string key;
  std::function<void(MeasureSpec&, const json&)> parse;
};

TimeSpec parse_time(const json& v) {
  TimeSpec t;
  if (v.is_boolean()) {
    t.enabled = v.get<bool>();
    return t;
  }
  if (!v.is_object())
    input_error(fmt::format("measure.time: expected an object or false, got {}", show(v)),
                "{\"warmup\": N, \"repeat\": N}, false");
  for (const auto& [key, value] : v.items()) {
    if (key == "warmup")
      t.warmup = read_int(value, "measure.time.warmup", 0, "integers >= 0");
    else if (key == "repeat")
      t.repeat = read_int(value, "measure.time.repeat", 0, "integers >= 0");
    else
      input_error(fmt::format("unknown measure.time key '{}'", key), "warmup, repeat");
  }
  return t;
}

// {"reference": "float64", "reference_device": "cell"|"cpu"}, true or false.
void parse_grad_error(MeasureSpec& m, const json& v) {
  const std::string valid =
      "{\"reference\": \"float64\", \"reference_device\": \"cell\" or \"cpu\"}, true, false";
  m.grad_error_reference_device = "cell";
  if (v.is_boolean()) {
    m.grad_error_reference = v.get<bool>() ? "float64" : "";
    return;
  }
  if (!v.is_object())
    input_error(fmt::format("measure.grad_error: expected an object or false, got {}", show(v)), valid);
  m.grad_error_reference = "float64";
  for (const auto& [key, value] : v.items()) {
    if (key == "reference")
      m.grad_error_reference = read_choice(value, "measure.grad_error.reference", "dtype", {"float64"});
    else if (key == "reference_device")
      m.grad_error_reference_device =
          read_choice(value, "measure.grad_error.reference_device", "device", {"cell", "cpu"});
    else
      input_error(fmt::format("unknown measure.grad_error key '{}'", key), "reference, reference_device");
  }
}

std::optional<MeasureSpec::MaxSeqLen> parse_max_seq_len(const json& v) {
  const std::string valid =
      "{\"budget_bytes\": N, \"granularity\": 256, \"upper\": N, \"host_budget_bytes\": N}, or false";
  if (v.is_boolean() && !v.get<bool>()) return std::nullopt;
  if (!v.is_object())
    input_error(fmt::format("measure.max_seq_len: expected an object, got {} {}", type_word(v), show(v)),
                valid);
  MeasureSpec::MaxSeqLen m;
  for (const auto& [key, value] : v.items()) {
    if (key == "budget_bytes" && value.is_null())
      m.budget_bytes.reset();
    else if (key == "budget_bytes")
      m.budget_bytes = read_int(value, "measure.max_seq_len.budget_bytes", 1,
                                "integers >= 1, or null for the GPU's memory");
    else if (key == "granularity")
      m.granularity = read_int(value, "measure.max_seq_len.granularity", 2, "integers >= 2");
    else if (key == "upper")
      m.upper = read_int(value, "measure.max_seq_len.upper", 2, "integers >= 2");
    else if (key == "host_budget_bytes" && value.is_null())
      m.host_budget_bytes.reset();
    else if (key == "host_budget_bytes")
      m.host_budget_bytes = read_int(value, "measure.max_seq_len.host_budget_bytes", 1,
                                     "integers >= 1, or null for this machine's free memory less a margin");
    else
      input_error(fmt::format("unknown measure.max_seq_len key '{}'", key),
                  "budget_bytes, granularity, upper, host_budget_bytes");
  }
  if (m.upper < m.granularity)
    input_error(fmt::format("measure.max_seq_len: upper {} is below granularity {}", m.upper, m.granularity),
                "upper >= granularity");
  return m;
}

const std::vector<KeyDef>& measure_table() {
  static const std::vector<KeyDef> table = {
      {"memory", [](MeasureSpec& m, const json& v) { m.memory = read_bool(v, "measure.memory"); }},
      {"budget_bytes",
       [](MeasureSpec& m, const json& v) {
         if (v.is_null())
           m.budget_bytes.reset();
         else
           m.budget_bytes = read_int(v, "measure.budget_bytes", 0, "integers >= 0, or null for no budget");
       }},
      {"time", [](MeasureSpec& m, const json& v) { m.time = parse_time(v); }},
      {"grad_error", parse_grad_error},
      {"timeline", [](MeasureSpec& m, const json& v) { m.timeline = read_bool(v, "measure.timeline"); }},
      {"device_activity",
       [](MeasureSpec& m, const json& v) { m.device_activity = read_bool(v, "measure.device_activity"); }},
      {"cpp_stacks",
       [](MeasureSpec& m, const json& v) { m.cpp_stacks = read_bool(v, "measure.cpp_stacks"); }},
      {"max_seq_len", [](MeasureSpec& m, const json& v) { m.max_seq_len = parse_max_seq_len(v); }},
      {"train", [](MeasureSpec& m, const json& v) { m.train = TrainSpec::from_json(v); }},
  };
  return table;
}

std::vector<std::string> keys_of(const std::vector<KeyDef>& table) {
  std::vector<std::string> keys;
  for (const auto& d : table) keys.push_back(d.key);
  return keys;
}

// ---- top-level keys
// -----------------------------------------------------------------------------------------

struct TopDef {
  std::string key;
  std::function<void(Scenario&, const json&)> parse;
};

const std::vector<TopDef>& top_table() {
  static const std::vector<TopDef> table = {
      // For editors (scenarios/scenario.schema.json); nothing to bpbench.
      {"$schema",
       [](Scenario&, const json& v) { read_string(v, "$schema", "a path or URL of a JSON Schema"); }},
      {"name", [](Scenario& s, const json& v) { s.name = read_string(v, "name", "a string"); }},
      {"description",
       [](Scenario& s, const json& v) { s.description = read_string(v, "description", "a string"); }},
      {"device",
       [](Scenario& s, const json& v) {
         s.settings.device = read_choice(v, "device", "device", {"cpu", "cuda"});
       }},
      {"seed",
       [](Scenario& s, const json& v) {
         s.settings.seed = static_cast<uint64_t>(read_int(v, "seed", 0, "integers >= 0"));
       }},
      {"threads",
       [](Scenario& s, const json& v) {
         s.settings.threads = read_int(v, "threads", 1, "integers >= 1 (absent: all cores)");
       }},
      {"isolate", [](Scenario& s, const json& v) { s.isolate = read_bool(v, "isolate"); }},
      {"data",
       [](Scenario& s, const json& v) {
         const std::string valid =
             "a path to a JSON file of token-id lists, e.g. [[1, 2, 3], [4, 5]]; the shipped scenarios' "
             "files are made by scripts/text_data.py";
         s.settings.data_path = read_string(v, "data", valid);
         std::error_code ec;
         if (!std::filesystem::is_regular_file(s.settings.data_path, ec))
           input_error(fmt::format("data: cannot open '{}': {}", s.settings.data_path,
                                   std::filesystem::exists(s.settings.data_path, ec) ? "not a regular file"
                                                                                     : "no such file"),
                       valid);
       }},
      {"world_size",
       [](Scenario& s, const json& v) {
         s.settings.world_size = read_int(v, "world_size", 1, "integers >= 1 (ranks on this machine)");
       }},
      {"rope",
       [](Scenario& s, const json& v) {
         const std::string valid = fmt::format(
             "null, or an object of transformers' rope_parameters with rope_type one of {}, e.g. "
             "{{\"rope_type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 32768}}",
             rope_type_names());
         s.settings.rope = v;
         if (v.is_null()) return;
         // Checked here against a neutral base so that a typo fails at once; the runner applies it to each
         // model (and checks it there) before any cell runs.
         RopeConfig base;
         base.max_positions = 32768;
         try {
           rope_with_parameters(base, v);
         } catch (const std::invalid_argument& e) {
           input_error(e.what(), valid);
         }
       }},
      {"rms_norm",
       [](Scenario& s, const json& v) {
         s.settings.rms_norm = read_string(v, "rms_norm", "hf, fused");
         try {
           parse_norm_kernel(s.settings.rms_norm);
         } catch (const std::invalid_argument&) {
           input_error(fmt::format("rms_norm: unknown kernel '{}'", s.settings.rms_norm), "hf, fused");
         }
       }},
      {"router_aux_loss_coef",
       [](Scenario& s, const json& v) {
         s.settings.router_aux_loss_coef =
             read_number(v, "router_aux_loss_coef", 0, false, "numbers >= 0 (0: off; Qwen3-MoE uses 0.001)");
       }},
      {"grid", [](Scenario& s, const json& v) { s.grid = parse_grid(v); }},
      {"measure", [](Scenario& s, const json& v) { s.settings.measure = MeasureSpec::from_json(v); }},
  };
  return table;
}

}  // namespace

// ---- public
// -------------------------------------------------------------------------------------------------

std::vector<std::string> scenario_keys() {
  std::vector<std::string> keys;
  for (const auto& d : top_table()) keys.push_back(d.key);
  return keys;
}

std::vector<std::string> measure_keys() {
  return keys_of(measure_table());
}

json MeasureSpec::to_json() const {
  json j;
  j["memory"] = memory;
  j["budget_bytes"] = budget_bytes ? json(*budget_bytes) : json(nullptr);
  // A training run times its own steps: no time block beside it (from_json refuses one).
  j["time"] = time.enabled && !train ? json{{"warmup", time.warmup}, {"repeat", time.repeat}} : json(false);
  j["grad_error"] = grad_error_reference.empty() ? json(false)
                                                 : json{{"reference", grad_error_reference},
                                                        {"reference_device", grad_error_reference_device}};
  j["timeline"] = timeline;
  j["device_activity"] = device_activity;
  j["cpp_stacks"] = cpp_stacks;
  if (max_seq_len)
    j["max_seq_len"] = {
        {"budget_bytes", max_seq_len->budget_bytes ? json(*max_seq_len->budget_bytes) : json(nullptr)},
        {"granularity", max_seq_len->granularity},
        {"upper", max_seq_len->upper},
        {"host_budget_bytes",
         max_seq_len->host_budget_bytes ? json(*max_seq_len->host_budget_bytes) : json(nullptr)}};
  if (train) j["train"] = train->to_json();
  return j;
}

MeasureSpec MeasureSpec::from_json(const json& j) {
  const auto valid = join(keys_of(measure_table()));
  if (!j.is_object())
    input_error(fmt::format("measure: expected an object, got {}", type_word(j)),
                "an object of keys " + valid);
  MeasureSpec m;
  for (const auto& item : j.items()) {
    const std::string& key = item.key();  // a plain name: C++17 lambdas cannot capture structured bindings
    auto it = std::find_if(measure_table().begin(), measure_table().end(),
                           [&](const KeyDef& d) { return d.key == key; });
    if (it == measure_table().end()) input_error(fmt::format("unknown measure key '{}'", key), valid);
    it->parse(m, item.value());
  }
  if (m.train) {  // one step's measures do not apply to a run of many
    for (const char* key : {"time", "grad_error", "max_seq_len", "timeline", "device_activity", "cpp_stacks"})
      if (j.contains(key) && !(j.at(key).is_boolean() && !j.at(key).get<bool>()) && !j.at(key).is_null())
        input_error(fmt::format("measure.{}: not with measure.train (a training run times every step and "
                                "measures no single-step gradient error, length or timeline)",
                                key),
                    "measure.train with memory, budget_bytes");
    m.grad_error_reference.clear();
  }
  return m;
}

Scenario parse_scenario(const json& j) {
  std::vector<std::string> valid_keys;
  for (const auto& d : top_table()) valid_keys.push_back(d.key);
  if (!j.is_object())
    input_error(fmt::format("scenario: expected a JSON object, got {}", type_word(j)),
                "an object with keys " + join(valid_keys));
  for (const auto& [key, value] : j.items())
    if (std::find(valid_keys.begin(), valid_keys.end(), key) == valid_keys.end())
      input_error(fmt::format("unknown scenario key '{}'", key), join(valid_keys));
  if (!j.contains("grid"))
    input_error("scenario: missing key 'grid'", "an object of grid keys: " + join(grid_keys()));
  Scenario s;
  for (const auto& d : top_table())
    if (j.contains(d.key)) d.parse(s, j.at(d.key));
  // seq_len and measure.max_seq_len exclude each other: a search finds the length the grid would fix.
  const GridAxis& seq =
      *std::find_if(s.grid.begin(), s.grid.end(), [](const GridAxis& a) { return a.key == "seq_len"; });
  const bool has_null =
      std::any_of(seq.values.begin(), seq.values.end(), [](const json& v) { return v.is_null(); });
  if (s.settings.measure.max_seq_len) {
    if (seq.given && !(seq.values.size() == 1 && has_null))
      input_error("grid.seq_len: a measure.max_seq_len search finds seq_len; remove it from the grid",
                  "no seq_len with max_seq_len");
  } else if (!seq.given) {
    input_error("grid: missing key 'seq_len'", "integers >= 2, or measure.max_seq_len to search for it");
  } else if (has_null) {
    input_error("grid.seq_len: null is only valid with measure.max_seq_len", "integers >= 2");
  }
  if (s.settings.measure.max_seq_len && !s.settings.measure.max_seq_len->budget_bytes &&
      s.settings.device == "cpu")
    input_error("measure.max_seq_len: budget_bytes is required on the CPU (a GPU defaults to its memory)",
                "{\"budget_bytes\": N, ...}");
  for (const auto& a : s.grid)
    if (a.key == "impl")
      for (const auto& v : a.values)
        if (is_peer(v.get<std::string>()))
          input_error(fmt::format("grid.impl: '{}' is a peer measured outside bpbench by a module of "
                                  "impls/peers/ (impls/peers/hf_checkpoint.py for hf-checkpoint), not a "
                                  "strategy bpbench runs",
                                  v.get<std::string>()),
                      fmt::format("{}", fmt::join(strategy_names(), ", ")));
  if (s.settings.measure.device_activity && !(s.settings.measure.timeline && s.settings.device == "cuda"))
    input_error("measure.device_activity: CUPTI traces a CUDA step into its timeline's Chrome trace",
                "device cuda with measure.timeline true, or device_activity false");
  if (s.settings.measure.cpp_stacks && !s.settings.measure.timeline)
    input_error("measure.cpp_stacks: the stacks go into the memory_viz pickle of the timeline's step",
                "measure.timeline true, or cpp_stacks false");
  if (!s.settings.data_path.empty()) {
    std::vector<std::string> readers;  // the objectives a file of token sequences can feed
    for (const auto& name : objective_names())
      if (make_objective(name)->reads_data_files()) readers.push_back(name);
    for (const auto& a : s.grid)
      if (a.key == "objective")
        for (const auto& v : a.values)
          if (std::find(readers.begin(), readers.end(), v.get<std::string>()) == readers.end())
            input_error(fmt::format("data: a data file feeds {} cells only; the grid has objective '{}'",
                                    fmt::join(readers, ", "), v.get<std::string>()),
                        fmt::format("objective {} with data, or no data key", fmt::join(readers, " or ")));
  }
  for (const auto& a : s.grid)  // the mesh's groups are world_size / ulysses_degree ring groups of U ranks
    if (a.key == "ulysses_degree")
      for (const auto& v : a.values)
        if (s.settings.world_size % v.get<int64_t>() != 0) {
          std::vector<int64_t> divisors;
          for (int64_t u = 1; u <= s.settings.world_size; ++u)
            if (s.settings.world_size % u == 0) divisors.push_back(u);
          input_error(fmt::format("grid.ulysses_degree: {} does not divide world_size {}", v.get<int64_t>(),
                                  s.settings.world_size),
                      fmt::format("divisors of world_size: {}", fmt::join(divisors, ", ")));
        }
  if (const auto& train = s.settings.measure.train) {
    for (const auto& a : s.grid)
      for (const auto& v : a.values)
        if (a.key == "dtype" && train->precision == "mixed" && v != "bfloat16")
          input_error(fmt::format("measure.train.precision 'mixed' keeps bfloat16 weights with float32 "
                                  "masters; the grid has dtype '{}'",
                                  v.get<std::string>()),
                      "dtype bfloat16 with precision mixed, or precision model");
  }
  s.source = j;
  return s;
}

namespace {

json read_scenario_json(const std::string& text, const std::string& origin) {
  try {
    return json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    if (auto p = what.find("] "); what.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      what = what.substr(p + 2);  // the library's error id means nothing to a user
    input_error(fmt::format("malformed JSON in '{}': {}", origin, what),
                "a JSON object like scenarios/quickstart.json");
  }
}

}  // namespace

Scenario parse_scenario_text(const std::string& text, const std::string& origin) {
  return parse_scenario(read_scenario_json(text, origin));
}

Scenario load_scenario(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string valid = "a path to a scenario JSON file, e.g. scenarios/quickstart.json";
  std::error_code ec;
  if (!fs::exists(path, ec))
    input_error(fmt::format("cannot open scenario file '{}': no such file", path), valid);
  if (fs::is_directory(path, ec))
    input_error(fmt::format("cannot open scenario file '{}': it is a directory", path), valid);
  std::ifstream in(path, std::ios::binary);
  if (!in) input_error(fmt::format("cannot open scenario file '{}': not readable", path), valid);
  std::stringstream buf;
  buf << in.rdbuf();
  json j = read_scenario_json(buf.str(), path);
  // A relative data path is the scenario file's, so the file runs from any directory (a shipped scenario
  // names ../.data/..., where scripts/text_data.py writes).
  if (j.is_object() && j.contains("data") && j.at("data").is_string()) {
    const fs::path data = j.at("data").get<std::string>();
    if (data.is_relative()) j["data"] = (fs::path(path).parent_path() / data).lexically_normal().string();
  }
  Scenario s = parse_scenario(j);
  if (!s.source.contains("name")) s.name = fs::path(path).stem().string();
  return s;
}

}  // namespace bpbench
