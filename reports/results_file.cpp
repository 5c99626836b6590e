// results_file.cpp: loading and checking results.json, and the formatters shared by the report and compare
// (see results_file.h).
#include "reports/results_file.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "harness/run/json_schema.h"
#include "harness/run/results.h"
#include "harness/run/scenario.h"
#include "reports/results_json.h"

namespace bpbench {

using nlohmann::json;
namespace fs = std::filesystem;
using namespace results_json;  // field

fs::path results_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? path / "results.json" : path;
}

// ---- shared helpers ---------------------------------------------------------------------------------------

void check_results(const json& doc, const std::string& origin) {
  if (!doc.is_object())
    input_error(fmt::format("'{}' is not a bpbench results file (not a JSON object)", origin),
                "a results.json written by bpbench run");
  const json& schema = field(doc, "schema");
  if (!schema.is_string())
    input_error(fmt::format("'{}' is not a bpbench results file (no \"schema\")", origin),
                "a results.json written by bpbench run");
  if (schema.get<std::string>() != kResultsSchema)  // load_results upgrades older versions (results.h)
    input_error(fmt::format("'{}' has schema '{}', which this bpbench cannot read", origin,
                            schema.get<std::string>()),
                kResultsSchema);
  const json& cells = field(doc, "cells");
  if (!cells.is_array())
    input_error(fmt::format("'{}': \"cells\" is not a list", origin),
                "a results.json written by bpbench run");
  for (size_t i = 0; i < cells.size(); ++i) {
    if (!field(cells[i], "axes").is_object() || !field(cells[i], "status").is_string())
      input_error(fmt::format("'{}': cells[{}] lacks an \"axes\" object or a \"status\" string", origin, i),
                  "a results.json written by bpbench run");
  }
}

json load_results(const fs::path& path) {
  const fs::path file = results_file(path);
  std::error_code ec;
  if (!fs::exists(file, ec))
    input_error(fmt::format("results file '{}' does not exist", file.string()), "a results.json");
  std::ifstream in(file, std::ios::binary);
  if (!in || fs::is_directory(file, ec))
    input_error(fmt::format("cannot read results file '{}'", file.string()), "a readable results.json");
  std::stringstream buf;
  buf << in.rdbuf();
  json doc;
  try {
    doc = json::parse(buf.str());
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    const auto colon = what.find(": ");  // drop nlohmann's "[json.exception.parse_error.101] " prefix
    input_error(fmt::format("'{}' is not valid JSON: {}", file.string(),
                            colon == std::string::npos ? what : what.substr(colon + 2)),
                "a results.json written by bpbench run");
  }
  if (doc.is_object()) upgrade_results(doc, file.string());  // an older version, read as the current one
  check_results(doc, file.string());
  // Then every field against the published schema: one line naming the first that does not match.
  if (const auto why = schema_violation(results_schema(), doc))
    input_error(fmt::format("'{}': {}", file.string(), *why),
                "a results.json matching reports/results.schema.json");
  return doc;
}

json load_merged_results(const std::vector<fs::path>& paths) {
  if (paths.empty()) input_error("no results file given", "one or more results.json");
  json merged = load_results(paths[0]);
  if (paths.size() == 1) return merged;
  const fs::path first_dir = fs::absolute(results_file(paths[0])).parent_path();
  json sources =
      json::array({{{"file", results_file(paths[0]).string()}, {"meta", merged.value("meta", json())}}});
  for (size_t i = 1; i < paths.size(); ++i) {
    const json doc = load_results(paths[i]);
    const fs::path dir = fs::absolute(results_file(paths[i])).parent_path();
    for (json cell : doc.at("cells")) {
      if (cell.contains("memory") && cell["memory"].is_object())
        for (const char* key : {"timeline_file", "trace_file", "snapshot_file"})
          if (cell["memory"].contains(key) && cell["memory"][key].is_string())
            cell["memory"][key] =
                (dir / cell["memory"][key].get<std::string>()).lexically_relative(first_dir).string();
      merged["cells"].push_back(std::move(cell));
    }
    merged["cells_total"] = merged.value("cells_total", 0) + doc.value("cells_total", 0);
    merged["complete"] = merged.value("complete", false) && doc.value("complete", false);
    sources.push_back({{"file", results_file(paths[i]).string()}, {"meta", doc.value("meta", json())}});
  }
  merged["meta"]["merged_from"] = sources;
  return merged;
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes), gib = 1024.0 * 1024 * 1024, mib = 1024.0 * 1024;
  if (std::fabs(b) >= gib) return fmt::format("{:.2f} GiB", b / gib);
  if (std::fabs(b) >= 100 * mib) return fmt::format("{:.1f} MiB", b / mib);
  if (std::fabs(b) >= mib) return fmt::format("{:.2f} MiB", b / mib);
  if (b != 0 && std::fabs(b) < 0.0005 * mib) return b > 0 ? "<0.001 MiB" : "-<0.001 MiB";
  return fmt::format("{:.3f} MiB", b / mib);
}

std::string format_time(double s) {
  const double a = std::fabs(s);
  if (a >= 100) return fmt::format("{:.0f}", s);
  if (a >= 10) return fmt::format("{:.1f}", s);
  if (a >= 1) return fmt::format("{:.2f}", s);
  return fmt::format("{:.3g}", s);
}

std::string format_flops(int64_t flops) {
  const double f = static_cast<double>(flops);
  const char* prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  size_t i = 0;
  double scaled = f;
  while (std::fabs(scaled) >= 1000 && i + 1 < std::size(prefixes)) scaled /= 1000, ++i;
  return fmt::format("{:.3g} {}FLOP", scaled, prefixes[i]);
}

std::string axis_value_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15)
      return std::to_string(static_cast<int64_t>(d));
    return fmt::format("{:g}", d);
  }
  if (v.is_null()) return "null";
  return v.dump();
}

std::vector<std::string> ordered_axis_keys(const std::vector<json>& axes_list) {
  std::set<std::string> all;
  for (const auto& axes : axes_list)
    if (axes.is_object())
      for (const auto& [k, v] : axes.items()) all.insert(k);
  std::vector<std::string> out;
  for (const auto& k : grid_keys())
    if (all.count(k)) out.push_back(k);
  for (const auto& k : all)
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  return out;
}

std::vector<std::string> varying_axis_keys(const std::vector<json>& axes_list) {
  std::vector<std::string> out;
  for (const auto& k : ordered_axis_keys(axes_list)) {
    std::set<std::string> values;  // a cell without the key (a max-length search has no seq_len) adds none
    for (const auto& axes : axes_list) {
      if (!axes.is_object()) continue;
      auto it = axes.find(k);
      if (it != axes.end()) values.insert(axis_value_text(*it));
    }
    if (values.size() > 1) out.push_back(k);
  }
  return out;
}

std::string axes_label(const json& axes, const std::vector<std::string>& keys) {
  std::vector<std::string> parts;
  for (const auto& k : keys) {
    if (!axes.is_object()) break;
    auto it = axes.find(k);
    if (it != axes.end()) parts.push_back(k + "=" + axis_value_text(*it));
  }
  return fmt::format("{}", fmt::join(parts, " "));
}

}  // namespace bpbench
