// scenario.cpp: scenario parsing and grid expansion, driven by three key tables (top level, grid, measure).
//
// Adding a scenario key is one row in one of those tables: the row carries the parser, the default and the
// text of "(valid: ...)", so error messages and the list of known keys can never drift from what is accepted.
#include "harness/scenario.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <variant>

#include "harness/hf_model.h"
#include "harness/model_config.h"
#include "harness/objective.h"
#include "harness/rope_config.h"
#include "impls/strategy.h"

namespace bpbench {

using nlohmann::json;

void input_error(const std::string& problem, const std::string& valid) {
  throw InputError(fmt::format("{} (valid: {})", problem, valid));
}

namespace {

std::string join(const std::vector<std::string>& items) {
  return fmt::format("{}", fmt::join(items, ", "));
}

// A value as the user wrote it, short enough for a one-line message.
std::string show(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::string type_word(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  return "an object";
}

int64_t read_int(const json& v, const std::string& where, int64_t min, const std::string& valid) {
  int64_t i = 0;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      input_error(where + ": " + show(v) + " is too large", valid);
    i = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    i = v.get<int64_t>();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
             std::floor(v.get<double>()) == v.get<double>() && std::abs(v.get<double>()) < 9e18) {
    i = static_cast<int64_t>(v.get<double>());  // 1e6 is a fine way to write an integer
  } else {
    input_error(fmt::format("{}: expected an integer, got {} {}", where, type_word(v), show(v)), valid);
  }
  if (i < min) input_error(fmt::format("{}: {} is out of range", where, i), valid);
  return i;
}

double read_number(const json& v, const std::string& where, double min, bool exclusive,
                   const std::string& valid) {
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    input_error(fmt::format("{}: expected a number, got {} {}", where, type_word(v), show(v)), valid);
  const double d = v.get<double>();
  if (d < min || (exclusive && d == min))
    input_error(fmt::format("{}: {} is out of range", where, show(v)), valid);
  return d;
}

bool read_bool(const json& v, const std::string& where) {
  if (!v.is_boolean())
    input_error(fmt::format("{}: expected true or false, got {}", where, show(v)), "true, false");
  return v.get<bool>();
}

std::string read_string(const json& v, const std::string& where, const std::string& valid) {
  if (!v.is_string())
    input_error(fmt::format("{}: expected a string, got {} {}", where, type_word(v), show(v)), valid);
  return v.get<std::string>();
}

// ---- grid keys
// ----------------------------------------------------------------------------------------------

using Member = std::variant<std::string Cell::*, int64_t Cell::*, double Cell::*, bool Cell::*>;

struct AxisDef {
  std::string key;
  Member member;
  bool required = false;
  json fallback;                                      // the value when the grid omits the key
  std::function<std::vector<std::string>()> choices;  // string axes: every valid name
  double min = 0;                                     // numeric axes: the smallest valid value
  bool exclusive_min = false;
  // Integer axes that accept null (stored as 0): what null means, for "(valid: ...)". Partition axes: one
  // chunk of seq_len rows; seq_len: found by a max-sequence-length search.
  const char* null_means = nullptr;
  // String axes: a value outside choices() that is still valid (a model directory); throws InputError for one
  // that looks meant but is broken, returns false for one that is simply unknown.
  std::function<bool(const std::string& value, const std::string& where)> also_accepts = nullptr;
  const char* also_valid = nullptr;  // what also_accepts accepts, for "(valid: ...)"

  std::string valid() const {
    if (std::holds_alternative<std::string Cell::*>(member))
      return also_valid ? join(choices()) + ", or " + also_valid : join(choices());
    if (std::holds_alternative<bool Cell::*>(member)) return "true, false";
    const char* what = std::holds_alternative<int64_t Cell::*>(member) ? "integers" : "numbers";
    std::string s = fmt::format("{} {} {}", what, exclusive_min ? ">" : ">=", min);
    return null_means ? fmt::format("{}, or null for {}", s, null_means) : s;
  }

  // The value checked and normalised (1e3 -> 1000); throws InputError naming `where`.
  json check(const json& v, const std::string& where) const {
    if (v.is_null() && null_means) return v;
    return std::visit(
        [&](auto m) -> json {
          using T = std::remove_reference_t<decltype(std::declval<Cell>().*m)>;
          if constexpr (std::is_same_v<T, std::string>) {
            std::string s = read_string(v, where, valid());
            auto names = choices();
            if (std::find(names.begin(), names.end(), s) == names.end() &&
                !(also_accepts && also_accepts(s, where)))
              input_error(fmt::format("{}: unknown {} '{}'", where, key, s), valid());
            return s;
          } else if constexpr (std::is_same_v<T, int64_t>) {
            return read_int(v, where, static_cast<int64_t>(min) + (exclusive_min ? 1 : 0), valid());
          } else if constexpr (std::is_same_v<T, double>) {
            return read_number(v, where, min, exclusive_min, valid());
          } else {
            return read_bool(v, where);
          }
        },
        member);
  }

  void assign(Cell& cell, const json& v) const {
    if (v.is_null()) {
      cell.*std::get<int64_t Cell::*>(member) = 0;  // resolved to seq_len once every axis is set
      return;
    }
    std::visit([&](auto m) { v.get_to(cell.*m); }, member);
  }

  json read(const Cell& cell) const {
    if (null_means && cell.*std::get<int64_t Cell::*>(member) == 0) return nullptr;
    return std::visit([&](auto m) { return json(cell.*m); }, member);
  }
};

std::vector<std::string> model_choices() {
  std::vector<std::string> names;
  for (const auto& p : model_presets()) names.push_back(p.name);
  return names;
}

// A model value that is not a preset may be a Hugging Face model directory. Anything that names an existing
// path, or looks like one, is checked here (config.json readable and of a supported architecture), so a
// broken directory is reported when the scenario is read, not cells later; the weights are checked when
// loaded.
bool accepts_model_dir(const std::string& value, const std::string& where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool exists = fs::exists(value, ec);
  if (!exists && value.find('/') == std::string::npos) return false;  // just an unknown preset name
  const std::string valid = "a preset name, or a directory with config.json and model.safetensors (" +
                            hf_architecture_names() + ")";
  if (!exists) input_error(fmt::format("{}: model directory '{}' does not exist", where, value), valid);
  if (!fs::is_directory(value, ec))
    input_error(fmt::format("{}: model '{}' is a file, not a model directory", where, value), valid);
  if (!is_hf_model_dir(value))
    input_error(fmt::format("{}: model directory '{}' has no config.json", where, value), valid);
  try {
    read_hf_config(value);
  } catch (const std::exception& e) {
    input_error(fmt::format("{}: {}", where, e.what()), valid);
  }
  return true;
}

// The row order is the expansion order (the last row varies fastest) and the order of axes in the results.
const std::vector<AxisDef>& axis_table() {
  static const std::vector<AxisDef> table = [] {
    std::vector<AxisDef> t;
    auto add = [&](AxisDef d) { t.push_back(std::move(d)); };
    AxisDef model{"model", &Cell::model, true, nullptr, model_choices};
    model.also_accepts = accepts_model_dir;
    model.also_valid = "a Hugging Face model directory";
    add(model);
    add({"objective", &Cell::objective, false, "sft", [] { return objective_names(); }});
    add({"dtype", &Cell::dtype, false, "float32", [] { return dtype_names(); }});
    add({"batch", &Cell::batch, false, 1, {}, 1});
    // Required unless measure.max_seq_len searches for it (checked in parse_scenario, which sees both).
    add({"seq_len", &Cell::seq_len, false, nullptr, {}, 2, false, "a max_seq_len search"});
    add({"impl", &Cell::impl, true, nullptr, strategy_names});
    add({"partition", &Cell::partition, false, nullptr, {}, 1, false, "seq_len"});
    add({"logits_partition", &Cell::logits_partition, false, nullptr, {}, 1, false, "seq_len"});
    add({"lora_rank", &Cell::lora_rank, false, 0, {}, 0});
    add({"lora_alpha", &Cell::lora_alpha, false, 64.0, {}, 0, true});
    add({"group", &Cell::group, false, 8, {}, 1});
    add({"prompt_len", &Cell::prompt_len, false, -1, {}, -1});
    add({"padding", &Cell::padding, false, false, {}});
    add({"beta", &Cell::beta, false, 0.1, {}, 0});
    add({"epsilon", &Cell::epsilon, false, 0.2, {}, 0});
    return t;
  }();
  return table;
}

const AxisDef* find_axis(const std::string& key) {
  for (const auto& d : axis_table())
    if (d.key == key) return &d;
  return nullptr;
}

std::vector<GridAxis> parse_grid(const json& g) {
  if (!g.is_object())
    input_error(fmt::format("grid: expected an object, got {}", type_word(g)),
                "an object of grid keys: " + join(grid_keys()));
  for (const auto& [key, value] : g.items())
    if (!find_axis(key)) input_error(fmt::format("unknown grid key '{}'", key), join(grid_keys()));
  std::vector<GridAxis> axes;
  for (const auto& def : axis_table()) {
    GridAxis axis{def.key, {}, g.contains(def.key)};
    if (!axis.given) {
      if (def.required) input_error(fmt::format("grid: missing key '{}'", def.key), def.valid());
      axis.values.push_back(def.fallback);
    } else {
      const json& v = g.at(def.key);
      const std::string where = "grid." + def.key;
      if (!v.is_array()) {
        axis.values.push_back(def.check(v, where));
      } else {
        if (v.empty()) input_error(where + ": empty list", def.valid());
        for (size_t i = 0; i < v.size(); ++i)
          axis.values.push_back(def.check(v[i], fmt::format("{}[{}]", where, i)));
      }
    }
    axes.push_back(std::move(axis));
  }
  return axes;
}

void resolve_partitions(Cell& c) {
  if (c.partition == 0) c.partition = c.seq_len;
  if (c.logits_partition == 0) c.logits_partition = c.seq_len;
}

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
      t.repeat = read_int(value, "measure.time.repeat", 1, "integers >= 1");
    else
      input_error(fmt::format("unknown measure.time key '{}'", key), "warmup, repeat");
  }
  return t;
}

std::string parse_grad_error(const json& v) {
  const std::string valid = "{\"reference\": \"float64\"}, true, false";
  if (v.is_boolean()) return v.get<bool>() ? "float64" : "";
  if (!v.is_object())
    input_error(fmt::format("measure.grad_error: expected an object or false, got {}", show(v)), valid);
  std::string ref = "float64";
  for (const auto& [key, value] : v.items()) {
    if (key != "reference") input_error(fmt::format("unknown measure.grad_error key '{}'", key), "reference");
    ref = read_string(value, "measure.grad_error.reference", "float64");
    if (ref != "float64")
      input_error(fmt::format("measure.grad_error.reference: unknown dtype '{}'", ref), "float64");
  }
  return ref;
}

std::optional<MeasureSpec::MaxSeqLen> parse_max_seq_len(const json& v) {
  const std::string valid = "{\"budget_bytes\": N, \"granularity\": 256, \"upper\": N}, or false";
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
    else
      input_error(fmt::format("unknown measure.max_seq_len key '{}'", key),
                  "budget_bytes, granularity, upper");
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
      {"grad_error", [](MeasureSpec& m, const json& v) { m.grad_error_reference = parse_grad_error(v); }},
      {"timeline", [](MeasureSpec& m, const json& v) { m.timeline = read_bool(v, "measure.timeline"); }},
      {"max_seq_len", [](MeasureSpec& m, const json& v) { m.max_seq_len = parse_max_seq_len(v); }},
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
      {"name", [](Scenario& s, const json& v) { s.name = read_string(v, "name", "a string"); }},
      {"description",
       [](Scenario& s, const json& v) { s.description = read_string(v, "description", "a string"); }},
      {"device",
       [](Scenario& s, const json& v) {
         s.settings.device = read_string(v, "device", "cpu, cuda");
         if (s.settings.device != "cpu" && s.settings.device != "cuda")
           input_error(fmt::format("device: unknown device '{}'", s.settings.device), "cpu, cuda");
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
         const std::string valid = "a path to a JSON file of token-id lists, e.g. [[1, 2, 3], [4, 5]]";
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
      {"grid", [](Scenario& s, const json& v) { s.grid = parse_grid(v); }},
      {"measure", [](Scenario& s, const json& v) { s.settings.measure = MeasureSpec::from_json(v); }},
  };
  return table;
}

}  // namespace

// ---- public
// -------------------------------------------------------------------------------------------------

const std::vector<std::string>& grid_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const auto& d : axis_table()) k.push_back(d.key);
    return k;
  }();
  return keys;
}

const std::vector<std::string>& dtype_names() {
  static const std::vector<std::string> names = {"float32", "bfloat16", "float64"};
  return names;
}

json MeasureSpec::to_json() const {
  json j;
  j["memory"] = memory;
  j["budget_bytes"] = budget_bytes ? json(*budget_bytes) : json(nullptr);
  j["time"] = time.enabled ? json{{"warmup", time.warmup}, {"repeat", time.repeat}} : json(false);
  j["grad_error"] = grad_error_reference.empty() ? json(false) : json{{"reference", grad_error_reference}};
  j["timeline"] = timeline;
  if (max_seq_len)
    j["max_seq_len"] = {
        {"budget_bytes", max_seq_len->budget_bytes ? json(*max_seq_len->budget_bytes) : json(nullptr)},
        {"granularity", max_seq_len->granularity},
        {"upper", max_seq_len->upper}};
  return j;
}

MeasureSpec MeasureSpec::from_json(const json& j) {
  const auto valid = join(keys_of(measure_table()));
  if (!j.is_object())
    input_error(fmt::format("measure: expected an object, got {}", type_word(j)),
                "an object of keys " + valid);
  MeasureSpec m;
  for (const auto& [key, value] : j.items()) {
    auto it = std::find_if(measure_table().begin(), measure_table().end(),
                           [&](const KeyDef& d) { return d.key == key; });
    if (it == measure_table().end()) input_error(fmt::format("unknown measure key '{}'", key), valid);
    it->parse(m, value);
  }
  return m;
}

json Cell::axes() const {
  json j = json::object();
  for (const auto& d : axis_table()) j[d.key] = d.read(*this);
  return j;
}

Cell Cell::from_axes(const json& axes) {
  if (!axes.is_object()) input_error("axes: expected an object", join(grid_keys()));
  for (const auto& [key, value] : axes.items())
    if (!find_axis(key)) input_error(fmt::format("unknown grid key '{}'", key), join(grid_keys()));
  Cell c;
  for (const auto& d : axis_table()) {
    if (!axes.contains(d.key)) input_error(fmt::format("axes: missing key '{}'", d.key), d.valid());
    d.assign(c, d.check(axes.at(d.key), "axes." + d.key));
  }
  resolve_partitions(c);
  return c;
}

std::string Cell::label(const std::vector<std::string>& keys) const {
  std::string out;
  for (const auto& key : keys) {
    const AxisDef* d = find_axis(key);
    if (!d) continue;
    const json v = d->read(*this);
    out +=
        fmt::format("{}{}={}", out.empty() ? "" : " ", key, v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out;
}

size_t Scenario::cell_count() const {
  size_t n = 1;
  for (const auto& a : grid) n *= a.values.size();
  return n;
}

std::vector<Cell> Scenario::expand() const {
  std::vector<Cell> cells;
  if (grid.empty()) return cells;
  std::vector<size_t> index(grid.size(), 0);  // an odometer over the axes, last digit fastest
  for (size_t n = cell_count(); n > 0; --n) {
    Cell c;
    for (size_t a = 0; a < grid.size(); ++a) find_axis(grid[a].key)->assign(c, grid[a].values[index[a]]);
    resolve_partitions(c);
    cells.push_back(std::move(c));
    for (size_t a = grid.size(); a-- > 0;) {
      if (++index[a] < grid[a].values.size()) break;
      index[a] = 0;
    }
  }
  return cells;
}

std::vector<std::string> Scenario::varying_keys() const {
  std::vector<std::string> keys;
  for (const auto& a : grid)
    if (a.values.size() > 1) keys.push_back(a.key);
  return keys;
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
  if (!s.settings.data_path.empty()) {
    for (const auto& a : s.grid)
      if (a.key == "objective")
        for (const auto& v : a.values)
          if (v != "sft")
            input_error(fmt::format("data: a data file feeds SFT cells only; the grid has objective '{}'",
                                    v.get<std::string>()),
                        "objective sft with data, or no data key");
  }
  s.source = j;
  return s;
}

Scenario parse_scenario_text(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    if (auto p = what.find("] "); what.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      what = what.substr(p + 2);  // the library's error id means nothing to a user
    input_error(fmt::format("malformed JSON in '{}': {}", origin, what),
                "a JSON object like scenarios/quickstart.json");
  }
  return parse_scenario(j);
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
  Scenario s = parse_scenario_text(buf.str(), path);
  if (!s.source.contains("name")) s.name = fs::path(path).stem().string();
  return s;
}

}  // namespace bpbench
