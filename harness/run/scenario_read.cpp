// scenario_read.cpp: the checked readers behind every scenario key.
#include "harness/run/scenario_read.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

namespace bpbench::scenario_detail {

using nlohmann::json;

std::string join(const std::vector<std::string>& items) {
  return fmt::format("{}", fmt::join(items, ", "));
}

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

std::string read_choice(const json& v, const std::string& where, const std::string& what,
                        const std::vector<std::string>& choices, const std::string& valid) {
  const std::string listed = valid.empty() ? join(choices) : valid;
  std::string s = read_string(v, where, listed);
  if (std::find(choices.begin(), choices.end(), s) == choices.end())
    input_error(fmt::format("{}: unknown {} '{}'", where, what, s), listed);
  return s;
}

}  // namespace bpbench::scenario_detail
