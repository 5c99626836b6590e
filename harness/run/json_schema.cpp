// json_schema.cpp: json_schema.h.
#include "harness/run/json_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "harness/run/schema_texts.h"

namespace bpbench {

using nlohmann::json;

namespace {

const std::set<std::string>& constraining_keywords() {
  static const std::set<std::string> k = {
      "type",  "enum",     "const", "minimum", "exclusiveMinimum",    "properties", "required",
      "items", "minItems", "anyOf", "$ref",    "additionalProperties"};
  return k;
}

const std::set<std::string>& documenting_keywords() {
  static const std::set<std::string> k = {"$schema", "$id",     "$defs",    "$comment",
                                          "title",   "default", "examples", "description"};
  return k;
}

std::string type_of(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    case json::value_t::string:
      return "string";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    default:
      return "unknown";
  }
}

bool has_type(const json& v, const std::string& type) {
  if (type == "number") return v.is_number();
  if (type == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  return type_of(v) == type;
}

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::string at(const std::string& path) {
  return path.empty() ? "(top level)" : path;
}

class Validator {
 public:
  explicit Validator(const json& root) : root_(root) {}

  std::optional<std::string> check(const json& schema, const json& v, const std::string& path) const {
    if (schema.is_boolean())
      return schema.get<bool>() ? std::nullopt
                                : std::optional<std::string>(fmt::format("{}: not allowed here", at(path)));
    if (schema.contains("$ref")) return check(resolve(schema.at("$ref").get<std::string>()), v, path);
    if (schema.contains("type")) {
      const json& t = schema.at("type");
      const std::vector<std::string> types =
          t.is_array() ? t.get<std::vector<std::string>>() : std::vector<std::string>{t.get<std::string>()};
      if (std::none_of(types.begin(), types.end(), [&](const std::string& x) { return has_type(v, x); }))
        return fmt::format("{}: expected {}, got {} {}", at(path), fmt::join(types, " or "), type_of(v),
                           shown(v));
    }
    if (schema.contains("enum")) {
      const json& e = schema.at("enum");
      if (std::find(e.begin(), e.end(), v) == e.end())
        return fmt::format("{}: {} is not one of {}", at(path), shown(v), e.dump());
    }
    if (schema.contains("const") && schema.at("const") != v)
      return fmt::format("{}: {} is not {}", at(path), shown(v), schema.at("const").dump());
    if (v.is_number()) {
      const double x = v.get<double>();
      if (schema.contains("minimum") && x < schema.at("minimum").get<double>())
        return fmt::format("{}: {} is below the minimum {}", at(path), shown(v), schema.at("minimum").dump());
      if (schema.contains("exclusiveMinimum") && x <= schema.at("exclusiveMinimum").get<double>())
        return fmt::format("{}: {} must be above {}", at(path), shown(v),
                           schema.at("exclusiveMinimum").dump());
    }
    if (v.is_object()) {
      if (auto why = check_object(schema, v, path)) return why;
    }
    if (v.is_array()) {
      if (schema.contains("minItems") && v.size() < schema.at("minItems").get<size_t>())
        return fmt::format("{}: {} items, at least {} expected", at(path), v.size(),
                           schema.at("minItems").get<size_t>());
      if (schema.contains("items"))
        for (size_t i = 0; i < v.size(); ++i)
          if (auto why = check(schema.at("items"), v[i], fmt::format("{}[{}]", path, i))) return why;
    }
    if (schema.contains("anyOf")) {
      std::vector<std::string> reasons;
      for (const auto& option : schema.at("anyOf")) {
        auto why = check(option, v, path);
        if (!why) return std::nullopt;
        reasons.push_back(*why);
      }
      // The closest option's reason: the one that got furthest into the value (the longest path), and at the
      // same depth one whose type matched (not "expected null" for an object that broke the object's rules).
      const auto rank = [](const std::string& r) {
        const size_t depth = r.find(": ");
        return std::make_pair(depth, r.compare(depth + 2, 9, "expected ") != 0);
      };
      const auto best = rank(
          *std::max_element(reasons.begin(), reasons.end(),
                            [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); }));
      if (best.second || best.first != at(path).size())  // deeper in, or not about this value's type
        for (const auto& r : reasons)
          if (rank(r) == best) return r;
      // Every option wanted another type here: "expected null or number, got string "x"".
      std::vector<std::string> wanted;
      for (const auto& r : reasons) {
        const size_t from = r.find(": expected ") + 11, to = r.find(", got ");
        if (rank(r) == best && to != std::string::npos) wanted.push_back(r.substr(from, to - from));
      }
      return fmt::format("{}: expected {}, got {} {}", at(path), fmt::join(wanted, " or "), type_of(v),
                         shown(v));
    }
    return std::nullopt;
  }

 private:
  std::optional<std::string> check_object(const json& schema, const json& v, const std::string& path) const {
    const auto child = [&](const std::string& key) { return path.empty() ? key : path + "." + key; };
    if (schema.contains("required"))
      for (const auto& key : schema.at("required"))
        if (!v.contains(key.get<std::string>()))
          return fmt::format("{}: missing \"{}\"", at(path), key.get<std::string>());
    const json* properties = schema.contains("properties") ? &schema.at("properties") : nullptr;
    for (const auto& [key, value] : v.items()) {
      if (properties && properties->contains(key)) {
        if (auto why = check(properties->at(key), value, child(key))) return why;
      } else if (schema.contains("additionalProperties")) {
        const json& extra = schema.at("additionalProperties");
        if (extra.is_boolean() && !extra.get<bool>()) {
          std::vector<std::string> known;
          if (properties)
            for (const auto& [name, _] : properties->items()) known.push_back(name);
          return fmt::format("{}: unknown field \"{}\" (valid: {})", at(path), key, fmt::join(known, ", "));
        }
        if (auto why = check(extra, value, child(key))) return why;
      }
    }
    return std::nullopt;
  }

  const json& resolve(const std::string& ref) const {
    const std::string prefix = "#/$defs/";
    if (ref.rfind(prefix, 0) != 0 || !root_.contains("$defs") ||
        !root_.at("$defs").contains(ref.substr(prefix.size())))
      throw std::logic_error(fmt::format("schema: unresolvable $ref '{}'", ref));
    return root_.at("$defs").at(ref.substr(prefix.size()));
  }

  const json& root_;
};

void check_keywords(const json& schema, const std::string& where) {
  if (!schema.is_object()) return;
  for (const auto& [key, value] : schema.items()) {
    if (!constraining_keywords().count(key) && !documenting_keywords().count(key))
      throw std::logic_error(
          fmt::format("schema: {} uses '{}', which bpbench's validator does not take", where, key));
    if (key == "properties" || key == "$defs")
      for (const auto& [name, sub] : value.items()) check_keywords(sub, where + "." + name);
    else if (key == "items" || key == "additionalProperties")
      check_keywords(value, where + "." + key);
    else if (key == "anyOf")
      for (const auto& sub : value) check_keywords(sub, where + ".anyOf");
  }
}

json parse_schema(const char* text, const char* name) {
  json schema;
  try {
    schema = json::parse(text);
  } catch (const json::parse_error& e) {
    throw std::logic_error(fmt::format("schema {} is not valid JSON: {}", name, e.what()));
  }
  check_keywords(schema, name);
  return schema;
}

}  // namespace

std::optional<std::string> schema_violation(const json& schema, const json& doc) {
  return Validator(schema).check(schema, doc, "");
}

void check_schema_keywords(const json& schema) {
  check_keywords(schema, "schema");
}

const json& results_schema() {
  static const json schema = parse_schema(schema_texts::kResults, "reports/results.schema.json");
  return schema;
}

const json& scenario_schema() {
  static const json schema = parse_schema(schema_texts::kScenario, "scenarios/scenario.schema.json");
  return schema;
}

const json& estimate_schema() {
  static const json schema = parse_schema(schema_texts::kEstimate, "reports/estimate.schema.json");
  return schema;
}

}  // namespace bpbench
