// results_json.h: lenient readers of results.json fields for `report` and `compare`, which read files written
// by any bpbench version: a missing key or a value of the wrong type reads as "absent", never an exception.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace bpbench::results_json {

using nlohmann::json;

inline const json& field(const json& j, const char* key) {
  static const json null_value;
  if (!j.is_object()) return null_value;
  auto it = j.find(key);
  return it == j.end() ? null_value : *it;
}

inline std::optional<double> number(const json& j, const char* key) {
  const json& v = field(j, key);
  if (!v.is_number()) return std::nullopt;
  return v.get<double>();
}

inline std::optional<int64_t> integer(const json& j, const char* key) {
  const json& v = field(j, key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float() && std::isfinite(v.get<double>())) return std::llround(v.get<double>());
  return std::nullopt;
}

inline std::string text(const json& j, const char* key) {
  const json& v = field(j, key);
  return v.is_string() ? v.get<std::string>() : std::string();
}

inline bool flag(const json& j, const char* key) {
  const json& v = field(j, key);
  return v.is_boolean() && v.get<bool>();
}

}  // namespace bpbench::results_json
