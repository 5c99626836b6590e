// scenario_grid.cpp: the grid keys, one row each (parser, default, "(valid: ...)"), and what a scenario's
// grid becomes: cells, expanded in the table's order with the last row varying fastest.
//
// Adding a grid key is one row in axis_table(); error messages and the list of known keys follow from it.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <variant>

#include "harness/model/hf_model.h"
#include "harness/model/model_config.h"
#include "harness/objectives/objective.h"
#include "harness/run/scenario.h"
#include "harness/run/scenario_read.h"
#include "impls/interface/strategy.h"
#include "impls/machinery/dist_common.h"
#include "impls/machinery/offload.h"

namespace bpbench {

using nlohmann::json;
using namespace scenario_detail;

namespace {

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
  // A key added after results files were first written: absent from a file's axes, it has its fallback.
  bool absent_in_old_results = false;

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
            // also_accepts first: it checks a value that is a choice's name and also what it accepts.
            auto names = choices();
            if (!(also_accepts && also_accepts(s, where)) &&
                std::find(names.begin(), names.end(), s) == names.end())
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
// A preset's name is the preset unless it is also a model directory here, which then wins (as in
// cell_job.cpp's load_model and `bpbench estimate`).
bool accepts_model_dir(const std::string& value, const std::string& where) {
  namespace fs = std::filesystem;
  const auto presets = model_choices();
  if (std::find(presets.begin(), presets.end(), value) != presets.end() && !is_hf_model_dir(value))
    return false;
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
    // Peers pass here so results files can hold them; a scenario refuses them (scenario.cpp).
    add({"impl", &Cell::impl, true, nullptr, recorded_impl_names});
    add({"partition", &Cell::partition, false, nullptr, {}, 1, false, "seq_len"});
    add({"logits_partition", &Cell::logits_partition, false, nullptr, {}, 1, false, "seq_len"});
    AxisDef offload{"offload", &Cell::offload, false, "none", [] { return offload_names(); }};
    offload.absent_in_old_results = true;
    add(offload);
    AxisDef ulysses_degree{"ulysses_degree", &Cell::ulysses_degree, false, 1, {}, 1};
    ulysses_degree.absent_in_old_results = true;
    add(ulysses_degree);
    AxisDef sharding{"sharding", &Cell::sharding, false, "zero2", [] { return dist::sharding_names(); }};
    sharding.absent_in_old_results = true;
    add(sharding);
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

void resolve_partitions(Cell& c) {
  if (c.partition == 0) c.partition = c.seq_len;
  if (c.logits_partition == 0) c.logits_partition = c.seq_len;
}

}  // namespace

std::vector<GridAxis> scenario_detail::parse_grid(const json& g) {
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
    if (!axes.contains(d.key)) {
      if (!d.absent_in_old_results) input_error(fmt::format("axes: missing key '{}'", d.key), d.valid());
      d.assign(c, d.fallback);
      continue;
    }
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

}  // namespace bpbench
